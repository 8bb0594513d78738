"""Finding a recipe from what a user typed: a file, a shipped recipe's name, or a run dir."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_recipes() -> dict[str, Path]:
    """Recipes shipped with corl, by name (file stem)."""
    try:
        root = resources.files("corl.recipes")  # an installed wheel maps recipes/ here
    except ModuleNotFoundError:
        root = Path(__file__).resolve().parents[2] / "recipes"  # a source checkout (editable install)
    return {p.stem: Path(str(p)) for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".toml")}


def resolve(arg: str, overrides: list[str]) -> tuple[object, list[str], str | None]:
    """A recipe file, a shipped recipe's name, or a run dir (its resolved ``recipe.json``).

    Returns the recipe (path or table), the overrides, and for a table the file it came from.
    """
    path = Path(arg)
    if path.is_dir() and (path / "recipe.json").exists():
        import json

        source = (path / "recipe.source").read_text().strip() if (path / "recipe.source").exists() else ""
        data = json.loads((path / "recipe.json").read_text())
        return data, [f"run.output_dir={json.dumps(str(path))}", *overrides], source or str(path / "recipe.json")
    if not path.exists() and not arg.endswith(".toml") and arg in shipped_recipes():
        return str(shipped_recipes()[arg]), overrides, None
    return arg, overrides, None

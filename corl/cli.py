"""``corl`` command line: run | validate | plugins | recipes.

User mistakes (:class:`corl.errors.CorlError`) print one line per problem, no traceback, exit 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from importlib import resources
from pathlib import Path

from corl.errors import CorlError


def shipped_recipes() -> dict[str, Path]:
    """Recipes shipped with corl, by name (file stem)."""
    try:
        root = resources.files("corl.recipes")  # an installed wheel maps recipes/ here
    except ModuleNotFoundError:
        root = Path(__file__).resolve().parents[1] / "recipes"  # a source checkout (editable install)
    return {p.stem: Path(str(p)) for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".toml")}


def _resolve_recipe(arg: str, overrides: list[str]) -> tuple[object, list[str]]:
    """A recipe file, a shipped recipe's name, or a run dir (its resolved ``recipe.json``)."""
    path = Path(arg)
    if path.is_dir() and (path / "recipe.json").exists():
        import json

        return json.loads((path / "recipe.json").read_text()), [f"run.output_dir={json.dumps(str(path))}", *overrides]
    if not path.exists() and not arg.endswith(".toml") and arg in shipped_recipes():
        return str(shipped_recipes()[arg]), overrides
    return arg, overrides


def cmd_validate(args) -> int:
    from corl.recipe import load_recipe

    spec = load_recipe(*_resolve_recipe(args.recipe, args.set))
    agents = ", ".join(f"{a.name} ({a.agent.config.model}, {a.optimizer.type})" for a in spec.agents)
    print(f"{spec.source}: ok: {len(spec.agents)} agents [{agents}], {spec.topology.type} topology, "
          f"{spec.voting.aggregator.type} voting n_votes={spec.voting.n_votes} n_train={spec.voting.n_train}, "
          f"{spec.run.steps} steps -> {spec.output_dir}")
    return 0


def cmd_run(args) -> int:
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runner import Run

    pm = make_plugin_manager()
    spec = load_recipe(*_resolve_recipe(args.recipe, args.set), registry=build_registry(pm))
    Run(spec, pm=pm, log=lambda msg: print(msg, file=sys.stderr), resume=args.resume, force=args.force).execute()
    return 0


def cmd_plugins(args) -> int:
    from corl.plugins import build_registry, describe, make_plugin_manager

    pm = make_plugin_manager()
    for row in describe(pm):
        print(f"{row['name']} {row['version']}: {', '.join(row['hooks'])}")
    print()
    for c in build_registry(pm):
        print(f"{c.kind:<10} {c.name:<14} {c.plugin}  {c.help}")
    return 0


def cmd_recipes(args) -> int:
    if args.action == "keys":
        from corl.plugins import build_registry, make_plugin_manager
        from corl.reference import render

        print(render(build_registry(make_plugin_manager())), end="")
        return 0
    recipes = shipped_recipes()
    if args.action == "ls":
        for name, path in recipes.items():
            first = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
            print(f"{name:<24} {first}")
        return 0
    if args.name not in recipes:
        raise CorlError(f"unknown recipe {args.name!r}; shipped: {', '.join(recipes)}")
    dest = Path(args.dest or f"{args.name}.toml")
    if dest.is_dir():
        dest = dest / f"{args.name}.toml"
    if dest.exists():
        raise CorlError(f"{dest} exists; not overwriting it")
    shutil.copyfile(recipes[args.name], dest)
    print(f"copied {args.name} -> {dest}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="corl", description="Co-RL: cooperative label-free multi-agent RL")
    sub = p.add_subparsers(dest="command", required=True)
    for name, fn, text in (("run", cmd_run, "run a recipe"), ("validate", cmd_validate, "check a recipe, load nothing")):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("recipe", help="a recipe file, the name of a shipped recipe, or a run dir")
        sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a recipe key, e.g. --set agents[0].sampler.temperature=0.8 (repeatable)")
        sp.set_defaults(fn=fn)
        if name == "run":
            sp.add_argument("--resume", action="store_true",
                            help="continue from the newest complete checkpoint in the run's output dir")
            sp.add_argument("--force", action="store_true", help="resume even if the recipe changed in a way that matters")
    sp = sub.add_parser("plugins", help="installed plugins, their versions, hooks and components")
    sp.set_defaults(fn=cmd_plugins)
    sp = sub.add_parser("recipes", help="list or copy the shipped recipes; `keys` prints every recipe key")
    sp.add_argument("action", choices=["ls", "cp", "keys"])
    sp.add_argument("name", nargs="?")
    sp.add_argument("dest", nargs="?")
    sp.set_defaults(fn=cmd_recipes)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "recipes" and args.action == "cp" and not args.name:
        parser().error("recipes cp needs a NAME")
    try:
        return args.fn(args)
    except CorlError as exc:
        for line in str(exc).splitlines():
            print(f"corl: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("corl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

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


def _resolve_recipe(arg: str, overrides: list[str]) -> tuple[object, list[str], str | None]:
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


def cmd_validate(args) -> int:
    from corl.recipe import load_recipe

    recipe, overrides, source = _resolve_recipe(args.recipe, args.set)
    spec = load_recipe(recipe, overrides, source=source)
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
    recipe, overrides, source = _resolve_recipe(args.recipe, args.set)
    spec = load_recipe(recipe, overrides, registry=build_registry(pm), source=source)
    Run(spec, pm=pm, log=lambda msg: print(msg, file=sys.stderr), resume=args.resume, force=args.force).execute()
    return 0


def _build_for_inspection(args, extra: list[str]):
    """A Run whose components are built (models loaded, nothing trained) for eval / cohort."""
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runner import Run

    data, overrides, source = _resolve_recipe(args.target, args.set)
    run_dir = Path(args.target) if Path(args.target).is_dir() else None
    if isinstance(data, str):
        from corl.recipe import read_toml

        data, source = read_toml(data), data
    if getattr(args, "model", None):  # evaluate exactly these models, set up like the first agent
        template = {k: v for k, v in data["agents"][0].items() if k not in ("name", "model", "optimizer", "frozen")}
        models = [m.partition("=") for m in args.model]
        bad = [m for m, sep, path in models if not sep or not path]
        if bad:
            raise CorlError(f"--model {bad[0]!r}: expected NAME=PATH (a zoo: name or a model folder)")
        data["agents"] = [{**template, "name": name, "model": path} for name, _, path in models]
        # nothing trains here: a topology that names the recipe's agents (ring, judge) does not apply
        data["topology"] = {"type": "self"}
        data.setdefault("run", {})["supervised"] = False
    elif run_dir is not None and not getattr(args, "base", False):
        final = run_dir / "checkpoints" / "final"
        for agent in data["agents"]:
            if (final / agent["name"]).is_dir():
                agent.update(model=str(final / agent["name"]), type="hf")
    pm = make_plugin_manager()
    spec = load_recipe(data, [*overrides, "run.observers=[]", "run.steps=0", *extra], registry=build_registry(pm),
                       source=source)
    run = Run(spec, pm=pm, log=lambda msg: print(msg, file=sys.stderr))
    run.setup()
    return run


def cmd_eval(args) -> int:
    import json

    extra = [f"eval.k={args.k}"] if args.k else []
    extra += [f"eval.size={args.size}"] if args.size is not None else []
    run = _build_for_inspection(args, extra)
    ev = run.spec.eval
    settings = {"prompts": len(run.eval_prompts), "k": ev.k, "temperature": ev.temperature,
                "greedy": "temperature 0 (argmax), 1 sample",
                "max_new_tokens": {s.name: getattr(s.sampler.config, "max_new_tokens", None) for s in run.agents},
                "models": {s.agent.name: getattr(s.agent.config, "model", "?") for s in run.agents}}
    with run.verifier.armed():
        results = run.evaluate(0)
    cohort = run.cohorts.get(0)
    if args.json:
        print(json.dumps({"settings": settings, "results": results, "cohort": cohort}, indent=2))
        return 0
    print(f"{settings['prompts']} held-out prompts; pass@1 and maj@{ev.k} from {ev.k} samples at temperature "
          f"{ev.temperature}; greedy is argmax decoding")
    cols = ["greedy", "pass@1", f"maj@{ev.k}", f"pass@{ev.k}"]
    print(f"{'model':<16}" + "".join(f"{c:>10}" for c in cols) + "  source")
    for name, r in results.items():
        print(f"{name:<16}" + "".join(f"{r[c]:>10.3f}" for c in cols) + f"  {settings['models'][name]}")
    if cohort and len(cohort["agents"]) > 1:
        print()
        _print_matrices(cohort)
    return 0


def _print_matrices(cohort) -> None:
    names = cohort["agents"]
    titles = {"agreement": "greedy answers agree", "phi": "correctness correlation (phi)",
              "same_wrong": "P(same wrong answer | both wrong)"}
    for key, title in titles.items():
        matrix = cohort.get(key)
        if matrix is None:
            continue
        print(f"{title}:")
        print(" " * 16 + "".join(f"{n[:9]:>10}" for n in names))
        for n, row in zip(names, matrix):
            print(f"{n:<16}" + "".join(f"{'-' if v is None else format(v, '.2f'):>10}" for v in row))


def cmd_cohort(args) -> int:
    import json

    from corl.cohort import label_disagreement, rank_cohorts
    from corl.evaluation import votes_of

    if args.prompts < 1:
        raise CorlError(f"--prompts {args.prompts}: must be at least 1")
    run = _build_for_inspection(args, [])
    if len(run.agents) < 2:
        raise CorlError("corl cohort needs at least two candidate agents in the recipe (or --model NAME=PATH twice)")
    prompts = run.train[: args.prompts]
    n = run.spec.voting.n_votes
    labels, strength = {}, []
    with run.verifier.armed():
        for slot in run.agents:
            rollout = slot.sampler.sample(slot.agent, prompts, n)
            votes = votes_of(rollout, run.verifier)
            pseudo = run.aggregator.aggregate(votes, run.verifier)
            labels[slot.name] = [p.answer for p in pseudo]
            strength.append(sum(p.share for p in pseudo) / len(pseudo))
        names = list(labels)
        disagreement = label_disagreement(labels, run.verifier)
    ranked = rank_cohorts(disagreement, strength, names)
    if args.json:
        print(json.dumps({"prompts": len(prompts), "n_votes": n, "strength": dict(zip(names, strength)),
                          "disagreement": disagreement, "ranked": ranked}, indent=2))
        return 0
    print(f"label-free: {len(prompts)} unlabeled prompts, {n} samples each; strength = mean vote share of the "
          "agent's own majority; disagreement = how often two agents' pseudo-labels differ")
    print(" " * 16 + "".join(f"{x[:9]:>10}" for x in names) + "  strength")
    for name, row, st in zip(names, disagreement, strength):
        print(f"{name:<16}" + "".join(f"{v:>10.2f}" for v in row) + f"  {st:>8.2f}")
    print("\ncohorts, best first (score = mean disagreement x weakest strength):")
    for c in ranked[:10]:
        print(f"  {' + '.join(c['agents']):<40} score {c['score']:.3f}  disagreement {c['disagreement']:.2f}  "
              f"weakest {c['weakest_strength']:.2f}  -> topology {c['topology']}")
    best = ranked[0]
    print(f"suggested: {' + '.join(best['agents'])} with topology = \"{best['topology']}\""
          + ("" if best["disagreement"] >= 0.05 else " (but they rarely disagree: little for peers to correct)"))
    return 0


def cmd_compare(args) -> int:
    from corl.compare import compare

    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        raise CorlError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise CorlError("--seeds: give at least one seed")
    from corl.claims import is_claims_file

    recipes, claims = [], [r for r in args.recipes if is_claims_file(r)]
    if len(claims) > 1:
        raise CorlError(f"two claims files given ({claims[0]}, {claims[1]}); a comparison reads one")
    for r in args.recipes:
        if r in claims:  # [regimes] / [[claims]] only: the claims this set of recipes tests
            continue
        recipe, _, _ = _resolve_recipe(r, [])
        if not isinstance(recipe, str):
            raise CorlError(f"{r}: corl compare takes recipe files or shipped recipe names, not run dirs")
        recipes.append(recipe)
    compare(recipes, seeds, Path(args.out), args.set, log=lambda msg: print(msg, file=sys.stderr),
            claims=claims[0] if claims else None, run=not args.tabulate)
    print(Path(args.out) / "results.md")
    return 0


def cmd_report(args) -> int:
    from corl.report import render_report

    print(render_report(args.run_dir))
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
    for name, fn, text in (("eval", cmd_eval, "evaluate models or a run's final checkpoints on a task"),
                           ("cohort", cmd_cohort, "rank candidate peers by label-free decorrelation")):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("target", help="a recipe file, a shipped recipe's name, or a run dir (its final checkpoints)")
        sp.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                        help="evaluate these models instead of the recipe's agents (repeatable)")
        sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a recipe key")
        sp.add_argument("--json", action="store_true", help="print JSON for machines")
        if name == "eval":
            sp.add_argument("--k", type=int, default=0, help="samples per prompt for pass@1 / maj@k (default: eval.k)")
            sp.add_argument("--size", type=int, default=None, help="held-out prompts (default: eval.size)")
            sp.add_argument("--base", action="store_true", help="with a run dir: evaluate the base models, not the final ones")
        else:
            sp.add_argument("--prompts", type=int, default=200, help="unlabeled prompts to sample (default 200)")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("compare", help="run recipes over several seeds and tabulate them (results.json, results.md)")
    sp.add_argument("recipes", nargs="+", help="recipe files or shipped recipe names")
    sp.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    sp.add_argument("--out", default="runs/compare", help="output folder (finished runs in it are reused)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override in every recipe")
    sp.add_argument("--tabulate", action="store_true",
                    help="run nothing: tabulate the finished runs in --out (unfinished recipes are left out)")
    sp.set_defaults(fn=cmd_compare)
    sp = sub.add_parser("report", help="render a run's curves and cohort heatmaps (PNG + HTML/Markdown)")
    sp.add_argument("run_dir")
    sp.set_defaults(fn=cmd_report)
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
        for line in str(exc).splitlines() if not exc.reported else ():
            print(f"corl: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("corl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

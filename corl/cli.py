"""``corl`` command line: run | validate | data | eval | cohort | screen | export | compare | report | plugins | env | recipes.

One ``cmd_NAME`` function runs each subcommand and one ``parse_NAME`` declares its arguments and
examples (``corl NAME --help``); :data:`SUBCOMMANDS` lists them.

User mistakes (:class:`corl.errors.CorlError`) print one line per problem, no traceback, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import traceback
from pathlib import Path

from corl.errors import CorlError
from corl.recipe.locate import resolve as resolve_recipe
from corl.recipe.locate import shipped_recipes

DEBUG_ENV = "CORL_DEBUG"  # print the traceback behind a component's one-line failure


def cmd_validate(args) -> int:
    from corl.plugins import registry_of
    from corl.recipe.components import model_facts
    from corl.recipe.validate import data_problems
    from corl.runtime import prepare

    if args.rows < 1:
        raise CorlError(f"--rows {args.rows}: must be at least 1")
    pm, spec = prepare(args.recipe, args.set)
    registry = registry_of(pm)  # the one the recipe was validated with
    # the task's data files, their first rows read as the run reads them (no model, no torch)
    problems = data_problems(spec, registry, args.rows)
    if problems:
        raise CorlError("\n".join(problems))
    # each agent as its type describes it (an agent type of a plugin need not name a model)
    agents = ", ".join(f"{a.name} ({model_facts(registry, a).model or a.agent.type}, {a.optimizer.type})"
                       for a in spec.agents)
    shaping = "".join(f", + {t.weight:g} x {t.name}" for t in spec.shaping)
    print(f"{spec.source}: ok: {len(spec.agents)} agents [{agents}], {spec.topology.type} topology{shaping}, "
          f"{spec.voting.aggregator.type} voting n_votes={spec.voting.n_votes} n_train={spec.voting.n_train}, "
          f"{spec.run.steps} steps -> {spec.output_dir}")
    return 0


def cmd_data(args) -> int:
    if args.action == "generate":
        from corl.tools.generate import cmd_generate

        return cmd_generate(args)
    from corl.tools.preview import preview

    return preview(args)


def cmd_run(args) -> int:
    from corl.runtime import Run, prepare

    pm, spec = prepare(args.recipe, args.set)  # a file, a shipped recipe's name or a run dir
    Run(spec, pm=pm, resume=args.resume, force=args.force, resume_from=args.resume_from).execute()
    return 0


def cmd_compare(args) -> int:
    from corl.tools.compare import compare

    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        raise CorlError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise CorlError("--seeds: give at least one seed")
    from corl.tools.claims import is_claims_file

    recipes, claims = [], [r for r in args.recipes if is_claims_file(r)]
    if len(claims) > 1:
        raise CorlError(f"two claims files given ({claims[0]}, {claims[1]}); a comparison reads one")
    for r in args.recipes:
        if r in claims:  # [regimes] / [[claims]] only: the claims this set of recipes tests
            continue
        recipe, _, _ = resolve_recipe(r, [])
        if not isinstance(recipe, str):
            raise CorlError(f"{r}: corl compare takes recipe files or shipped recipe names, not run dirs")
        recipes.append(recipe)
    compare(recipes, seeds, Path(args.out), args.set, claims=claims[0] if claims else None, run=not args.tabulate)
    print(Path(args.out) / "results.md")
    return 0


def cmd_report(args) -> int:
    from corl.tools.report import render_report

    print(render_report(args.run_dir))
    return 0


def cmd_plugins(args) -> int:
    import json

    from corl.plugins import build_registry, describe, make_plugin_manager

    pm = make_plugin_manager()
    rows, registry = describe(pm), build_registry(pm)
    for name, why in registry.failed.items():  # registration failures, besides import failures
        if not any(r["name"] == name and r["error"] for r in rows):
            rows = [{**r, "error": why} if r["name"] == name else r for r in rows]
    components = [{"kind": c.kind, "name": c.name, "plugin": c.plugin, "help": c.help} for c in registry]
    sections = [{"name": s.name, "plugin": s.plugin, "help": s.help} for s in registry.sections()]
    if args.json:
        print(json.dumps({"plugins": rows, "components": components, "sections": sections,
                          "ambiguous": registry.clash_lines()}, indent=2))
        return 0
    for row in rows:
        dist = f" ({row['distribution']} {row['version']})" if row["distribution"] else ""
        status = f"FAILED: {row['error']}" if row["error"] else ", ".join(row["hooks"])
        print(f"{row['name']}{dist}: {status}")
    print()
    for c in components:
        print(f"{c['kind']:<10} {c['name']:<14} {c['plugin']}  {c['help']}")
    for s in sections:
        print(f"{'section':<10} [{s['name']}]{'':<{max(0, 12 - len(s['name']))}} {s['plugin']}  {s['help']}")
    for line in registry.clash_lines():  # names two plugins share: a recipe qualifies them
        print(f"ambiguous: {line}")
    return 0


def cmd_recipes(args) -> int:
    if args.action == "keys":
        from corl.plugins import build_registry, make_plugin_manager
        from corl.tools.reference import render

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


def cmd_eval(args) -> int:
    from corl.tools.inspect import cmd_eval

    return cmd_eval(args)


def cmd_screen(args) -> int:
    from corl.tools.screen import cmd_screen

    return cmd_screen(args)


def cmd_cohort(args) -> int:
    from corl.tools.inspect import cmd_cohort

    return cmd_cohort(args)


def cmd_export(args) -> int:
    from corl.tools.export import cmd_export

    return cmd_export(args)


def cmd_env(args) -> int:
    from corl.tools.env import cmd_env

    return cmd_env(args)


class _Version(argparse.Action):
    """``corl --version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print corl's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from corl.plugins import DISTRIBUTION, corl_version

        print(f"{DISTRIBUTION} {corl_version()}")
        parser.exit()


def _add(sub, name: str, fn, help: str, *examples: str) -> argparse.ArgumentParser:
    """Subcommand ``name`` running ``fn``, its examples in the epilog of ``corl NAME --help``."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    sp = sub.add_parser(name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.set_defaults(fn=fn)
    return sp


def _recipe(sp: argparse.ArgumentParser, set_help: str = "override a recipe key") -> None:
    sp.add_argument("recipe", help="a recipe file, the name of a shipped recipe, or a run dir")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help=set_help)


_SET_HELP = "override a recipe key, e.g. --set agents[0].sampler.temperature=0.8 (repeatable)"


def _json(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--json", action="store_true", help="print JSON for machines")


def parse_run(sub) -> None:
    sp = _add(sub, "run", cmd_run, "run a recipe", "corl run recipes/three_agent_ring.toml",
              "corl run three_agent_ring --set run.steps=5 --set run.name=short", "corl run three_agent_ring --resume", "corl run runs/three_agent_ring --resume-from step-000040")
    _recipe(sp, _SET_HELP)
    sp.add_argument("--resume", action="store_true",
                    help="continue from the newest checkpoint in the run's output dir that verifies (one "
                         "that does not is named, and the one before it used)")
    sp.add_argument("--resume-from", metavar="step-N", default=None,
                    help="continue from exactly this checkpoint (e.g. step-000040); refused, naming what is "
                         "wrong, unless it verifies")
    sp.add_argument("--force", action="store_true",
                    help="replace an earlier run in the output dir (finished or started); with --resume, "
                         "resume even if the recipe changed in a way that matters")


def parse_validate(sub) -> None:
    sp = _add(sub, "validate", cmd_validate, "check a recipe and the first rows of its data files; load no model",
              "corl validate recipes/data_file.toml", "corl validate three_agent_ring --set voting.n_votes=4")
    _recipe(sp, _SET_HELP)
    sp.add_argument("--rows", type=int, default=50, help="rows of each data file to read and check (default 50)")


def _target(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("target", help="a recipe file, a shipped recipe's name, or a run dir (its final checkpoints)")
    sp.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="evaluate these models instead of the recipe's agents (repeatable)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a recipe key")
    _json(sp)


def parse_eval(sub) -> None:
    sp = _add(sub, "eval", cmd_eval, "evaluate models or a run's final checkpoints on a task",
              "corl eval runs/corl", "corl eval runs/corl --base --json", "corl eval three_agent_ring --size 100 --k 4")
    _target(sp)
    sp.add_argument("--k", type=int, default=0, help="samples per prompt for pass@1 / maj@k (default: eval.k)")
    sp.add_argument("--size", type=int, default=None, help="held-out prompts (default: eval.size)")
    sp.add_argument("--base", action="store_true", help="with a run dir: evaluate the base models, not the final ones")
    sp.add_argument("--step", type=int, default=None, metavar="N",
                    help="with a run dir: evaluate step N's checkpoint (checkpoints/step-N), not the final export")
    sp.add_argument("--samples", type=int, default=0, metavar="N",
                    help="with --json: include each agent's first N evaluated completions (prompt, text, "
                         "extracted answer, maj@k label, hidden label)")


def parse_cohort(sub) -> None:
    sp = _add(sub, "cohort", cmd_cohort, "rank candidate peers by label-free decorrelation",
              "corl cohort three_agent_ring --prompts 100")
    _target(sp)
    sp.add_argument("--prompts", type=int, default=200, help="unlabeled prompts to sample (default 200)")


def parse_screen(sub) -> None:
    sp = _add(sub, "screen", cmd_screen, "before training: each agent's pass@1 / maj@k, shared wrong answers, "
              "how often peers correct an agent, positional biases",
              "corl screen recipes/real/max3_pooled.toml --prompts 32 --k 8", "corl screen three_agent_ring --json")
    _target(sp)
    sp.add_argument("--split", choices=["eval", "train", "seed"], default="eval",
                    help="prompts to screen: eval (labelled, default), train (label-free where unlabelled), seed")
    sp.add_argument("--prompts", type=int, default=64, help="prompts to screen (default 64)")
    sp.add_argument("--k", type=int, default=0, help="samples per prompt (default: eval.k)")
    sp.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")


def parse_data(sub) -> None:
    sp = _add(sub, "data", cmd_data, "look at a recipe's data as its agents will see it, or write a generated task's",
              "corl data preview recipes/data_file.toml --rows 2", "corl data generate drills data/drills --set forms='[\"max\"]'")
    actions = sp.add_subparsers(dest="action", required=True, metavar="{preview,generate}")
    sp = _add(actions, "preview", cmd_data, "each agent's exact prompt string, with labels",
              "corl data preview recipes/data_file.toml --rows 2", "corl data preview three_agent_ring --split eval --json")
    sp.add_argument("recipe", help="a recipe file, the name of a shipped recipe, or a run dir")
    sp.add_argument("--rows", type=int, default=3, help="prompts to show (default 3)")
    sp.add_argument("--split", default="train", choices=["train", "eval", "seed"], help="which split (default train)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a recipe key")
    _json(sp)
    sp = _add(actions, "generate", cmd_data,
              "write a generated task's splits as JSONL files (OUT/seed.jsonl, train.jsonl, eval.jsonl) that the "
              "jsonl task reads back",
              "corl data generate word_problems data/wp --set train_size=100 --set max_ops=2",
              "corl data generate drills data/drills --set forms='[\"max\", \"word\"]' --set seed=3",
              "corl data generate shapes data/shapes --set seed_size=0")
    sp.add_argument("task", help="a task that declares generates_data (a name that does not lists those that do)")
    sp.add_argument("out", help="the folder to write; must not exist or be empty")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of the task's table, e.g. train_size=100 (repeatable)")


def parse_compare(sub) -> None:
    sp = _add(sub, "compare", cmd_compare, "run recipes over several seeds and tabulate them (results.json, results.md)",
              "corl compare three_agent_ring self_reward --seeds 0,1,2 --out runs/ring_vs_self",
              "corl compare recipes/paper/*.toml --out runs/paper --tabulate")
    sp.add_argument("recipes", nargs="+", help="recipe files or shipped recipe names")
    sp.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    sp.add_argument("--out", default="runs/compare", help="output folder (finished runs in it are reused)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override in every recipe")
    sp.add_argument("--tabulate", action="store_true",
                    help="run nothing: tabulate the finished runs in --out (unfinished recipes are left out)")


def parse_export(sub) -> None:
    sp = _add(sub, "export", cmd_export,
              "write each agent of a run as a portable Hugging Face folder with a model card",
              "corl export runs/three_agent_ring exported", "corl export runs/three_agent_ring step40 --step 40")
    sp.add_argument("run_dir", help="a run dir")
    sp.add_argument("out", help="the folder to write (OUT/<agent>/ per agent); must not exist or be empty")
    sp.add_argument("--step", type=int, default=None, metavar="N",
                    help="export step N's checkpoint (checkpoints/step-N), not the final export")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                    help="override a recipe key (e.g. agents[0].device=cpu)")


def parse_report(sub) -> None:
    sp = _add(sub, "report", cmd_report, "render a run's curves and cohort heatmaps (PNG + HTML/Markdown)",
              "corl report runs/corl")
    sp.add_argument("run_dir")


def parse_plugins(sub) -> None:
    _json(_add(sub, "plugins", cmd_plugins, "installed plugins, their versions, hooks and components",
               "corl plugins", "corl plugins --json"))


def parse_env(sub) -> None:
    _json(_add(sub, "env", cmd_env, "versions and devices of this machine, for bug reports", "corl env --json"))


def parse_recipes(sub) -> None:
    sp = _add(sub, "recipes", cmd_recipes, "list or copy the shipped recipes; `keys` prints every recipe key",
              "corl recipes ls", "corl recipes cp three_agent_ring my_ring.toml", "corl recipes keys > keys.md")
    sp.add_argument("action", choices=["ls", "cp", "keys"])
    sp.add_argument("name", nargs="?")
    sp.add_argument("dest", nargs="?")


#: the subcommands, in the order ``corl --help`` lists them
SUBCOMMANDS = (parse_run, parse_validate, parse_eval, parse_cohort, parse_screen, parse_data, parse_compare, parse_export, parse_report,
               parse_plugins, parse_env, parse_recipes)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="corl", description="Co-RL: cooperative label-free multi-agent RL")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from corl.logs import install_cli_handler

    install_cli_handler()  # the run's messages and progress, as plain lines on stderr
    if args.command == "recipes" and args.action == "cp" and not args.name:
        parser().error("recipes cp needs a NAME")
    try:
        return args.fn(args)
    except CorlError as exc:
        cause = exc.__cause__ if not isinstance(exc.__cause__, CorlError) else None
        debug = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
        if cause is not None and debug:
            traceback.print_exception(cause, file=sys.stderr)
        lines = str(exc).splitlines() if not exc.reported else []
        if cause is not None and lines and not debug:
            lines[-1] += f" ({DEBUG_ENV}=1 shows the traceback)"
        for line in lines:
            print(f"corl: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("corl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `corl plugins | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

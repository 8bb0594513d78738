"""``corl compare``: run a set of recipes over several seeds and tabulate them side by side.

Each (recipe, seed) run lives in ``OUT/<recipe>/seed<k>``; a finished run (its summary.json
exists) is reused, so an interrupted comparison continues where it stopped. The result is
``OUT/results.json`` and the Markdown table ``OUT/results.md``.
"""

from __future__ import annotations

import gc
import json
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence


def _stats(values: Sequence[float]) -> dict[str, Any]:
    """Mean, sd and count over seeds; one seed has no sd (null, shown as n/a), not a spread of 0."""
    values = list(values)
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "n": len(values)}


def _quarters(series: Sequence[float]) -> tuple[float, float]:
    """Mean of the first and of the last quarter of a training series (its trend)."""
    k = max(1, len(series) // 4)
    return statistics.fmean(series[:k]), statistics.fmean(series[-k:])


def _run_stats(run_dir: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval" and r.get("cohort")]
    recipe = json.loads((run_dir / "recipe.json").read_text())
    frozen = {a["name"] for a in recipe["agents"] if a.get("frozen")}
    out: dict[str, Any] = {"seconds": summary["seconds"], "eval_k": summary["eval_k"], "agents": {},
                           "warnings": summary.get("warnings", []), "stopped_at": summary.get("stopped_at")}
    for name, s in summary["agents"].items():
        series = {key: [r["agents"][name][key] for r in train if key in r["agents"][name]]
                  for key in ("label_accuracy", "reward_accuracy", "reward_std", "completion_length")}
        agent = {"before": s["before"], "after": s["after"], "best": s["best"], "best_step": s["best_step"],
                 "frozen": name in frozen}
        for key in ("label_accuracy", "reward_accuracy"):
            if series[key]:
                agent[key] = statistics.fmean(series[key])
        for key in ("reward_std", "completion_length"):
            if series[key]:
                agent[key + "_trend"] = _quarters(series[key])
        out["agents"][name] = agent
    if evals:
        cohort = evals[-1]["cohort"]
        n = len(cohort["agents"])
        phis = [cohort["phi"][i][j] for i in range(n) for j in range(i + 1, n)
                if cohort.get("phi") and cohort["phi"][i][j] is not None]
        out["error_correlation"] = statistics.fmean(phis) if phis else None
    return out


#: recipe keys that cannot change a run's step-0 evaluation (what trains, how long, what is logged):
#: two runs of a comparison whose recipes differ only in these, at the same seed, evaluate the same
#: agents on the same prompts with the same draw (corl.runtime.rng.fixed), so the second adopts
#: the first's step-0 evaluation (a real model's costs minutes)
NOT_EVALUATED = {"run": ("name", "steps", "output_dir", "peer_reward", "supervised", "observers", "checkpoint_every",
                         "keep_checkpoints", "max_nonfinite", "collective_timeout"),
                 "agents": ("optimizer", "frozen"), "eval": ("every",)}
NOT_EVALUATED_SECTIONS = ("topology", "observers", "shaping")


def evaluation_key(recipe: dict[str, Any]) -> dict[str, Any]:
    """``recipe`` (:func:`corl.recipe.to_dict`) without what cannot change its step-0 evaluation."""
    key = {section: value for section, value in recipe.items() if section not in NOT_EVALUATED_SECTIONS}
    for section, keys in NOT_EVALUATED.items():
        if isinstance(key.get(section), list):
            key[section] = [{k: v for k, v in table.items() if k not in keys} for table in key[section]]
        elif isinstance(key.get(section), dict):
            key[section] = {k: v for k, v in key[section].items() if k not in keys}
    return key


def compare(recipes: Sequence[str], seeds: Sequence[int], out: Path, overrides: Sequence[str] = (),
            log: Callable[[str], None] | None = None, claims: str | Path | None = None,
            run: bool = True) -> dict[str, Any]:
    """Run (or with ``run=False`` only tabulate) every recipe x seed; ``claims`` is a claims file
    (:mod:`corl.tools.claims`) whose verdicts go into the results and the report."""
    from corl.errors import CorlError
    from corl.logs import logger
    from corl.recipe import defaults_of, differences, to_dict
    from corl.runtime import Run, prepare

    say = log or logger.info
    names = [Path(r).stem for r in recipes]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise CorlError(f"two recipes are named {clash[0]!r}; their runs would share {out / clash[0]}: rename one")
    specs = {}
    for recipe, name in zip(recipes, names):  # validate everything before the first run starts
        for seed in seeds:
            run_dir = out / name / f"seed{seed}"
            pm, spec = prepare(recipe, [*overrides, f"run.seed={seed}", f"run.output_dir={run_dir}"])
            if (run_dir / "recipe.json").exists():  # reuse only a run of this very recipe
                changed = differences(json.loads((run_dir / "recipe.json").read_text()), to_dict(spec),
                                      ignore=("run.output_dir",), defaults=defaults_of(spec))
                if changed:
                    raise CorlError(f"{run_dir} holds a run of a different recipe ({changed[0]}); "
                                    "use another --out or delete it")
            specs[name, seed] = (spec, pm, run_dir)
    from corl.tools import claims as claims_mod

    claimed = claims_mod.load_claims(claims, names) if claims else None
    # Seed-major: every recipe's first seed before any recipe's second, so a comparison cut
    # short (or tabulated early with --tabulate) has every recipe at the fewest seeds possible.
    order = sorted(specs, key=lambda ns: list(seeds).index(ns[1]))
    shared: dict[str, tuple[Any, ...]] = {}  # evaluation key -> a step-0 evaluation of this comparison, and whose
    for name, seed in order if run else ():
        spec, pm, run_dir = specs[name, seed]
        if (run_dir / "summary.json").exists():
            say(f"{name} seed {seed}: done before, reusing {run_dir}")
            continue
        say(f"{name} seed {seed}: running -> {run_dir}")
        key = json.dumps(evaluation_key(to_dict(spec)), sort_keys=True, default=str)
        done = Run(spec, pm=pm, log=log, resume=True, shared_step0=shared.get(key))  # an interrupted run resumes
        done.execute()
        if 0 in done.state.evals and key not in shared:
            shared[key] = (done.state.evals[0], done.state.cohorts[0], done.eval_samples[0], f"{name} seed {seed}")
        del done  # (its models go before the next run loads its own)
        gc.collect()

    results: dict[str, Any] = {"seeds": list(seeds), "overrides": list(overrides), "recipes": {}, "not_run": []}
    for name in dict.fromkeys(n for n, _ in specs):
        done = [seed for seed in seeds if (specs[name, seed][2] / "summary.json").exists()]
        if not done:  # only when tabulating without running
            results["not_run"].append(name)
            say(f"{name}: no seed finished; left out of the table")
            continue
        if len(done) < len(seeds):
            say(f"{name}: tabulating seeds {done} only; {sorted(set(seeds) - set(done))} not finished")
        runs = [_run_stats(specs[name, seed][2]) for seed in done]
        results["eval_k"] = runs[0]["eval_k"]
        agents: dict[str, Any] = {}
        for agent in runs[0]["agents"]:
            per_seed = [r["agents"][agent] for r in runs]
            row: dict[str, Any] = {}
            for metric in ("pass@1", "greedy", f"maj@{runs[0]['eval_k']}"):
                for when in ("before", "after", "best"):
                    row[f"{metric}/{when}"] = _stats([s[when][metric] for s in per_seed])
                row[f"{metric}/change"] = _stats([s["after"][metric] - s["before"][metric] for s in per_seed])
            row["frozen"] = per_seed[0]["frozen"]
            # per-seed figures, for the claims' verdicts (corl.tools.claims)
            row["seeds"] = {"before": [s["before"]["pass@1"] for s in per_seed],
                            "after": [s["after"]["pass@1"] for s in per_seed],
                            "se_before": [s["before"].get("pass@1_se", 0.0) for s in per_seed],
                            "se_after": [s["after"].get("pass@1_se", 0.0) for s in per_seed]}
            for key in ("label_accuracy", "reward_accuracy"):
                if all(key in s for s in per_seed):
                    row[key] = _stats([s[key] for s in per_seed])
            for key in ("reward_std_trend", "completion_length_trend"):
                if all(key in s for s in per_seed):
                    row[key] = [statistics.fmean(s[key][0] for s in per_seed), statistics.fmean(s[key][1] for s in per_seed)]
            agents[agent] = row
        correlations = [r["error_correlation"] for r in runs if r.get("error_correlation") is not None]
        results["recipes"][name] = {
            "agents": agents, "seconds": _stats([r["seconds"] for r in runs]),
            "error_correlation": statistics.fmean(correlations) if correlations else None,
            "warnings": sorted({w.split(": ", 2)[-1] for r in runs for w in r["warnings"]}),
            "stopped_at": [r["stopped_at"] for r in runs], "seeds": done,
        }
    if claimed:
        results["regimes"] = claimed["regimes"]
        results["claims"] = claims_mod.evaluate_claims(claimed, results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(claims_mod.render(results, claimed) if claimed else render_markdown(results))
    return results


def render_markdown(results: dict[str, Any]) -> str:
    seeds = results["seeds"]
    lines = [f"# Comparison over seeds {', '.join(map(str, seeds))}", "",
             "Held-out pass@1 before -> after and the change in points (mean ± sd over seeds; n/a with one seed); best is the best "
             "evaluated step; label acc. is the pseudo-label's accuracy against hidden labels over training "
             "(monitoring only); reward std and length are first -> last quarter of training; phi is the mean "
             "pairwise correctness correlation of the cohort at the last evaluation.", "",
             "| recipe | agent | pass@1 before | pass@1 after | change (pt) | best | greedy change (pt) | label acc. "
             "| reward acc. | reward std | length | phi | minutes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    from corl.tools.claims import mean_sd as pm

    def trend(row: dict[str, Any], key: str) -> str:
        return f"{row[key][0]:.2f} -> {row[key][1]:.2f}" if key in row else "-"

    for name, rec in results["recipes"].items():
        for i, (agent, row) in enumerate(rec["agents"].items()):
            lines.append(" | ".join([
                f"| {name if i == 0 else ''}", agent, pm(row["pass@1/before"]), pm(row["pass@1/after"]),
                pm(row["pass@1/change"], 100, "+.1f"), pm(row["pass@1/best"]), pm(row["greedy/change"], 100, "+.1f"),
                pm(row["label_accuracy"], 1, ".2f") if "label_accuracy" in row else "-",
                pm(row["reward_accuracy"], 1, ".2f") if "reward_accuracy" in row else "-",
                trend(row, "reward_std_trend"), trend(row, "completion_length_trend"),
                f"{rec['error_correlation']:.2f}" if i == 0 and rec["error_correlation"] is not None else "",
                f"{rec['seconds']['mean'] / 60:.1f}" if i == 0 else ""]) + " |")
    warned = {name: rec["warnings"] for name, rec in results["recipes"].items() if rec["warnings"]}
    if warned:
        lines += ["", "Warnings raised during training:", ""]
        lines += [f"- {name}: {w}" for name, ws in warned.items() for w in ws]
    return "\n".join(lines) + "\n"

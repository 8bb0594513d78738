"""Claims with computed verdicts for ``corl compare``, and the Markdown report that shows them.

A *claims file* is a TOML file passed to ``corl compare`` beside the recipes (it holds only
``[regimes.NAME]`` and ``[[claims]]`` tables, so ``corl compare recipes/paper/*.toml`` finds it
among them). Each claim names a test and the recipes it compares; its verdict is computed from
the per-seed figures in ``results.json``, never written by hand.

The statistic is held-out pass@1 change (after - before, in points) of a recipe's *trained*
agents (a frozen judge is left out), per seed: for one agent (``improves`` / ``degrades`` /
``no_harm``, every agent separately) or the cohort mean (``beats`` / ``not_worse``, recipe minus
baseline). **Verdict rule:** a difference counts only beyond a margin of
``2 x max(seed sd, eval standard error)``; the seed sd is that of the per-seed statistic (of both
recipes, for a comparison), the eval standard error is the pass@1 sampling error on the fixed
eval prompts, propagated through the change and the difference. ``holds`` / ``fails`` are
beyond the margin; ``not shown`` is within it (the run cannot tell).
"""

from __future__ import annotations

import fnmatch
import math
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corl.errors import ConfigError

TESTS = {
    "improves": "every trained agent's pass@1 rises beyond the margin",
    "degrades": "some trained agent's pass@1 falls beyond the margin",
    "no_harm": "no trained agent's pass@1 falls beyond the margin",
    "beats": "the cohort's mean pass@1 change exceeds the baseline's beyond the margin",
    "not_worse": "the cohort's mean pass@1 change is not below the baseline's beyond the margin",
    "stable": "reward std keeps >= half its first-quarter value and length moves < 25% (first -> last quarter), "
              "while the baseline's does not",
}
NEEDS_BASELINE = ("beats", "not_worse", "stable")
#: ``stable``: the reward std may fall to this share of its first-quarter value, length move this share
STD_FLOOR, LENGTH_BAND = 0.5, 0.25


def is_claims_file(path: str | Path) -> bool:
    """A TOML file with only ``regimes`` / ``claims`` tables (and at least one of them)."""
    p = Path(path)
    if p.suffix != ".toml" or not p.is_file():
        return False
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return bool(data) and set(data) <= {"regimes", "claims"}


def load_claims(path: str | Path, recipes: Sequence[str]) -> dict[str, Any]:
    """Read and check a claims file against the recipe names of the comparison."""
    where = str(path)
    data = tomllib.loads(Path(path).read_text())
    regimes = data.get("regimes", {})
    if not isinstance(regimes, Mapping):
        raise ConfigError(f"{where}: regimes: expected tables [regimes.NAME]")
    out_regimes = {}
    for name, body in regimes.items():
        if not isinstance(body, Mapping) or not isinstance(body.get("recipes"), str):
            raise ConfigError(f"{where}: regimes.{name}.recipes: expected a name pattern such as \"strong_*\"")
        out_regimes[name] = {"title": str(body.get("title", name)), "about": str(body.get("about", "")),
                             "recipes": [r for r in recipes if fnmatch.fnmatch(r, body["recipes"])]}
    claims = []
    for i, c in enumerate(data.get("claims", [])):
        at = f"{where}: claims[{i}]"
        if not isinstance(c, Mapping):
            raise ConfigError(f"{at}: expected a table")
        test = c.get("test")
        if test not in TESTS:
            raise ConfigError(f"{at}.test: unknown test {test!r}; valid: {', '.join(TESTS)}")
        for key in ("recipe", *(("baseline",) if test in NEEDS_BASELINE else ())):
            if c.get(key) not in recipes:
                raise ConfigError(f"{at}.{key}: {c.get(key)!r} is not a recipe of this comparison")
        if "regime" in c and c["regime"] not in out_regimes:
            raise ConfigError(f"{at}.regime: unknown regime {c['regime']!r}; declared: {', '.join(out_regimes) or 'none'}")
        extra = set(c) - {"test", "recipe", "baseline", "regime", "text"}
        if extra:
            raise ConfigError(f"{at}.{sorted(extra)[0]}: unknown key; valid: test, recipe, baseline, regime, text")
        claims.append({"text": str(c.get("text", f"{c['recipe']} {test}")), "test": test, "recipe": c["recipe"],
                       "baseline": c.get("baseline"), "regime": c.get("regime")})
    return {"regimes": out_regimes, "claims": claims}


# -- the statistics ------------------------------------------------------------------------------


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _trained(rec: Mapping[str, Any]) -> list[str]:
    return [a for a, row in rec["agents"].items() if not row.get("frozen")]


def agent_change(row: Mapping[str, Any]) -> tuple[list[float], float]:
    """Per-seed pass@1 change (points) of one agent, and its eval standard error (points)."""
    changes = [100 * (a - b) for a, b in zip(row["seeds"]["after"], row["seeds"]["before"])]
    se = 100 * math.sqrt(statistics.fmean(x * x for x in row["seeds"]["se_after"])
                         + statistics.fmean(x * x for x in row["seeds"]["se_before"]))
    return changes, se


def cohort_change(rec: Mapping[str, Any]) -> tuple[list[float], float]:
    """Per-seed mean pass@1 change (points) over the trained agents, and its standard error."""
    per = [agent_change(rec["agents"][a]) for a in _trained(rec)]
    seeds = [statistics.fmean(c[s] for c, _ in per) for s in range(len(per[0][0]))]
    return seeds, math.sqrt(sum(se * se for _, se in per)) / len(per)


def verdict(claim: Mapping[str, Any], recipes: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict of one claim from the per-seed figures; see the module docstring for the rule."""
    test, rec = claim["test"], recipes[claim["recipe"]]
    if test in ("improves", "degrades", "no_harm"):
        per_agent = {}
        for a in _trained(rec):
            changes, se = agent_change(rec["agents"][a])
            per_agent[a] = (statistics.fmean(changes), 2 * max(_sd(changes), se))
        up = [a for a, (m, g) in per_agent.items() if m > g]
        down = [a for a, (m, g) in per_agent.items() if m < -g]
        if test == "improves":
            result = "holds" if len(up) == len(per_agent) else "fails" if down else "not shown"
        elif test == "degrades":
            result = "holds" if down else "fails" if len(up) == len(per_agent) else "not shown"
        else:
            result = "fails" if down else "holds"
        shown = ", ".join(f"{a} {m:+.1f} (margin {g:.1f})" for a, (m, g) in per_agent.items())
        return {"verdict": result, "statistic": shown}
    base = recipes[claim["baseline"]]
    if test == "stable":
        def ok(r):
            return all(_stable(r["agents"][a]) for a in _trained(r))
        mine, theirs = ok(rec), ok(base)
        result = "fails" if not mine else "holds" if not theirs else "not shown"
        return {"verdict": result, "statistic": f"{claim['recipe']} {'stable' if mine else 'unstable'}, "
                                                f"{claim['baseline']} {'stable' if theirs else 'unstable'}"}
    a, se_a = cohort_change(rec)
    b, se_b = cohort_change(base)
    diff = statistics.fmean(a) - statistics.fmean(b)
    margin = 2 * max(_sd(a), _sd(b), math.sqrt(se_a ** 2 + se_b ** 2))
    if test == "beats":
        result = "holds" if diff > margin else "fails" if diff < -margin else "not shown"
    else:
        result = "fails" if diff < -margin else "holds"
    return {"verdict": result, "statistic": f"{statistics.fmean(a):+.1f} vs {statistics.fmean(b):+.1f}: "
                                            f"{diff:+.1f} (margin {margin:.1f})"}


def _stable(row: Mapping[str, Any]) -> bool:
    std, length = row.get("reward_std_trend"), row.get("completion_length_trend")
    if not std or not length:
        return True
    return std[1] >= STD_FLOOR * std[0] and abs(length[1] / length[0] - 1) < LENGTH_BAND if length[0] else True


def evaluate_claims(claims: Mapping[str, Any], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in claims["claims"]:
        missing = [r for r in (c["recipe"], c["baseline"]) if r and r not in results["recipes"]]
        out.append({**c, **({"verdict": "not run", "statistic": f"missing: {', '.join(missing)}"} if missing
                            else verdict(c, results["recipes"]))})
    return out


# -- the report ----------------------------------------------------------------------------------


def mean_sd(s: Mapping[str, Any], scale: float = 1.0, fmt: str = ".3f") -> str:
    """``mean ± sd`` of a per-seed figure (``corl compare``'s ``{"mean", "sd", "n"}``), the spread unsigned
    (``+6.2 ± 1.8``); one seed has no spread to show: ``± n/a``, not ``± 0.000``."""
    sd = s.get("sd")
    spread = "n/a" if sd is None or s.get("n", 2) < 2 else f"{sd * scale:{fmt.lstrip('+')}}"
    return f"{s['mean'] * scale:{fmt}} ± {spread}"


def _pm(s: Mapping[str, Any], scale: float = 100, fmt: str = ".1f") -> str:
    return mean_sd(s, scale, fmt)


def render(results: Mapping[str, Any], claims: Mapping[str, Any] | None = None) -> str:
    """The Markdown report: per regime, the per-agent table and the claims with their verdicts."""
    seeds = results["seeds"]
    k = results.get("eval_k", 8)
    regimes = dict((claims or {}).get("regimes", {}))
    covered = {r for g in regimes.values() for r in g["recipes"]}
    rest = [r for r in results["recipes"] if r not in covered]
    if rest:
        regimes["other"] = {"title": "Other recipes", "about": "", "recipes": rest}
    verdicts = results.get("claims", [])
    lines = [f"Seeds {', '.join(map(str, seeds))}. Pass@1, greedy and maj@{k} in % on the evaluated prompts "
             "(held out, or trained on unlabeled under the test-time protocol), mean ± sd over seeds; *before* is "
             "the base (step 0), *best* the best evaluated step; se is the eval standard error of pass@1 (sampling, "
             "fixed prompts); label / reward acc. are the pseudo-label's and the reward's accuracy against the "
             "hidden labels over training (monitoring only); reward std and length are first -> last quarter of "
             "training; phi is the cohort's mean pairwise error correlation (greedy answers, last eval).", ""]
    for key, regime in regimes.items():
        names = [r for r in regime["recipes"] if r in results["recipes"]]
        if not names:
            continue
        lines += [f"### {regime['title']}", ""]
        if regime.get("about"):
            lines += [regime["about"], ""]
        lines += ["| recipe | agent | pass@1 before | after | best | se | greedy before -> after | "
                  f"maj@{k} before -> after | label acc. | reward acc. | reward std | length | phi | stop | min |",
                  "|" + "---|" * 15]
        for name in names:
            rec = results["recipes"][name]
            for i, (agent, row) in enumerate(rec["agents"].items()):
                se = 100 * statistics.fmean(row["seeds"]["se_after"])
                maj = f"maj@{k}"
                stops = [s for s in rec.get("stopped_at", []) if s is not None]
                n_seeds = len(rec.get("seeds", seeds))
                lines.append(" | ".join([
                    f"| {name if i == 0 else ''}", agent + (" (frozen)" if row.get("frozen") else ""),
                    _pm(row["pass@1/before"]), _pm(row["pass@1/after"]), _pm(row["pass@1/best"]), f"{se:.1f}",
                    f"{100 * row['greedy/before']['mean']:.1f} -> {100 * row['greedy/after']['mean']:.1f}",
                    f"{100 * row[maj + '/before']['mean']:.1f} -> {100 * row[maj + '/after']['mean']:.1f}",
                    f"{row['label_accuracy']['mean']:.2f}" if "label_accuracy" in row else "-",
                    f"{row['reward_accuracy']['mean']:.2f}" if "reward_accuracy" in row else "-",
                    _trend(row, "reward_std_trend"), _trend(row, "completion_length_trend"),
                    f"{rec['error_correlation']:.2f}" if i == 0 and rec.get("error_correlation") is not None else "",
                    (f"{len(stops)}/{n_seeds} @{','.join(map(str, stops))}" if stops else "-") if i == 0 else "",
                    f"{rec['seconds']['mean'] / 60:.1f}" if i == 0 else ""]) + " |")
                if i == 0 and len(rec.get("seeds", seeds)) < len(seeds):
                    lines[-1] = lines[-1].replace(f"| {name} |", f"| {name} (seeds {','.join(map(str, rec['seeds']))}) |", 1)
        mine = [v for v in verdicts if v.get("regime") == key]
        if mine:
            lines += ["", "| claim | test | compared | figures (points; margin = 2 x max(seed sd, se)) | verdict |",
                      "|---|---|---|---|---|"]
            for v in mine:
                compared = v["recipe"] + (f" vs {v['baseline']}" if v.get("baseline") else "")
                lines.append(f"| {v['text']} | {v['test']} | {compared} | {v['statistic']} | **{v['verdict']}** |")
        lines.append("")
    loose = [v for v in verdicts if not v.get("regime")]
    if loose:
        lines += ["| claim | test | compared | figures | verdict |", "|---|---|---|---|---|"]
        lines += [f"| {v['text']} | {v['test']} | {v['recipe']}{' vs ' + v['baseline'] if v.get('baseline') else ''} "
                  f"| {v['statistic']} | **{v['verdict']}** |" for v in loose]
    warned = {name: rec["warnings"] for name, rec in results["recipes"].items() if rec.get("warnings")}
    if warned:
        lines += ["", "Warnings raised during training:", ""]
        lines += [f"- {name}: {w}" for name, ws in warned.items() for w in ws]
    return "\n".join(lines) + "\n"


def _trend(row: Mapping[str, Any], key: str) -> str:
    return f"{row[key][0]:.2f} -> {row[key][1]:.2f}" if key in row else "-"

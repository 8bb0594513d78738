"""``corl screen``: what decides whether Co-RL can help a cohort on a task, measured before training.

Each agent samples ``k`` completions of the same prompts (as the recipe sets it up: warm-ups, prompt
templates, samplers), and the answers give, label-free:

* each agent's majority share (how sure its own vote is) and how often it gives no answer;
* pairwise disagreement (how often two agents' majorities differ);
* where the prompt holds numbers (the ``max`` drill's five), the position in the prompt of the number
  each agent's majority copies: a skew away from uniform is a positional shortcut a peer's label can teach;

and with the labels (``--split eval``, the default where it has them):

* pass@1 and maj@k; pairwise both-wrong and same-wrong majorities;
* the rate each peer's majority (and the pooled vote of all the others) corrects an agent's wrong
  majority: the labels a peer can teach it; the pooled vote of every agent;
* maj@k by the position of the true answer in the prompt (a positional bias, where the task can tell).

Majorities are plain pluralities of the extracted answers (ties: the first reached), the same for
every agent, so the screen does not depend on the recipe's ``min_share``.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from corl.errors import CorlError

Answers = Sequence[Sequence[Hashable | None]]  # per prompt, per sample
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def plurality(answers: Sequence[Hashable | None]) -> tuple[Hashable | None, float]:
    """The most common non-empty answer (the first reached on a tie) and its share of all samples."""
    counts = collections.Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0.0
    top, n = counts.most_common(1)[0]
    return top, n / len(answers)


def numbers_in(text: str) -> list[float]:
    """The numbers of a prompt, in order (what a positional or copy bias can pick among)."""
    return [float(m) for m in _NUMBER.findall(text)]


def _position(answer: Hashable | None, numbers: Sequence[float]) -> str:
    """1-based position in the prompt of the number ``answer`` copies; "none" (no answer) or "other"."""
    if answer is None:
        return "none"
    try:
        value = float(str(answer))
    except ValueError:
        return "other"
    return str(numbers.index(value) + 1) if value in numbers else "other"


def _rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def screen(answers: dict[str, Answers], equivalent: Callable[[Any, Any], bool], truth: Sequence[Any] | None = None,
           texts: Sequence[str] | None = None) -> dict[str, Any]:
    """The screen of ``answers[agent][prompt][sample]`` (extracted answers); ``truth`` (the labels,
    optional) adds the labelled figures; ``texts`` (the prompts) adds the positions of copied numbers."""
    names = list(answers)
    if not names:
        raise CorlError("corl screen: no agents")
    n = len(answers[names[0]])
    if any(len(answers[a]) != n for a in names) or (truth is not None and len(truth) != n):
        raise CorlError("corl screen: every agent needs answers to the same prompts")

    def right(answer, i) -> bool:
        return answer is not None and bool(equivalent(answer, truth[i]))

    majority = {a: [plurality(row) for row in answers[a]] for a in names}
    numbers = [numbers_in(t) for t in texts] if texts is not None else None
    positional = numbers is not None and any(len(ns) >= 2 for ns in numbers)
    out: dict[str, Any] = {"prompts": n, "k": len(answers[names[0]][0]) if n else 0, "labelled": truth is not None,
                           "agents": {}, "pairs": [], "corrections": {}}
    for a in names:
        row: dict[str, Any] = {
            "majority_share": sum(s for _, s in majority[a]) / n if n else 0.0,
            "no_answer": sum(x is None for r in answers[a] for x in r) / max(1, sum(len(r) for r in answers[a]))}
        if positional:
            row["majority_position"] = dict(sorted(collections.Counter(
                _position(m, ns) for (m, _), ns in zip(majority[a], numbers)).items()))
        if truth is not None:
            row["pass@1"] = sum(sum(right(x, i) for x in r) / len(r) for i, r in enumerate(answers[a])) / n
            row["maj@k"] = sum(right(m, i) for i, (m, _) in enumerate(majority[a])) / n
            if positional:
                by: dict[str, list[bool]] = collections.defaultdict(list)
                for i, ((m, _), ns) in enumerate(zip(majority[a], numbers)):
                    by[_position(truth[i], ns)].append(right(m, i))
                row["maj@k_by_true_position"] = {p: sum(v) / len(v) for p, v in sorted(by.items())}
        out["agents"][a] = row
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair: dict[str, Any] = {"agents": [a, b], "disagree": sum(
                not (x is not None and y is not None and equivalent(x, y)) for (x, _), (y, _) in zip(majority[a], majority[b])) / n}
            if truth is not None:
                both = [j for j in range(n) if not right(majority[a][j][0], j) and not right(majority[b][j][0], j)]
                pair["both_wrong"] = len(both)
                pair["same_wrong"] = sum(1 for j in both if majority[a][j][0] is not None and majority[b][j][0] is not None
                                         and equivalent(majority[a][j][0], majority[b][j][0]))
            out["pairs"].append(pair)
    if truth is not None:
        pooled_all = [plurality([x for a in names for x in answers[a][j]])[0] for j in range(n)]
        out["pooled_all_maj"] = sum(right(m, j) for j, m in enumerate(pooled_all)) / n
        for a in names:
            wrong = [j for j in range(n) if not right(majority[a][j][0], j)]
            fixes: dict[str, Any] = {"wrong_majorities": len(wrong)}
            for b in names:
                if b != a:
                    fixes[b] = _rate(sum(right(majority[b][j][0], j) for j in wrong), len(wrong))
            others = [b for b in names if b != a]
            pooled = [plurality([x for b in others for x in answers[b][j]])[0] for j in range(n)]
            if len(others) > 1:
                fixes["pooled others"] = _rate(sum(right(pooled[j], j) for j in wrong), len(wrong))
            out["agents"][a]["pooled_others_maj"] = sum(right(m, j) for j, m in enumerate(pooled)) / n
            out["corrections"][a] = fixes
    return out


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render(result: dict[str, Any]) -> str:
    """The screen as text tables (what ``corl screen`` prints)."""
    names = list(result["agents"])
    labelled = result["labelled"]
    lines = [f"screen: {result['prompts']} prompts x {result['k']} samples"
             + (" (labelled)" if labelled else " (label-free: no labels on this split)")]
    cols = ["pass@1", "maj@k", "pooled_others_maj"] if labelled else []
    cols += ["majority_share", "no_answer"]
    width = max(12, *(len(a) + 2 for a in names))
    lines.append(f"{'agent':<{width}}" + "".join(f"{c:>19}" for c in cols))
    for a in names:
        lines.append(f"{a:<{width}}" + "".join(f"{_fmt(result['agents'][a].get(c)):>19}" for c in cols))
    if labelled:
        lines.append(f"pooled vote of all agents: maj {result['pooled_all_maj']:.3f}")
    lines.append("")
    lines.append("pairs: disagree = majorities differ" + ("; both wrong / same wrong answer (prompts)" if labelled else ""))
    for p in result["pairs"]:
        extra = f"  both wrong {p['both_wrong']:>3}  same wrong {p['same_wrong']:>3}" if labelled else ""
        lines.append(f"  {' + '.join(p['agents']):<{2 * width}} disagree {p['disagree']:.3f}{extra}")
    if labelled:
        lines.append("")
        lines.append("corrections: of an agent's wrong majorities, the share a peer's majority (or the pooled others) gets right")
        for a, fixes in result["corrections"].items():
            cells = "  ".join(f"{b} {_fmt(v)}" for b, v in fixes.items() if b != "wrong_majorities")
            lines.append(f"  {a:<{width}} wrong {fixes['wrong_majorities']:>3}:  {cells}")
    if any("majority_position" in r for r in result["agents"].values()):
        lines.append("")
        lines.append("positions: where in the prompt the majority's number stands (label-free)"
                     + ("; maj@k by where the true answer stands" if labelled else ""))
        for a, r in result["agents"].items():
            lines.append(f"  {a:<{width}} chosen {json.dumps(r['majority_position'])}")
            if "maj@k_by_true_position" in r:
                by = {p: round(v, 3) for p, v in r["maj@k_by_true_position"].items()}
                lines.append(f"  {'':<{width}} right  {json.dumps(by)}")
    return "\n".join(lines)


def cmd_screen(args) -> int:
    from corl.tools.inspect import _build_for_inspection

    if args.prompts < 1:
        raise CorlError(f"--prompts {args.prompts}: must be at least 1")
    run, _, _ = _build_for_inspection(args, [])
    try:
        return _screen(run, args)
    finally:
        run.close()


def _screen(run, args) -> int:
    import torch

    from corl.runtime.evaluation import votes_of

    split = args.split
    prompts = list(run.task.split(split))[: args.prompts]
    if not prompts:
        raise CorlError(f"--split {split}: the task's {split} split is empty")
    k = args.k or run.spec.eval.k
    labelled = all(p.label is not None for p in prompts)
    answers = {}
    with run.verifier.armed():
        for slot in run.agents:
            torch.manual_seed(args.seed)
            rollout = slot.sampler.sample(slot.agent, prompts, k)
            answers[slot.name] = [[v.answer for v in row] for row in votes_of(rollout, run.verifier)]
        truth = [p.label for p in prompts] if labelled else None
        result = screen(answers, run.verifier.equivalent, truth, [p.text for p in prompts])
    result["split"] = split
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0

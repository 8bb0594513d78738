"""Cohort diagnostics: how different are the agents' mistakes?

What a Co-RL cohort can teach depends on how decorrelated its errors are. With labels:
pairwise correctness correlation (phi) and P(same wrong answer | both wrong). Without labels:
how often two agents' pseudo-labels disagree, the label-free proxy ``corl cohort`` ranks by.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from corl.protocols import AnswerVerifier


def _same(a: Hashable | None, b: Hashable | None, verifier: AnswerVerifier) -> bool:
    return a is not None and b is not None and verifier.equivalent(a, b)


def phi(x: Sequence[bool], y: Sequence[bool]) -> float | None:
    """Phi coefficient of two binary series (Pearson on 0/1); None when either is constant."""
    n = len(x)
    if n == 0:
        return None
    mx, my = sum(x) / n, sum(y) / n
    var = mx * (1 - mx) * my * (1 - my)
    if var <= 0:
        return None
    cov = sum(a and b for a, b in zip(x, y)) / n - mx * my
    return cov / math.sqrt(var)


def pairwise(answers: Mapping[str, Sequence[Hashable | None]], verifier: AnswerVerifier,
             labels: Sequence[Any] | None = None) -> dict[str, Any]:
    """Agreement matrix over agents' answers to the same prompts, and with ``labels`` the
    correctness correlation (phi) and P(same wrong answer | both wrong)."""
    names = list(answers)
    n = len(next(iter(answers.values()), []))
    agree = [[1.0 if i == j else sum(_same(a, b, verifier) for a, b in zip(answers[p], answers[q])) / max(n, 1)
              for j, q in enumerate(names)] for i, p in enumerate(names)]
    out: dict[str, Any] = {"agents": names, "n": n, "agreement": agree, "phi": None, "same_wrong": None}
    if labels is not None and all(label is not None for label in labels):
        correct = {p: [_same(a, t, verifier) for a, t in zip(answers[p], labels)] for p in names}
        out["phi"] = [[phi(correct[p], correct[q]) for q in names] for p in names]
        same_wrong = []
        for p in names:
            row = []
            for q in names:
                both = [i for i in range(n) if not correct[p][i] and not correct[q][i]]
                row.append(None if p == q or not both else
                           sum(_same(answers[p][i], answers[q][i], verifier) for i in both) / len(both))
            same_wrong.append(row)
        out["same_wrong"] = same_wrong
    return out


def rank_cohorts(disagreement: Sequence[Sequence[float]], strength: Sequence[float], names: Sequence[str],
                 sizes: Sequence[int] = (2, 3)) -> list[dict[str, Any]]:
    """Rank candidate cohorts by label-free decorrelation.

    ``disagreement[i][j]``: how often agents i and j's pseudo-labels differ on unlabeled prompts;
    ``strength[i]``: agent i's self-consistency (mean top-answer vote share). Disagreement alone
    would favour a model that answers at random, so a cohort's score is its mean pairwise
    disagreement times its weakest member's strength.
    """
    ranked = []
    for size in sizes:
        for members in itertools.combinations(range(len(names)), size):
            pairs = list(itertools.combinations(members, 2))
            decor = sum(disagreement[i][j] for i, j in pairs) / len(pairs)
            weakest = min(strength[i] for i in members)
            ranked.append({"agents": [names[i] for i in members], "disagreement": decor, "weakest_strength": weakest,
                           "score": decor * weakest, "topology": "ring" if size == 2 else "all_pairs"})
    return sorted(ranked, key=lambda c: (-c["score"], len(c["agents"]), c["agents"]))


def label_disagreement(labels: Mapping[str, Sequence[Any]], verifier: AnswerVerifier) -> list[list[float]]:
    """How often two agents' pseudo-labels differ (a missing label differs from everything)."""
    names = list(labels)
    n = len(next(iter(labels.values()), []))
    return [[0.0 if p == q else sum(not _same(a, b, verifier) for a, b in zip(labels[p], labels[q])) / max(n, 1)
             for q in names] for p in names]

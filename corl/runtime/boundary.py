"""Checks at the boundary between the run and a component: what a sampler, an aggregator, a router,
a shaping term or an optimizer returns is checked for shape, type and finiteness where it comes back, and a
violation is one line naming the component and its plugin (:class:`corl.errors.PluginError`,
exit status 2), not a traceback deep inside the next component.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from corl.errors import CorlError, PluginError
from corl.types import Prompt, PseudoLabel, Rollout, Routed, Vote


@contextlib.contextmanager
def guard(who: str, during: str) -> Iterator[None]:
    """A component's call: an exception it raises (not a :class:`CorlError`, which already says what to
    fix, nor a signal's stop) becomes one line naming the component and its plugin and when it
    happened, ``agent 'llama''s optimizer 'gspo' (plugin corl-gspo) raised RuntimeError: ... during
    step 3``; its traceback stays on the error (``CORL_DEBUG=1`` prints it)."""
    try:
        yield
    except CorlError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line that names the component, the cause kept
        first = first_line(exc)
        raise PluginError(f"{who} raised {type(exc).__name__}{': ' + first if first else ''}"
                          + (f" {during}" if during else "")) from exc


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _count(value: Any) -> str:
    return f"{len(value)}" if isinstance(value, Sequence) else type(value).__name__


def check_rollout(rollout: Any, prompts: Sequence[Any], n: int, who: str) -> None:
    if not isinstance(rollout, Rollout):
        raise PluginError(f"{who} returned {type(rollout).__name__}, expected a corl.Rollout")
    if len(rollout.texts) != len(prompts) or any(len(row) != n for row in rollout.texts):
        shape = [len(row) for row in rollout.texts][:4]
        raise PluginError(f"{who} returned completions for {len(rollout.texts)} prompts ({shape}...), expected "
                          f"{len(prompts)} prompts x {n} samples")
    for name, grid in (("lengths", rollout.lengths), ("confidences", rollout.confidences)):
        if len(grid) != len(prompts) or any(len(row) != n for row in grid):
            raise PluginError(f"{who} returned a Rollout whose {name} are not {len(prompts)} x {n}")


def check_split(prompts: Any, split: str, who: str) -> list[Prompt]:
    """A task's ``split(name)``: a sequence of :class:`corl.Prompt`."""
    if not isinstance(prompts, Sequence) or isinstance(prompts, (str, bytes)):
        raise PluginError(f"{who}: split({split!r}) returned {type(prompts).__name__}; expected a sequence of corl.Prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, Prompt):
            raise PluginError(f"{who}: split({split!r}) returned {type(prompt).__name__} {str(prompt)[:40]!r} at {i}; "
                              "expected corl.Prompt objects (corl.Prompt(id, text, label))")
    return list(prompts)


def check_labels(labels: Any, votes: Sequence[Sequence[Vote]], agent: str, who: str) -> None:
    if not isinstance(labels, Sequence) or len(labels) != len(votes):
        raise PluginError(f"{who} returned {_count(labels)} pseudo-labels for agent {agent!r}'s {len(votes)} prompts; "
                          "expected one corl.PseudoLabel per prompt")
    for p, label in enumerate(labels):
        if not isinstance(label, PseudoLabel):
            raise PluginError(f"{who} returned {type(label).__name__} for prompt {p} of agent {agent!r}; "
                              "expected a corl.PseudoLabel")
        if not _hashable(label.answer):  # votes are grouped and compared by answer
            raise PluginError(f"{who} returned a pseudo-label answer of type {type(label.answer).__name__} for prompt "
                              f"{p} of agent {agent!r}; answers must be hashable (a str, a number, a tuple, ...)")
        if not (isinstance(label.share, numbers.Real) and 0.0 <= label.share <= 1.0):
            raise PluginError(f"{who} returned a pseudo-label share of {label.share!r} (prompt {p}, agent {agent!r}); "
                              "expected a number in [0, 1]")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def check_routed(routed: Any, votes: Mapping[str, Sequence[Sequence[Vote]]],
                 labels: Mapping[str, Sequence[PseudoLabel]], who: str) -> tuple[Routed, set[str]]:
    """A router's result as a :class:`Routed` (a plain mapping of rewards is one with defaults:
    each agent rewarded by its own labels, nothing skipped), checked; and the agents it gave a
    non-finite reward."""
    if not isinstance(routed, Routed):
        routed = Routed(rewards=routed)
    nonfinite = check_rewards(routed.rewards, votes, who)
    for field, grid, valid in (("targets", routed.targets, lambda x: x is None or isinstance(x, PseudoLabel)),
                               ("skipped", routed.skipped, lambda x: isinstance(x, bool))):
        if not isinstance(grid, Mapping) or set(grid) - set(votes):
            raise PluginError(f"{who} returned Routed.{field} for agents {sorted(map(str, grid))}; expected a mapping "
                              f"of some of {sorted(votes)}")
        for name, rows in grid.items():
            if not isinstance(rows, Sequence) or len(rows) != len(votes[name]) or not all(map(valid, rows)):
                kind = "a corl.PseudoLabel or None" if field == "targets" else "a bool"
                raise PluginError(f"{who} returned Routed.{field}[{name!r}] of {_count(rows)} entries; expected "
                                  f"one per prompt ({len(votes[name])}), each {kind}")
    if not agent_metrics(routed.metrics, votes):
        raise PluginError(f"{who} returned Routed.metrics that are not {{agent: {{name: number}}}} for the run's "
                          f"agents ({sorted(votes)})")
    targets = {name: list(routed.targets.get(name, labels[name])) for name in votes}
    skipped = {name: list(routed.skipped.get(name, [False] * len(votes[name]))) for name in votes}
    return Routed(routed.rewards, targets, skipped, routed.metrics), nonfinite


def agent_metrics(metrics: Any, agents: Collection[str]) -> bool:
    """``metrics`` is ``{agent: {name: number}}`` for some of ``agents`` (a router's or a cohort
    aggregator's extra metrics)."""
    return isinstance(metrics, Mapping) and all(
        name in agents and isinstance(m, Mapping) and all(isinstance(k, str) and isinstance(v, numbers.Real)
                                                          for k, v in m.items())
        for name, m in metrics.items())


def check_rewards(rewards: Any, votes: Mapping[str, Sequence[Sequence[Vote]]], who: str) -> set[str]:
    """Rewards must be ``rewards[agent][prompt][sample]``: every agent, every prompt, one real
    number per voting sample. Returns the agents given a non-finite reward (their update is
    skipped and counted like a non-finite loss)."""
    if not isinstance(rewards, Mapping):
        raise PluginError(f"{who} returned {type(rewards).__name__}; expected rewards per agent, "
                          "{agent: [[reward per sample] per prompt]}")
    missing = [name for name in votes if name not in rewards]
    extra = [name for name in rewards if name not in votes]
    if missing or extra:
        raise PluginError(f"{who} returned rewards for agents {sorted(map(str, rewards))}, expected {sorted(votes)}")
    nonfinite = set()
    for name, per_prompt in votes.items():
        rows = rewards[name]
        if not isinstance(rows, Sequence) or len(rows) != len(per_prompt):
            raise PluginError(f"{who} returned {_count(rows)} reward rows for agent {name!r}, expected one per prompt "
                              f"({len(per_prompt)})")
        for p, (row, vs) in enumerate(zip(rows, per_prompt)):
            if not isinstance(row, Sequence) or len(row) != len(vs):
                raise PluginError(f"{who} returned {_count(row)} rewards for prompt {p} of agent {name!r}, expected "
                                  f"one per sample ({len(vs)})")
            for s, value in enumerate(row):
                if not isinstance(value, numbers.Real):
                    raise PluginError(f"{who} returned reward {value!r} (agent {name!r}, prompt {p}, sample {s}); "
                                      "expected a number")
                if not math.isfinite(value):
                    nonfinite.add(name)
    return nonfinite


def check_update(metrics: Any, who: str) -> dict[str, float]:
    """An optimizer step's metrics: a mapping of names to numbers."""
    if not isinstance(metrics, Mapping) or not all(isinstance(k, str) and isinstance(v, numbers.Real)
                                                   for k, v in metrics.items()):
        raise PluginError(f"{who} returned {type(metrics).__name__} from step(); expected a dict of metric "
                          "names to numbers")
    return {k: float(v) for k, v in metrics.items()}


def check_shaping(values: Any, rollout: Rollout, who: str) -> list[list[float]]:
    """A shaping term's values: one finite real number per completion of the rollout. A term is
    arithmetic on a completion; a NaN or a wrong shape is a bug in it, stopped here, by name."""
    n = rollout.n
    if not isinstance(values, Sequence) or len(values) != len(rollout.texts):
        raise PluginError(f"{who} returned {_count(values)} rows of values, expected one per prompt "
                          f"({len(rollout.texts)}) of agent {rollout.agent!r}")
    out = []
    for p, row in enumerate(values):
        if not isinstance(row, Sequence) or len(row) != n:
            raise PluginError(f"{who} returned {_count(row)} values for prompt {p} of agent {rollout.agent!r}, "
                              f"expected one per sample ({n})")
        for s, value in enumerate(row):
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise PluginError(f"{who} returned {value!r} (agent {rollout.agent!r}, prompt {p}, sample {s}); "
                                  "expected a finite number")
        out.append([float(x) for x in row])
    return out

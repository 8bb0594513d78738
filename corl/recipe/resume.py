"""What a resumed run may change, and the resolved recipe as plain JSON (``recipe.json``, checkpoints)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from corl.recipe.schema import ComponentSpec, RunSpec
from corl.recipe.structure import join

#: Keys a resumed run may change: how long, where and how it reports, not what it trains.
RESUMABLE_CHANGES = ("run.steps", "run.name", "run.output_dir", "run.observers", "run.checkpoint_every", "run.answer_timeout",
                     "run.keep_checkpoints", "run.max_nonfinite", "run.threads", "run.collective_timeout", "eval.every")


def differences(old: Mapping[str, Any], new: Mapping[str, Any], path: str = "",
                ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """Key paths where two resolved recipes differ, except the paths in ``ignore``."""
    out: list[str] = []
    if path in ignore:
        return out
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            out += differences(old.get(key), new.get(key), join(path, key), ignore)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, join(path, i), ignore)
    elif old != new:
        show = lambda v: "(absent)" if v is None else repr(v)
        out.append(f"{path}: {show(old)} -> {show(new)}")
    return out


def to_dict(spec: RunSpec) -> dict[str, Any]:
    """The fully resolved recipe (defaults filled in), as written to ``output_dir/recipe.json``."""
    def component(c: ComponentSpec, **extra: Any) -> dict[str, Any]:
        return {"type": c.type, **extra, **attrs.asdict(c.config)}

    return json.loads(json.dumps({  # JSON-normal: tuples become lists, as in recipe.json and checkpoints
        "run": attrs.asdict(spec.run),
        "task": component(spec.task),
        "agents": [{"name": a.name, **component(a.agent), "sampler": component(a.sampler),
                    "optimizer": component(a.optimizer), "frozen": a.frozen,
                    **({"ranks": list(a.ranks)} if a.ranks else {})}  # absent when placed automatically
                   for a in spec.agents],
        "voting": component(spec.voting.aggregator, n_votes=spec.voting.n_votes, n_train=spec.voting.n_train),
        "topology": component(spec.topology),
        "eval": attrs.asdict(spec.eval),
        **{name: attrs.asdict(config) for name, config in spec.sections.items()},
        **({"observers": {c.type: attrs.asdict(c.config) for c in spec.observers}} if spec.observers else {}),
        # absent without shaping, so the recipes of earlier checkpoints still compare equal
        **({"shaping": [component(t.term, name=t.name, weight=t.weight) for t in spec.shaping]} if spec.shaping else {}),
    }))

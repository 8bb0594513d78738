"""A run's whole-run checkpoint: what it holds, how it is restored, and when a resume is refused.

The folder format and its atomic write are :mod:`corl.runtime.checkpoint`'s; here the run's parts
go in: the run state (:class:`~corl.runtime.state.RunState`, plain JSON), the resolved recipe,
every trained agent's and optimizer's own state (each rank of an agent's group writes its part),
and every RNG stream of every rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corl import recipe as recipe_mod
from corl.errors import CorlError
from corl.protocols import Stateful
from corl.runtime import checkpoint, process
from corl.runtime.boundary import guard
from corl.runtime.rng import key


def save(run, step: int) -> Path:
    state = {**run.state.to_json(step), "recipe": recipe_mod.to_dict(run.spec)}

    def save_parts(folder: Path) -> None:
        for slot in run.agents:
            # a frozen agent is rebuilt from the recipe. Every rank of an agent's group takes part (a sharded
            # agent writes one shard per rank; what the group shares, its first rank writes)
            if slot.optimizer is not None and run.layout.owns(slot.name):
                with guard(run.who("agent", slot.name), "while writing a checkpoint"):
                    slot.agent.save_state(str(folder / "agents" / slot.name))
                with guard(run.who("optimizer", slot.name), "while writing a checkpoint"):
                    slot.optimizer.save_state(str(folder / "optimizers" / slot.name))
        if run.layout.is_writer:  # every rank holds the same state of these: one writes it
            for kind, component in stateful_components(run):
                with guard(run.who(kind), "while writing a checkpoint"):
                    component.save_state(str(folder / "components" / kind))

    mine = {s.name: run.streams.state(s.name, run.layout.member(s.name)) for s in run.agents}
    streams = {key(name, k): stream for name, per_rank in run.layout.gather(mine, f"step {step}: saving RNG "
               "streams").items() for k, stream in enumerate(per_rank)}
    return checkpoint.write(run.checkpoint_root, step, state, {**checkpoint.rng_state(), "agents": streams},
                            save_parts, run.spec.run.keep_checkpoints, run.layout,
                            fault=lambda where: process.fault(where, step, run.layout.rank))


def restore(run, path: Path) -> int:
    """Load every part of checkpoint ``path`` into a built run; returns its step."""
    for slot in run.agents:
        if slot.optimizer is not None:
            with guard(run.who("agent", slot.name), "while restoring a checkpoint"):
                slot.agent.load_state(str(path / "agents" / slot.name))
            with guard(run.who("optimizer", slot.name), "while restoring a checkpoint"):
                slot.optimizer.load_state(str(path / "optimizers" / slot.name))
    for kind, component in stateful_components(run):
        folder = path / "components" / kind
        if not folder.is_dir():
            raise CorlError(f"{path}: no saved state of the {run.who(kind)}: the checkpoint was written by a run "
                            "whose component kept none (resume with the same components)")
        with guard(run.who(kind), "while restoring a checkpoint"):
            component.load_state(str(folder))
    step = run.state.load_json(checkpoint.read_state(path))
    try:
        run.streams.load(checkpoint.restore_rng(path))
    except KeyError as exc:
        raise CorlError(f"{path}: no RNG stream saved for {exc.args[0]}: the checkpoint was written with another "
                        "number of ranks per agent (resume with the same agents[i].ranks) or by an older corl") from None
    return step


def stateful_components(run) -> list[tuple[str, Stateful]]:
    """The run-wide components that keep state across steps (:class:`corl.protocols.Stateful`): the
    aggregator (a reliability estimate), the router, the shaping terms."""
    parts: list[tuple[str, Any]] = [("aggregator", run.aggregator.inner), ("router", run.router)]
    parts += [(f"shaping/{slot.spec.name}", slot.term) for slot in run.shaping]
    return [(kind, c) for kind, c in parts if isinstance(c, Stateful)]


def check_compatible(spec, path: Path, force: bool) -> None:
    """Refuse to resume ``path`` with a recipe that changed what the run trains (unless ``force``)."""
    saved = checkpoint.read_state(path)["recipe"]
    changes = recipe_mod.differences(saved, recipe_mod.to_dict(spec), defaults=recipe_mod.defaults_of(spec))
    if changes and not force:
        shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
        raise CorlError(f"{path}: the recipe changed since this checkpoint ({shown}); "
                        "resume with the same recipe, or pass --force")

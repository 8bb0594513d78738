"""A run's whole-run checkpoint: what it holds, how it is restored, and when a resume is refused.

The folder format and its atomic write are :mod:`corl.runtime.checkpoint`'s; here the run's parts
go in: the run state (:class:`~corl.runtime.state.RunState`, plain JSON), the resolved recipe,
every trained agent's and optimizer's own state (each rank of an agent's group writes its part),
and every RNG stream of every rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from corl import recipe as recipe_mod
from corl.errors import CorlError
from corl.protocols import Stateful
from corl.recipe.schema import argument
from corl.runtime import checkpoint, process
from corl.runtime.boundary import guard
from corl.runtime.rng import key

if TYPE_CHECKING:
    from corl.runtime.host import RunHost


def save(run: RunHost, step: int) -> Path:
    state = {**run.state.to_json(step), "recipe": recipe_mod.to_dict(run.spec),
             "objects": {kind: dict(given.settings) for kind, given in run.spec.objects.items()}}

    def save_parts(folder: Path) -> None:
        for slot in run.agents:
            # a frozen agent is rebuilt from the recipe. Every rank of an agent's group takes part (a sharded
            # agent writes one shard per rank; what the group shares, its first rank writes)
            if slot.optimizer is not None and run.layout.owns(slot.name):
                with guard(run.who("agent", slot.name), "while writing a checkpoint"):
                    slot.agent.save_state(str(folder / "agents" / slot.name))
                with guard(run.who("optimizer", slot.name), "while writing a checkpoint"):
                    slot.optimizer.save_state(str(folder / "optimizers" / slot.name))
        for part, who, component, writes in stateful_components(run):
            if writes:  # every rank holding a component holds the same state of it: one writes it
                with guard(who, "while writing a checkpoint"):
                    component.save_state(str(folder / "components" / part))

    mine = {s.name: run.streams.state(s.name, run.layout.member(s.name)) for s in run.agents}
    streams = {key(name, k): stream for name, per_rank in run.layout.gather(mine, f"step {step}: saving RNG "
               "streams").items() for k, stream in enumerate(per_rank)}
    return checkpoint.write(run.checkpoint_root, step, state, {**checkpoint.rng_state(), "agents": streams},
                            save_parts, run.spec.run.keep_checkpoints, run.layout,
                            fault=lambda where: process.fault(where, step, run.layout.rank))


def restore(run: RunHost, path: Path) -> int:
    """Load every part of checkpoint ``path`` into a built run; returns its step."""
    for slot in run.agents:
        if slot.optimizer is not None:
            with guard(run.who("agent", slot.name), "while restoring a checkpoint"):
                slot.agent.load_state(str(path / "agents" / slot.name))
            with guard(run.who("optimizer", slot.name), "while restoring a checkpoint"):
                slot.optimizer.load_state(str(path / "optimizers" / slot.name))
    for part, who, component, _ in stateful_components(run):
        folder = path / "components" / part
        if not folder.is_dir():
            raise CorlError(f"{path}: no saved state of the {who}: the checkpoint was written by a run whose "
                            "component kept none (resume with the same components)")
        with guard(who, "while restoring a checkpoint"):
            component.load_state(str(folder))
    step = run.state.load_json(checkpoint.read_state(path))
    try:
        run.streams.load(checkpoint.restore_rng(path))
    except KeyError as exc:
        raise CorlError(f"{path}: no RNG stream saved for {exc.args[0]}: the checkpoint was written with another "
                        "number of ranks per agent (resume with the same agents[i].ranks) or by an older corl") from None
    return step


#: the component kinds whose state a checkpoint keeps when they implement
#: :class:`corl.protocols.Stateful` (agents and optimizers always keep theirs: it is in their protocols)
STATEFUL_KINDS = ("task", "verifier", "sampler", "aggregator", "router", "shaping", "observer")


def stateful_components(run: RunHost) -> list[tuple[str, str, Stateful, bool]]:
    """Every component of the run that keeps state across steps (:class:`corl.protocols.Stateful`),
    of each kind in :data:`STATEFUL_KINDS`: ``(folder under components/, how messages name it, the
    component, whether this rank writes it)``. A run-wide component is written by the rank that
    writes the run's files; an agent's sampler by its agent's first rank. Every rank that holds
    one restores it."""
    writer = run.layout.is_writer
    parts: list[tuple[str, str, Any, bool]] = [
        ("task", run.who("task"), run.task, writer),
        ("verifier", run.who("verifier"), run.verifier.inner, writer),
        *((f"sampler/{slot.name}", run.who("sampler", slot.name), slot.sampler, run.layout.leads(slot.name))
          for slot in run.agents),
        ("aggregator", run.who("aggregator"), run.aggregator.inner, writer),
        ("router", run.who("router"), run.router, writer),
        *((f"shaping/{slot.spec.name}", slot.who, slot.term, writer) for slot in run.shaping),
        *((f"observer/{name}", run.who("observer", name), observer, writer) for name, observer in run.observers),
    ]
    return [part for part in parts if isinstance(part[2], Stateful)]


def check_compatible(spec, path: Path, force: bool) -> None:
    """Refuse to resume ``path`` with a recipe that changed what the run trains, or with objects
    handed to ``corl.run`` whose settings changed (:func:`corl.recipe.schema.settings_of`), each
    change named by its key, or by the object and its field (unless ``force``)."""
    state = checkpoint.read_state(path)
    changes = recipe_mod.differences(state["recipe"], recipe_mod.to_dict(spec), defaults=recipe_mod.defaults_of(spec))
    saved = state.get("objects", {})  # (a checkpoint of a run without objects has none)
    objects = [f"{argument(key)}= object {given.cls}: {change}" for key, given in spec.objects.items()
               for change in recipe_mod.differences(saved.get(key, {}), dict(given.settings), ignore=())]
    changes = objects + changes
    if changes and not force:
        shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
        same = "the same recipe and objects of the same settings, or pass force=True" if objects else \
            "the same recipe, or pass --force"
        raise CorlError(f"{path}: the recipe changed since this checkpoint ({shown}); resume with {same}")

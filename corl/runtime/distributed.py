"""Where agents run: all in one process (the default), or spread over ranks launched by
``torchrun`` / ``accelerate launch``.

Agents share no parameters, so a rank only ever holds the agents placed on it; what crosses
between ranks is small Python objects (votes, metrics, evaluation scores), all-gathered so that
every rank votes and routes identically. An agent placed on several ranks is sharded over them
(the ``hf`` agent: FSDP2): each rank samples its shard of the step's prompts and trains on it, and
the sharding engine reduces the gradients inside the agent's group (:mod:`corl.runtime.groups`).

The run talks to its :class:`Layout`, a :class:`Local` (one process) or a :class:`Distributed` one,
through the same small interface, so the loop has no distributed branches; where an agent sits on
the ranks (:class:`Placement`) is the same arithmetic for both. Distributed collectives run on
standalone process groups (gloo for objects; NCCL for the shards of a GPU agent) built from the
launcher's rendezvous store, never on torch's default group: an inference engine in the same
process (vLLM, SGLang) sets up its own default group as if it were alone. Every collective has
``run.collective_timeout``; a rank that dies or hangs ends the run with one message
(:class:`RankLost`) on every surviving rank.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from corl.context import OneRank
from corl.errors import CorlError, TrainingError
from corl.runtime.groups import LocalGroup, TorchGroup


class RankLost(TrainingError):
    """A collective failed or timed out: another rank died or stopped answering."""


Group = OneRank  # an agent's ranks as its agent and optimizer see them (ctx.group); one rank: no-ops
LOCAL_GROUP = LocalGroup()


def placement(spec, world_size: int) -> dict[str, list[int]]:
    """Which ranks serve which agent: the recipe's ``agents[i].ranks``, or, when no agent names
    ranks, equal contiguous blocks (one rank per agent when there are as many ranks as agents)."""
    agents = spec.agents
    if world_size == 1:
        return {a.name: [0] for a in agents}
    if any(a.ranks for a in agents):
        out = {a.name: list(a.ranks) for a in agents}
        for i, a in enumerate(agents):
            for r in a.ranks:
                if r >= world_size:
                    raise CorlError(f"agents[{i}].ranks: rank {r} does not exist; this run has {world_size} "
                                    f"ranks (0-{world_size - 1})")
        idle = sorted(set(range(world_size)) - {r for ranks in out.values() for r in ranks})
        if idle:
            raise CorlError(f"rank {idle[0]} serves no agent; add it to an agent's ranks (agents[i].ranks) or "
                            f"launch {world_size - len(idle)} processes")
        return out
    if world_size % len(agents):
        raise CorlError(f"{world_size} processes for {len(agents)} agents: say which agent runs on which ranks with "
                        "agents[i].ranks (see docs/how-to/scale-out.md)")
    per = world_size // len(agents)
    return {a.name: list(range(i * per, (i + 1) * per)) for i, a in enumerate(agents)}


class Layout(Protocol):
    """Where the agents of a run sit and how its ranks exchange objects: what the run, its step and
    its checkpoints ask, never how many processes there are."""

    rank: int
    world_size: int
    is_writer: bool  # writes the run's own files (rank 0)
    names: list[str]  # every agent, in recipe order
    members: dict[str, list[int]]  # agent -> the ranks that serve it
    run_id: str  # the same on every rank: names a checkpoint's temp folder
    hint: Callable[[], str]  # what to do when a rank is lost (set by the run)

    def owns(self, name: str) -> bool: ...
    def member(self, name: str) -> int: ...
    def leads(self, name: str) -> bool: ...
    def shard(self, name: str, items: Sequence[Any]) -> list[Any]: ...
    def collective(self, name: str) -> bool: ...
    def group(self, name: str) -> Group: ...
    def gather(self, local: dict[str, Any], what: str) -> dict[str, list[Any]]: ...
    def share(self, obj: Any, what: str) -> Any: ...
    def everyone(self, obj: Any, what: str) -> list[Any]: ...
    def barrier(self, what: str) -> None: ...
    def close(self, *, wait: bool = True) -> None: ...


class Placement:
    """Which ranks serve which agent, seen from this rank: the part of a :class:`Layout` that is
    arithmetic on ``rank`` and ``members``, the same in one process and in many."""

    rank: int
    members: dict[str, list[int]]

    def owns(self, name: str) -> bool:
        """This rank holds (samples and trains) agent ``name``."""
        return self.rank in self.members[name]

    def member(self, name: str) -> int:
        """This rank's position in agent ``name``'s group (0: the leader, which writes its files)."""
        return self.members[name].index(self.rank)

    def leads(self, name: str) -> bool:
        return self.owns(name) and self.member(name) == 0

    def shard(self, name: str, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous share of ``items`` (all of them for a one-rank agent)."""
        return list(items[slice(*_bounds(len(items), len(self.members[name]), self.member(name)))])

    def collective(self, name: str) -> bool:
        """Agent ``name`` is sharded over several ranks, so its passes are collective: every rank of
        its group must run each one (none may run out of work before the others)."""
        return len(self.members[name]) > 1


class Local(Placement):
    """Every agent in this process: gathers return what they are given."""

    rank, world_size, is_writer = 0, 1, True

    def __init__(self, spec):
        self.names = spec.agent_names()
        self.members = {name: [0] for name in self.names}
        self.run_id = str(os.getpid())  # names a checkpoint's temp folder
        self.hint: Callable[[], str] = lambda: ""  # what to do when a rank is lost (set by the run)

    def group(self, name: str) -> Group:
        return LOCAL_GROUP

    def gather(self, local: dict[str, Any], what: str) -> dict[str, list[Any]]:
        """Every agent's objects (recipe order), one per rank of its group in group order, from
        ``local`` = {agent this rank holds: its object}."""
        return {name: [local[name]] for name in self.names if name in local}

    def share(self, obj: Any, what: str) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def everyone(self, obj: Any, what: str) -> list[Any]:
        """Every rank's ``obj``, by rank."""
        return [obj]

    def barrier(self, what: str) -> None:
        pass

    def close(self, *, wait: bool = True) -> None:
        pass


def _bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def merge_shards(shards: list[list[Any]]) -> list[Any]:
    """One agent's per-rank shards (group order), joined back into the whole list."""
    return [x for shard in shards for x in shard]


class Distributed(Placement):
    """Agents spread over the ranks of a ``torchrun`` / ``accelerate launch`` job. ``devices``: where
    each agent's weights live (its type's :class:`~corl.traits.ModelFacts`; absent: the CPU), so
    that a group of ranks of a CUDA agent reduces its shards over NCCL."""

    def __init__(self, spec, env: dict[str, str] | None = None, devices: Mapping[str, str] | None = None):
        import datetime

        import torch
        import torch.distributed as dist

        env = os.environ if env is None else env
        self.names = spec.agent_names()
        self.run_id = str(os.getpid())  # agreed on below
        self.hint: Callable[[], str] = lambda: ""
        self.timeout = spec.run.collective_timeout
        delta = datetime.timedelta(seconds=self.timeout)
        try:
            store, self.rank, self.world_size = next(dist.rendezvous("env://", timeout=delta))
        except (RuntimeError, ValueError) as exc:
            raise CorlError(f"cannot join the other ranks ({_first_line(exc)}); launch with torchrun or "
                            "accelerate launch (see docs/how-to/scale-out.md)") from None
        self.is_writer = self.rank == 0
        local_rank = int(env.get("LOCAL_RANK", 0))
        if torch.cuda.is_available() and local_rank < torch.cuda.device_count():
            torch.cuda.set_device(local_rank)  # device "cuda" means this rank's GPU
        self._pg = dist.ProcessGroupGloo(dist.PrefixStore("corl/world", store), self.rank, self.world_size, delta)
        self.members = placement(spec, self.world_size)
        self._groups: dict[str, Group] = {}
        for a in spec.agents:
            ranks = self.members[a.name]
            if self.rank in ranks and len(ranks) > 1:
                device = (devices or {}).get(a.name, "cpu")
                prefix = dist.PrefixStore(f"corl/agent/{a.name}", store)
                self._groups[a.name] = TorchGroup(f"agent/{a.name}", prefix, ranks.index(self.rank), len(ranks),
                                                  delta, cuda=device.startswith("cuda"), describe=self._lost)
        self.run_id = self.share(self.run_id, "agreeing on a run id")

    def group(self, name: str) -> Group:
        return self._groups.get(name, LOCAL_GROUP)

    def gather(self, local: dict[str, Any], what: str) -> dict[str, list[Any]]:
        per_rank = self._all_gather(local, what)
        return {name: [per_rank[r][name] for r in self.members[name]] for name in self.names}

    def share(self, obj: Any, what: str) -> Any:
        return self._all_gather(obj if self.is_writer else None, what)[0]

    def everyone(self, obj: Any, what: str) -> list[Any]:
        return self._all_gather(obj, what)

    def barrier(self, what: str) -> None:
        self._all_gather(None, what)

    def _all_gather(self, obj: Any, what: str) -> list[Any]:
        import torch

        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        try:
            sizes = [torch.zeros(1, dtype=torch.long) for _ in range(self.world_size)]
            self._pg.allgather([sizes], [torch.tensor([data.numel()])]).wait()
            width = max(int(s) for s in sizes)
            padded = torch.zeros(width, dtype=torch.uint8)
            padded[: data.numel()] = data
            out = [torch.empty(width, dtype=torch.uint8) for _ in range(self.world_size)]
            self._pg.allgather([out], [padded]).wait()
        except RuntimeError as exc:
            raise self._lost(what, exc) from None
        # Only ranks of this very job are unpickled: the store is the launcher's own.
        return [pickle.loads(o[: int(s)].numpy().tobytes()) for o, s in zip(out, sizes)]

    def _lost(self, what: str, exc: BaseException) -> RankLost:
        hint = self.hint()
        lost = RankLost(f"rank {self.rank}: {what}: another rank died or did not answer within "
                        f"{self.timeout:g}s (run.collective_timeout): {_first_line(exc)}. The run stopped"
                        + (f"; {hint}" if hint else ""))
        # Said at once: a launcher that saw the dead rank is about to terminate this one too.
        print(f"corl: error: {lost}", file=sys.stderr, flush=True)
        lost.reported = True
        return lost

    def close(self, *, wait: bool = True) -> None:
        """Tear the groups down while the interpreter is alive: the agents' groups, then the world
        group, and with them the launcher's store they hold (rank 0 hosts it). ``wait`` first meets
        every rank, so no rank drops the store while another still talks through it (left to
        interpreter shutdown, that race aborted a rank: "terminate called without an active exception")."""
        if self._pg is None:
            return
        if wait:
            try:
                self.barrier("closing the process groups")
            except RankLost:
                pass  # already said; closing goes on
        for group in self._groups.values():
            group.close()
        self._groups.clear()
        self._pg = None


def layout_for(spec, env: dict[str, str] | None = None, *, devices: Mapping[str, str] | None = None) -> Layout:
    """:class:`Distributed` when launched as several processes (``WORLD_SIZE`` > 1), else :class:`Local`;
    ``devices``: each agent's device, as its type describes it (:class:`Distributed`)."""
    env = os.environ if env is None else env
    return Distributed(spec, env, devices) if int(env.get("WORLD_SIZE", "1")) > 1 else Local(spec)


def _first_line(exc: BaseException) -> str:
    """The gist of a backend error: gloo's "[file.cc:553] Connection closed by peer [addr]. This is..." """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text.splitlines()[0])
    return re.split(r"\.\s", text, maxsplit=1)[0].rstrip(".")

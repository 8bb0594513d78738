"""One RNG stream per agent, so that where an agent runs never changes what it samples.

Every agent (and, inside a sharded agent's group, every rank of it) draws its sampling and its
minibatch order from its own torch stream, seeded from ``run.seed`` and the agent's name. The
run enters the stream around everything the agent does (``with streams.use(name): ...``): the
global torch RNG is forked, set to the agent's state, and the advanced state is kept when the
block ends. So a run with all agents in one process and a run with one agent per process draw
the same numbers for each agent, and a checkpoint restores each stream exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


def stream_seed(seed: int, name: str, member: int = 0) -> int:
    """A 63-bit seed for agent ``name`` (rank ``member`` of its group), stable across processes."""
    digest = hashlib.sha256(f"{seed}/{name}/{member}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class AgentStreams:
    """Torch RNG states by stream key (an agent name, with ``#k`` for rank k > 0 of its group)."""

    def __init__(self, seed: int, keys: Iterable[tuple[str, int]]):
        self._states: dict[str, dict[str, Any]] = {
            key(name, member): {"seed": stream_seed(seed, name, member), "cpu": None, "cuda": None}
            for name, member in keys}

    @contextmanager
    def use(self, name: str, member: int = 0) -> Iterator[None]:
        import torch

        state = self._states[key(name, member)]
        cuda = torch.cuda.is_available()
        with _forked():
            if state["cpu"] is None:
                torch.manual_seed(state["seed"])  # CPU and every CUDA device
            else:
                torch.set_rng_state(state["cpu"])
                if cuda and state["cuda"] is not None:
                    torch.cuda.set_rng_state_all(state["cuda"])
            try:
                yield
            finally:
                state["cpu"] = torch.get_rng_state()
                state["cuda"] = torch.cuda.get_rng_state_all() if cuda else None

    def state(self, name: str, member: int = 0) -> dict[str, Any]:
        """One stream as JSON-ready lists (for a checkpoint)."""
        s = self._states[key(name, member)]
        return {"seed": s["seed"], "cpu": None if s["cpu"] is None else s["cpu"].tolist(),
                "cuda": None if s["cuda"] is None else [t.tolist() for t in s["cuda"]]}

    def load(self, saved: dict[str, Any]) -> None:
        """Restore the streams this process holds from ``{key: state}`` (as saved in a checkpoint)."""
        import torch

        missing = sorted(set(self._states) - set(saved))
        if missing:
            raise KeyError(", ".join(missing))
        for k, s in self._states.items():
            entry = saved[k]
            as_bytes = lambda values: torch.tensor(values, dtype=torch.uint8)
            s.update(seed=entry["seed"], cpu=None if entry["cpu"] is None else as_bytes(entry["cpu"]),
                     cuda=None if entry["cuda"] is None else [as_bytes(t) for t in entry["cuda"]])


@contextmanager
def fixed(seed: int) -> Iterator[None]:
    """Draw from a fresh stream seeded with ``seed``; the caller's RNG state is left untouched.

    Evaluations use it (common random numbers): every evaluation of an agent draws the same
    numbers, so the change between two evaluations measures the model, not the draw, and
    evaluating never advances the agent's training stream (``eval.every`` leaves training as is).
    """
    import torch

    with _forked():
        torch.manual_seed(seed)
        yield


def _forked():
    """Fork the global CPU and CUDA RNG states: whatever the block draws is undone when it ends."""
    import torch

    cuda = torch.cuda.is_available()
    return torch.random.fork_rng(devices=range(torch.cuda.device_count()) if cuda else [])


def key(name: str, member: int = 0) -> str:
    return name if member == 0 else f"{name}#{member}"

"""What a run sets up in its process: seeds, glibc's allocator, signal handling, fault injection."""

from __future__ import annotations

import os
import random
import signal
from typing import Any

from corl.context import StopToken


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global RNGs (the agents draw from their own streams, corl.runtime.rng)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def return_large_blocks() -> None:
    """Have glibc serve blocks of 1 MiB and more with mmap, so they go back to the system on free.

    glibc raises its mmap threshold as large blocks are freed, after which big transient tensors
    (a real model's [rows, vocab] logits, chunk log-softmaxes) come from the heap and stay in the
    process: the real recipe peaked at 8.6 GB RSS with the default and 6.8 GB with this, measured
    side by side (docs/how-to/real-models.md). A no-op where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD; setting it also fixes it (no dynamic growth)
    except (OSError, AttributeError):
        pass


class StopOnSignal:
    """SIGINT / SIGTERM ask ``token`` for a stop (:class:`corl.context.StopToken`) instead of raising
    where they land (main thread only). The run abandons builds and evaluations at the token's
    check points and otherwise stops at its next safe point; a repeated signal never interrupts
    the saving of completed steps (SIGKILL does, and loses the steps since the last checkpoint)."""

    def __init__(self, token: StopToken) -> None:
        self.token = token
        self._previous: dict[int, Any] = {}

    @property
    def signal(self) -> int | None:
        return self.token.signal

    def __enter__(self) -> StopOnSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    def _handle(self, signum, frame) -> None:
        self.token.request(signum)
        name = signal.Signals(signum).name
        note = (f"corl: {name}: stopping; completed steps are saved first\n" if self.token.count == 1 else
                f"corl: {name} again: still stopping; completed steps are saved first (SIGKILL would lose the "
                "steps since the last checkpoint)\n")
        try:
            os.write(2, note.encode())  # not print: the handler may run while stderr is mid-write
        except OSError:
            pass

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def fault(where: str, step: int, rank: int = 0) -> None:
    """Fault injection for the resume tests: ``CORL_FAULT=WHERE:STEP`` SIGKILLs this process there
    (``WHERE:STEP@RANK``: only that rank of a several-process run)."""
    wanted = os.environ.get("CORL_FAULT")
    if wanted and wanted in (f"{where}:{step}", f"{where}:{step}@{rank}"):
        os.kill(os.getpid(), signal.SIGKILL)

"""What a run sets up in its process: seeds, glibc's allocator, signal handling, fault injection."""

from __future__ import annotations

import os
import random
import signal
from typing import Any


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
    side by side (docs/real-models.md). A no-op where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD; setting it also fixes it (no dynamic growth)
    except (OSError, AttributeError):
        pass


class StopOnSignal:
    """Turn SIGINT / SIGTERM into a flag the loop checks after each step (main thread only)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:  # a second signal: stop now
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def fault(where: str, step: int, rank: int = 0) -> None:
    """Fault injection for the resume tests: ``CORL_FAULT=WHERE:STEP`` SIGKILLs this process there
    (``WHERE:STEP@RANK``: only that rank of a several-process run)."""
    wanted = os.environ.get("CORL_FAULT")
    if wanted and wanted in (f"{where}:{step}", f"{where}:{step}@{rank}"):
        os.kill(os.getpid(), signal.SIGKILL)

"""One run per folder: an exclusive kernel lock on ``OUTPUT_DIR/.corl.lock`` for the life of a run.

``flock`` ties the lock to the open file, so it ends with the process however the process ends
(a SIGKILL included): a lock left by a killed run never blocks the next one, and no pid file has to
be guessed stale. The file holds the holder's pid, host and command, only to name it when a second
process is refused.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from corl.errors import CorlError

NAME = ".corl.lock"


def unwritable(folder: Path, exc: OSError) -> CorlError:
    why = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied", errno.EPERM: "permission denied",
           errno.ENOSPC: "no space left on device"}.get(exc.errno, exc.strerror or str(exc))
    return CorlError(f"{folder}: cannot write the run's output folder ({why}); choose another run.output_dir, or make "
                     "it writable")


@contextlib.contextmanager
def holding(folder: Path, what: str, enabled: bool = True) -> Iterator[None]:
    """Hold ``folder``'s lock for the block (``what``: the command, for the refusal's line); refuse
    in one line, naming the holder, when another process holds it. ``enabled=False``: a no-op (the
    ranks of a run other than its writer, which holds it for all)."""
    if not enabled:
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise unwritable(folder, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CorlError(f"{folder} is in use by another corl process ({holder(fd)}); wait for it to end or stop "
                            "it, or choose another run.output_dir") from None
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": what,
                             "since": time.strftime("%Y-%m-%d %H:%M:%S")})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
        except OSError as exc:
            raise unwritable(folder, exc) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def holder(fd: int) -> str:
    """Who holds the lock, as its file says (it writes the file just after taking the lock)."""
    for _ in range(20):
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            info = None
        if isinstance(info, dict):
            return f"pid {info.get('pid')} on {info.get('host')}: {info.get('command')}, since {info.get('since')}"
        time.sleep(0.05)
    return "its pid is not recorded yet"


def command() -> str:
    """This process's command line, shortened for the holder's record."""
    text = " ".join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv))
    return text if len(text) <= 200 else text[:197] + "..."

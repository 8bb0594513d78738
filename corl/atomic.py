"""Folders that appear whole or not at all: written into a hidden temp folder, fsynced, renamed.

Model caches (the zoo, converted models) use :func:`atomic_folder`; whole-run checkpoints and
final exports, written together by the ranks of a run, use :func:`write_together`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from corl import manifest
from corl.errors import CorlError


def fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(root)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside ``final`` to fill; when the block ends, rename it to ``final``.

    A half-written folder is never picked up: an error (or a kill) leaves only the hidden temp
    folder, removed here on an error. When another process renamed its own ``final`` first (two
    runs building one cached model), theirs is kept and ours dropped.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        yield tmp
        fsync_tree(tmp)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not final.is_dir() or not any(final.iterdir()):  # not a race another process won
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_together(final: Path, layout, save_local: Callable[[Path], None], save_shared: Callable[[Path], None],
                   fault: Callable[[], None] = lambda: None) -> Path:
    """Write folder ``final`` atomically from every rank: a hidden temp folder that each rank
    fills (``save_local``) and the writer completes (``save_shared``), digests into its
    ``manifest.json`` (:mod:`corl.manifest`), fsyncs and renames. Readers see the old folder or the
    new one, never half of one; a write that fails (a full disk) leaves no temp folder behind."""
    tmp = final.parent / f".{final.name}.tmp-{layout.run_id}"
    if layout.is_writer:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        layout.barrier(f"starting {final.name}")
        save_local(tmp)
        fault()  # tests kill the process here: mid-write
        layout.barrier(f"writing {final.name}")  # every rank's parts are in
        if layout.is_writer:
            save_shared(tmp)
            manifest.write(tmp)  # last: it lists what the folder holds
            fsync_tree(tmp)
            old = final.parent / f".{final.name}.old-{layout.run_id}"
            if final.exists():  # the same step written again (e.g. on a signal right after a periodic save)
                os.replace(final, old)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        if layout.is_writer:
            written, free = tree_size(tmp), _free(final.parent)
            shutil.rmtree(tmp, ignore_errors=True)
            if out_of_space(exc, free):
                raise NoSpace(f"no space left on device writing {final} ({written / 1e6:.1f} MB written when the "
                              f"disk filled, {free / 1e6:.1f} MB free; the partial folder was removed)",
                              written, free) from exc
        raise
    layout.barrier(f"finishing {final.name}")
    return final


class NoSpace(CorlError):
    """The disk filled while a folder was written; its temp folder is removed."""

    def __init__(self, message: str, written: int, free: int):
        super().__init__(message)
        self.written, self.free = written, free


def tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return -1


def out_of_space(exc: BaseException, free: int) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk: ENOSPC / EDQUOT, or a writer's error
    while the disk is full (torch's zip writer says ``unexpected pos``, not the errno)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "os error 28" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return 0 <= free < FULL


#: Free bytes under which a failed write is put down to a full disk (a file system keeps a few blocks).
FULL = 1 << 20


#: The prefix of a folder being removed (:func:`remove`): never read, removed again by whoever finds it.
TRASH = ".trash-"


def remove(path: Path, fault: Callable[[], None] = lambda: None) -> None:
    """Remove folder ``path`` crash-safely: renamed away first (one atomic step), then deleted, so a
    kill mid-delete leaves a hidden ``.trash-*`` folder, never a half-deleted ``path``."""
    trash = path.parent / f"{TRASH}{path.name}-{os.getpid()}"
    try:
        os.replace(path, trash)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)
    fault()  # tests kill the process here: mid-delete
    shutil.rmtree(trash, ignore_errors=True)

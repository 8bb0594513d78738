"""Folders that appear whole or not at all: written into a hidden temp folder, fsynced, renamed.

Model caches (the zoo, converted models) use :func:`atomic_folder`; whole-run checkpoints and
final exports, written together by the ranks of a run, use :func:`write_together`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


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
    fills (``save_local``) and the writer completes (``save_shared``), fsyncs and renames.
    Readers see the old folder or the new one, never half of one."""
    tmp = final.parent / f".{final.name}.tmp-{layout.run_id}"
    if layout.is_writer:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    layout.barrier(f"starting {final.name}")
    save_local(tmp)
    fault()  # tests kill the process here: mid-write
    layout.barrier(f"writing {final.name}")  # every rank's parts are in
    if layout.is_writer:
        save_shared(tmp)
        fsync_tree(tmp)
        old = final.parent / f".{final.name}.old-{layout.run_id}"
        if final.exists():  # the same step written again (e.g. on a signal right after a periodic save)
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        shutil.rmtree(old, ignore_errors=True)
    layout.barrier(f"finishing {final.name}")
    return final

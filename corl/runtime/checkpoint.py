"""Whole-run checkpoints: written atomically, found again on resume.

A checkpoint is a folder ``output_dir/checkpoints/step-NNNNNN`` holding every agent's weights
(safetensors, via ``Agent.save_state``), every optimizer's state (``Optimizer.save_state``),
every RNG state (the global ones and each agent's stream, see :mod:`corl.runtime.rng`), and ``state.json`` (step, data cursor, metrics so far, the resolved recipe).
It is written into a hidden temp folder, digested into ``manifest.json`` (:mod:`corl.manifest`),
fsynced, and renamed into place, so a folder named ``step-*`` is always complete; a kill during the
write leaves only a temp folder that resume ignores and removes, and old checkpoints are removed
by renaming them away first (:func:`corl.atomic.remove`). Resume verifies a checkpoint against its
manifest before loading it (:func:`resume_point`). Nothing is unpickled on load (JSON,
safetensors, ``weights_only=True``).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl import manifest
from corl.atomic import TRASH, NoSpace, remove, write_together
from corl.errors import CorlError

STEP_DIR = re.compile(r"step-(\d{6,})")


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": jsonable(random.getstate()), "torch": torch.get_rng_state().tolist()}
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = [name, keys.tolist(), pos, has_gauss, cached]
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(tuples(state["python"]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def jsonable(value: Any) -> Any:
    """A ``random.getstate()`` tuple as JSON lists."""
    return [jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def tuples(value: Any) -> Any:
    """The inverse of :func:`jsonable`."""
    return tuple(tuples(v) for v in value) if isinstance(value, list) else value


def write(root: Path, step: int, state: dict[str, Any], rng: dict[str, Any], save_parts: Callable[[Path], None],
          keep: int, layout, fault: Callable[[str], None] = lambda where: None) -> Path:
    """Write checkpoint ``step`` under ``root`` atomically and keep the newest ``keep``.

    ``save_parts`` runs on every rank (each writes the agents it leads); the writer (rank 0)
    adds ``rng.json`` and ``state.json`` once every part is in, then renames the folder.
    """
    def save_shared(tmp: Path) -> None:
        (tmp / "rng.json").write_text(json.dumps(rng))
        (tmp / "state.json").write_text(json.dumps(state))

    target = root / f"step-{step:06d}"
    try:
        final = write_together(target, layout, save_parts, save_shared, lambda: fault("checkpoint"))
    except NoSpace as exc:
        previous = list_complete(root)
        needed = manifest.size_of(previous[-1]) if previous else None
        raise NoSpace(f"{exc}; checkpoint {target.name} needs about {mb(needed)} (the size of {previous[-1].name}, "
                      f"which is intact); free space in {root} and continue with --resume" if needed else
                      f"{exc}; free space in {root} and continue with --resume", exc.written, exc.free) from exc
    if layout.is_writer:
        for old in list_complete(root)[:-keep]:
            if old != final:
                remove(old, lambda: fault("retention"))  # renamed away first: never a half-deleted step-*
    return final


def mb(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.1f} MB"


def list_complete(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def latest(root: Path, clean: bool = False) -> Path | None:
    """The newest complete checkpoint; with ``clean``, the temp folders of killed writes and deletes
    are removed (only under the run folder's lock, :mod:`corl.runtime.lock`: no other run writes there)."""
    if clean and root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".step-", TRASH)):
                shutil.rmtree(p, ignore_errors=True)
    found = list_complete(root)
    return found[-1] if found else None


def step_of(path: Path) -> int:
    return int(STEP_DIR.fullmatch(path.name).group(1))


def named(root: Path, name: str) -> Path:
    """The checkpoint ``--resume-from`` names: ``step-000040``, ``step-40``, ``40`` or its path."""
    m = re.fullmatch(r"(?:step-)?(\d+)", Path(name).name)
    if m is None:
        raise CorlError(f"--resume-from {name!r}: expected a checkpoint's name, e.g. step-000040 (or its step, 40)")
    path = root / f"step-{int(m.group(1)):06d}"
    if not path.is_dir():
        have = ", ".join(p.name for p in list_complete(root)) or "none"
        raise CorlError(f"--resume-from {name}: no checkpoint {path}; complete checkpoints: {have}")
    return path


def check(path: Path) -> None:
    """Raise :class:`corl.manifest.ManifestError` naming what in checkpoint ``path`` is not as written."""
    manifest.verify(path)
    for name in ("state.json", "rng.json"):
        read_json(path / name)


def resume_point(root: Path, log: Callable[[str], None], name: str | None = None) -> Path | None:
    """The checkpoint a resume loads: ``name`` exactly (refused, naming what is wrong, unless it
    verifies), else the newest that verifies; a newer one that does not is named in one line and
    renamed ``step-N.unverified`` (kept, out of the way of retention and of later resumes)."""
    if name is not None:
        path = named(root, name)
        check(path)
        return path
    failed = []
    for path in reversed(list_complete(root)):
        try:
            check(path)
        except CorlError as exc:
            failed.append((path, str(exc)))
            continue
        for bad, why in failed:
            bad.rename(bad.with_name(bad.name + ".unverified"))
            log(f"checkpoint {bad.name} does not verify ({why}); resuming from {path.name}, the newest checkpoint that "
                f"does (the bad one is kept as {bad.name}.unverified)")
        return path
    if failed:
        why = "; ".join(why for _, why in failed)
        raise CorlError(f"{root}: no checkpoint verifies: {why}; restore the files, or start the run over with "
                        "--force (without --resume)")
    return None


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise manifest.ManifestError(f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc})") from None


def read_state(path: Path) -> dict[str, Any]:
    return read_json(path / "state.json")


def restore_rng(path: Path) -> dict[str, Any]:
    """Set the global RNG states saved in ``path``; return the agents' streams saved beside them."""
    saved = read_json(path / "rng.json")
    set_rng_state(saved)
    return saved.get("agents", {})

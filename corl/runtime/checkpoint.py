"""Whole-run checkpoints: written atomically, found again on resume.

A checkpoint is a folder ``output_dir/checkpoints/step-NNNNNN`` holding every agent's weights
(safetensors, via ``Agent.save_state``), every optimizer's state (``Optimizer.save_state``),
every RNG state (the global ones and each agent's stream, see :mod:`corl.runtime.rng`), and ``state.json`` (step, data cursor, metrics so far, the resolved recipe).
It is written into a hidden temp folder, fsynced, and renamed into place, so a folder named
``step-*`` is always complete; a kill during the write leaves only a temp folder that resume
ignores and removes. Nothing is unpickled on load (JSON, safetensors, ``weights_only=True``).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl.atomic import write_together

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

    final = write_together(root / f"step-{step:06d}", layout, save_parts, save_shared, lambda: fault("checkpoint"))
    if layout.is_writer:
        for old in list_complete(root)[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def list_complete(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def latest(root: Path, clean: bool = False) -> Path | None:
    """The newest complete checkpoint; with ``clean``, stale temp folders of killed writes are removed."""
    if clean and root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".step-"):
                shutil.rmtree(p, ignore_errors=True)
    found = list_complete(root)
    return found[-1] if found else None


def read_state(path: Path) -> dict[str, Any]:
    return json.loads((path / "state.json").read_text())


def restore_rng(path: Path) -> dict[str, Any]:
    """Set the global RNG states saved in ``path``; return the agents' streams saved beside them."""
    saved = json.loads((path / "rng.json").read_text())
    set_rng_state(saved)
    return saved.get("agents", {})

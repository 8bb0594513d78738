"""A run's output folder: what an earlier run left there, and when a new run may write over it.

A folder that holds a finished run (``summary.json``) or a started one (a complete checkpoint, or
trained steps in ``metrics.jsonl``) is never written over unless the user says so: ``--resume``
continues it, ``--force`` (``corl.run(..., force=True)``) replaces it. A folder whose earlier run
trained nothing (it stopped while building or in the first evaluation) is simply reused. Replacing
removes only the files corl writes there, never the folder itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from corl import recipe as recipe_mod
from corl.atomic import TRASH
from corl.errors import CorlError
from corl.runtime import checkpoint, snapshot

if TYPE_CHECKING:
    from corl.runtime.host import RunHost

#: Files and folders of a run's output dir that corl itself writes (report/ by `corl report`).
OWN_FILES = ("recipe.json", "recipe.source", "summary.json", "metrics.jsonl", "report")


def earlier_run(out: Path) -> tuple[str, str] | None:
    """``("finished" | "started", evidence)`` for a run in ``out`` worth keeping, else None."""
    if (out / "summary.json").is_file():
        return "finished", "summary.json"
    complete = checkpoint.list_complete(out / "checkpoints")
    if complete:
        return "started", f"newest checkpoint {complete[-1].name}"
    if _trained_steps(out / "metrics.jsonl"):
        return "started", "trained steps in metrics.jsonl, no checkpoint"
    return None


def _trained_steps(path: Path) -> bool:
    try:
        with path.open() as f:
            for line in f:
                try:
                    if json.loads(line).get("kind") == "train":
                        return True
                except (ValueError, AttributeError):
                    continue
    except OSError:
        pass
    return False


def claim(out: Path, *, resume: bool, force: bool, found: Path | None, log) -> None:
    """Make ``out`` ready for a run that starts at step 0 (``found`` is None) or resumes ``found``;
    refuse, naming what is there and what to do, when that would write over an earlier run."""
    if found is not None:
        return  # continuing the run that is there
    earlier = earlier_run(out)
    if earlier is not None and not force:
        kind, evidence = earlier
        if kind == "finished" and resume:
            raise CorlError(f"{out} holds a finished run ({evidence}) and no checkpoint to continue from, so --resume "
                            "would train it again from step 0; choose another run.output_dir to keep it, or pass "
                            "--force to replace it")
        if kind == "finished":
            complete = checkpoint.list_complete(out / "checkpoints")
            further = (f"; to train it further, raise run.steps and continue it with --resume (from its checkpoint "
                       f"{complete[-1].name})" if complete else "")
            raise CorlError(f"{out} holds a finished run ({evidence}){further}; choose another run.output_dir (or "
                            "run.name) to keep it, or pass --force to replace it")
        if not resume:
            raise CorlError(f"{out} holds a started run ({evidence}); continue it with --resume, or pass --force "
                            "to replace it")
    if earlier is not None:
        log(f"{out}: replacing the earlier run there ({earlier[1]})")
    if (out / "recipe.json").exists() or earlier is not None:
        clear(out)  # a fresh start: nothing of the earlier run may mix with this one


def clear(out: Path) -> None:
    """Remove what corl wrote in ``out`` (never other files, never the folder)."""
    for name in OWN_FILES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    ckpts = out / "checkpoints"
    if ckpts.is_dir():
        for p in ckpts.iterdir():
            if (checkpoint.STEP_DIR.fullmatch(p.name.removesuffix(".unverified")) or p.name == "final"
                    or p.name.startswith((".step-", ".final", TRASH))):
                shutil.rmtree(p, ignore_errors=True)
    board = out / "tensorboard"
    if board.is_dir():
        for p in board.glob("events.out.tfevents.*"):
            p.unlink()


def embedded_elsewhere(out: Path, spec, found: Path | None) -> str | None:
    """Why ``spec`` may not resume the run in ``out`` (None: it may): that run was built in Python
    with components handed to ``corl.run`` as objects, which this run does not hand in (a command
    line never can), or hands in as objects of other classes. Read from the checkpoint it would
    resume, else from the folder's ``recipe.json``; said whatever ``--force`` says."""
    if found is not None:
        saved = checkpoint.read_state(found)["recipe"]
    elif (out / "recipe.json").is_file():
        saved = json.loads((out / "recipe.json").read_text())
    else:
        return None
    mine = recipe_mod.recorded_objects(recipe_mod.to_dict(spec))
    others = {kind: record for kind, record in recipe_mod.recorded_objects(saved).items() if mine.get(kind) != record}
    return recipe_mod.resume_from_python(str(out), others) if others else None


def open_for(run: RunHost) -> Path | None:
    """Make ``run.output_dir`` ready for ``run`` and return the checkpoint it resumes (None: it starts
    at step 0): with ``--resume``, the newest that verifies (or exactly ``run.resume_from``). Rank 0
    decides, under the folder's lock (:mod:`corl.runtime.lock`); every rank raises the same refusal.
    The recipe goes in first."""
    layout, out = run.layout, run.output_dir
    found, problem = None, None
    if layout.is_writer:
        try:
            if run.resume:
                checkpoint.latest(run.checkpoint_root, clean=True)  # under the lock: no other run writes there
                found = checkpoint.resume_point(run.checkpoint_root, run.log, run.resume_from)
                problem = embedded_elsewhere(out, run.spec, found) or past_the_end(run.spec, found)
            if problem is None:
                claim(out, resume=run.resume, force=run.force, found=found, log=run.log)
        except CorlError as exc:
            problem = str(exc)
    found, problem = layout.share((found, problem), "finding the checkpoint to resume")  # rank 0's view
    if problem:
        raise CorlError(problem)
    if found is not None:
        snapshot.check_compatible(run.spec, found, run.force)  # before any model loads
    out.mkdir(parents=True, exist_ok=True)
    if layout.is_writer:
        (out / "recipe.json").write_text(json.dumps(recipe_mod.to_dict(run.spec), indent=2))
        # where the recipe came from: relative data paths resolve against it when resuming from the run dir
        source = run.spec.source
        (out / "recipe.source").write_text(str(Path(source).resolve()) if source and not source.startswith("<") else "")
    return found


def past_the_end(spec, found: Path | None) -> str | None:
    """Why checkpoint ``found`` cannot be continued to ``run.steps`` (None: it can)."""
    if found is not None and checkpoint.step_of(found) > spec.run.steps:
        return (f"{found}: step {checkpoint.step_of(found)} is past run.steps ({spec.run.steps}); resume with "
                f"run.steps of {checkpoint.step_of(found)} or more")
    return None


def finished(out: Path, found: Path | None, steps: int) -> dict | None:
    """The summary of the finished run in ``out`` when its checkpoint ``found`` is its last step and
    ``steps`` (run.steps) asks for no more: resuming it has nothing to do (and must append nothing);
    else None."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if found is None or not isinstance(summary, dict) or not summary.get("steps") == checkpoint.step_of(found) == steps:
        return None
    return summary

"""Stopping a run on SIGINT / SIGTERM with its completed steps saved.

A signal asks the run's :class:`~corl.context.StopToken` for a stop (:class:`corl.runtime.process.
StopOnSignal`). Building the agents (a warm-start) and, in a one-process run, an evaluation are
abandoned at the token's next check point; a training step, a checkpoint write and the final save
finish first. Either way the last completed step is checkpointed (unless a checkpoint of it is on
disk already) before :class:`~corl.errors.Interrupted` reports where the run stopped, and repeated
signals never interrupt that write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corl.errors import Interrupted, PluginError, Stopping
from corl.runtime import checkpoint

if TYPE_CHECKING:
    from corl.runtime.host import RunHost


def exchange(run: RunHost, step: int) -> str | None:
    """After ``step``: a signal on any rank stops every rank here (raises :class:`Interrupted`);
    otherwise returns an observer's early-stop request on any rank (None: go on)."""
    flags = run.layout.everyone((run.stop.signal, run.stop_reason), f"step {step}: checking for signals")
    signum = next((s for s, _ in flags if s), None)
    if signum is not None:
        raise stopped(run, signum, f"after step {step}")
    return next((r for _, r in flags if r), None)


def stopped(run: RunHost, signum: int, where: str | None = None) -> Interrupted:
    """The :class:`Interrupted` for stopping now, once the last completed step is on disk."""
    where = where or run.phase
    step = run.completed
    if step > 0 and run.checkpointed_step != step:
        path = run.checkpoint(step)
    else:
        path = checkpoint.latest(run.checkpoint_root)
    if path is None:
        return Interrupted(signum, f"{where}; nothing was trained yet, so there is no checkpoint; run the same "
                                   "command again to start over")
    return Interrupted(signum, f"{where}; checkpoint {path}; continue with --resume")


def abandoned(run: RunHost, signum: int, who: str, grace: float) -> BaseException:
    """What to raise when ``who`` (a verifier) is still running ``grace`` seconds after a signal: in
    work the run may abandon (an evaluation), the usual stop, which saves the completed steps;
    inside a training step, the step is given up (its data order and RNG streams already moved, so
    it cannot be saved) and the run stops at its last checkpoint."""
    try:
        run.stop.check()
    except Stopping as stop:
        return stop
    last = checkpoint.latest(run.checkpoint_root)
    saved = (f"checkpoint {last}; continue with --resume (the steps after it run again)" if last else
             "nothing was checkpointed yet, so run the same command again to start over")
    return Interrupted(signum, f"{run.phase}: {who} did not return within {grace:g} s of the signal, so the step "
                               f"was given up; {saved}")


def failed(run: RunHost, error: PluginError) -> PluginError:
    """A component's failure during training, with where the run can be continued from: the same
    one line plus the last checkpoint (the traceback stays on it as its cause)."""
    last = checkpoint.latest(run.checkpoint_root)
    hint = (f"; last checkpoint {last}; continue with --resume" if last else
            "; no checkpoint was written before it (run.checkpoint_every), so a new run starts over")
    out = PluginError(f"{error}{hint}")
    out.__cause__ = error.__cause__
    return out

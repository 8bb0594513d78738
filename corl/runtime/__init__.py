"""The run: the host side of corl that drives components through the protocols.

* :mod:`~corl.runtime.loop`: :class:`Run` (the life cycle: set-up, loop, checkpoints, summary), ``run()``,
  ``prepare()``;
* :mod:`~corl.runtime.step`: one step, top to bottom;
* :mod:`~corl.runtime.build`: building components (or taking the objects handed in), naming them and
  checking what they are;
* :mod:`~corl.runtime.boundary`: checks of what components return;
* :mod:`~corl.runtime.state`, :mod:`~corl.runtime.health`, :mod:`~corl.runtime.metrics`: what a run
  carries between steps, its health checks, its per-step metrics;
* :mod:`~corl.runtime.evaluation`, :mod:`~corl.runtime.cohort`, :mod:`~corl.runtime.verify`: held-out
  scores, pairwise cohort matrices, time-bounded answer extraction;
* :mod:`~corl.runtime.checkpoint`, :mod:`~corl.runtime.rng`, :mod:`~corl.runtime.distributed`,
  :mod:`~corl.runtime.process`: checkpoints, per-agent RNG streams, process layouts, process set-up.

(Named ``runtime`` rather than ``run`` so that the package never shadows ``corl.run()``.)
"""

from corl.runtime.loop import Run, prepare, run

__all__ = ["Run", "prepare", "run"]

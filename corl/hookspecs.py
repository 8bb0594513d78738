"""Every pluggy hook corl calls. Built-in plugins implement these exactly as third-party ones do."""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("corl")


@hookspec
def corl_register_components(registry: Any) -> None:
    """Add component factories to ``registry`` (a :class:`corl.plugins.Registry`).

    Call ``registry.add(kind, name, factory, config_cls, help=...)`` once per component.
    ``kind`` is one of ``task``, ``agent``, ``sampler``, ``aggregator``, ``router``,
    ``optimizer``, ``observer``; ``config_cls`` is a frozen attrs class whose fields are the
    component's recipe keys.
    """


@hookspec
def corl_on_run_start(run: Any) -> None:
    """Called once the run's components are built, before the first evaluation.

    ``run`` is the :class:`corl.runner.Run`: ``run.spec``, ``run.agents``, ``run.output_dir``.
    """


@hookspec
def corl_on_step_end(run: Any, step: int, metrics: Any) -> None:
    """Called after every training step with a :class:`corl.types.StepMetrics`."""


@hookspec
def corl_on_eval_end(run: Any, step: int, results: dict[str, dict[str, float]], cohort: dict[str, Any]) -> None:
    """Called after each held-out evaluation: ``results[agent][metric]`` (step 0 is the base).

    ``cohort`` holds pairwise matrices over the agents' greedy answers (``agents``, ``n``,
    ``agreement``, and with labels ``phi`` and ``same_wrong``; see :mod:`corl.cohort`).
    """


@hookspec
def corl_on_run_failed(run: Any, error: BaseException) -> None:
    """Called instead of ``corl_on_run_end`` when a run stops early (an error, a signal, a
    non-finite stop), so observers can close and flush what they hold. ``error`` is re-raised."""


@hookspec
def corl_on_run_end(run: Any, summary: dict[str, Any]) -> None:
    """Called once after the last step with the run summary (before/after/best per agent)."""

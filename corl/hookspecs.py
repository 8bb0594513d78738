"""Every pluggy hook corl calls, and the marker that implements them. Built-in plugins implement
these exactly as third-party ones do, importing only the contract: ``from corl.hookspecs import
hookimpl`` (also ``corl.hookimpl``, the name a plugin package uses)."""

from __future__ import annotations

from typing import Any

import pluggy

from corl.context import RegistryView, RunView
from corl.types import Completion, StepMetrics, StepOutcome

hookspec = pluggy.HookspecMarker("corl")
hookimpl = pluggy.HookimplMarker("corl")  # beside the specs, as llm does: a plugin needs no host module


@hookspec
def corl_register_components(registry: RegistryView) -> None:
    """Add component factories to ``registry`` (a :class:`corl.context.RegistryView`; the host's
    :class:`corl.plugins.Registry`).

    Call ``registry.add(kind, name, factory, config_cls, help=...)`` once per component.
    ``kind`` is one of ``task``, ``agent``, ``sampler``, ``aggregator``, ``router``,
    ``optimizer``, ``observer``, ``shaping``; ``config_cls`` is a frozen attrs class whose fields are the
    component's recipe keys. Optional capabilities are class attributes of the factory
    (:data:`corl.traits.TRAITS`). ``registry.add_section(name, config_cls)`` declares a
    top-level recipe section the plugin owns (the hf backend's ``[zoo]``), read by its components
    as ``ctx.section(name)``.
    """


@hookspec
def corl_on_run_start(run: RunView) -> None:
    """Called once the run's components are built, before the first evaluation.

    ``run`` is a :class:`corl.context.RunView`: ``run.spec``, ``run.agents``, ``run.output_dir``,
    ``run.start_step`` (non-zero when resumed), ``run.request_stop(reason)``.
    """


@hookspec
def corl_on_step_end(run: RunView, step: int, metrics: StepMetrics, outcome: StepOutcome) -> None:
    """Called after every training step with a :class:`corl.types.StepMetrics` and what the step
    decided, a :class:`corl.types.StepOutcome`: every agent's votes, pseudo-labels, the labels it
    was rewarded against, its rewards, the prompts skipped, and a bounded sample of completions
    (``outcome.samples``). Like every hook argument, ``outcome`` may be left out of an implementation
    that does not read it."""


@hookspec
def corl_on_eval_end(run: RunView, step: int, results: dict[str, dict[str, float]], cohort: dict[str, Any],
                     samples: tuple[Completion, ...]) -> None:
    """Called after each held-out evaluation: ``results[agent][metric]`` (step 0 is the base).

    ``cohort`` holds pairwise matrices over the agents' greedy answers (``agents``, ``n``,
    ``agreement``, and with labels ``phi`` and ``same_wrong``; see :mod:`corl.runtime.cohort`).
    ``samples``: each agent's first ``run.log_completions`` evaluated completions (:class:`corl.types.
    Completion`, ``label`` its maj@k).
    """


@hookspec
def corl_on_run_failed(run: RunView, error: BaseException) -> None:
    """Called instead of ``corl_on_run_end`` when a run stops early (an error, a signal, a
    non-finite stop), so observers can close and flush what they hold. ``error`` is re-raised."""


@hookspec
def corl_on_run_end(run: RunView, summary: dict[str, Any]) -> None:
    """Called once after the last step with the run summary (before/after/best per agent)."""

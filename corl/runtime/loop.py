"""The run: build the components, evaluate, train step after step, checkpoint, evaluate, summarise.

:class:`Run` holds what a run is made of and drives the loop; one step lives in
:mod:`corl.runtime.step`, evaluation in :mod:`corl.runtime.evaluation`, the state carried between
steps in :mod:`corl.runtime.state`. Hooks see the run through :class:`corl.runtime.view.RunView`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl import logs
from corl import recipe as recipe_mod
from corl.errors import CorlError, Interrupted, TrainingError
from corl.plugins import Registry, build_registry, distributions, make_plugin_manager, register
from corl.protocols import Aggregator, RewardRouter, Task
from corl.runtime import checkpoint, distributed, process, snapshot
from corl.runtime.build import AgentSlot, Builder, check_given, observers
from corl.runtime.evaluation import evaluate_run
from corl.runtime.rng import AgentStreams
from corl.runtime.state import DataOrder, RunState
from corl.runtime.step import train_step
from corl.runtime.verify import BoundedVerifier
from corl.runtime.view import RunView
from corl.types import Context, StepMetrics


class Run:
    """A Co-RL run built from a validated :class:`~corl.recipe.RunSpec`.

    ``task``, ``aggregator`` and ``router`` may be passed as ready objects (dependency
    injection); ``plugins`` are extra plugin objects (observers, components) for this run only.
    ``layout`` says where agents run (:mod:`corl.runtime.distributed`; by default one process, or
    the ranks of a ``torchrun`` launch); ``agents`` lists only the agents this process holds.
    """

    def __init__(self, spec: recipe_mod.RunSpec, *, plugins: Sequence[Any] = (), pm=None,
                 task: Task | None = None, aggregator: Aggregator | None = None,
                 router: RewardRouter | None = None, log=None, resume: bool = False, force: bool = False,
                 layout: distributed.Local | None = None):
        self.spec, self.resume, self.force = spec, resume, force
        self._given = {"task": task, "aggregator": aggregator, "router": router}
        check_given(spec, self._given)  # before anything is built or loaded
        self.layout = layout or distributed.layout_for(spec)
        self.layout.hint = lambda: (f"last checkpoint: {checkpoint.latest(self.checkpoint_root) or 'none'}; "
                                    "continue with the same launch command and --resume")
        self.start_step, self._checkpointed = 0, -1
        self.pm = pm or make_plugin_manager(plugins)
        self.registry: Registry = build_registry(self.pm)
        self.output_dir = spec.output_dir
        # messages go to the `corl` logger (corl.logs), or all to ``log`` when one is given
        self.log = log or logs.logger.info
        self.warn = log or logs.logger.warning
        self.agents: list[AgentSlot] = []
        self.state = RunState(DataOrder.seeded(spec.run.seed))
        self.view = RunView(self)
        self.stop_reason: str | None = None  # set by request_stop
        self.stopped_at: int | None = None
        self._who: dict[tuple[str, str], str] = {}

    # -- what hooks and tools read ---------------------------------------------------------------

    @property
    def evals(self) -> dict[int, dict[str, dict[str, float]]]:
        return self.state.evals

    @property
    def cohorts(self) -> dict[int, dict[str, Any]]:
        return self.state.cohorts

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.state.history

    @property
    def warnings(self) -> list[str]:
        return self.state.health.warnings

    def request_stop(self, reason: str) -> None:
        """Stop after the current step (an observer's early stop): the run evaluates and ends as if
        that step were the last one; the summary records the step and ``reason``."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def who(self, kind: str, agent: str = "") -> str:
        """How messages name a component: its kind, type and plugin (or the object handed in)."""
        return self._who.get((kind, agent), kind)

    def stream(self, name: str):
        """The agent's own RNG stream (:mod:`corl.runtime.rng`): what it draws never depends on the layout."""
        return self.streams.use(name, self.layout.member(name))

    # -- building -------------------------------------------------------------------------------

    def setup(self) -> None:
        import torch

        spec, layout, build = self.spec, self.layout, Builder(self.registry)
        process.seed_everything(spec.run.seed)
        process.return_large_blocks()
        torch.set_num_threads(spec.run.threads or os.cpu_count() or 1)
        ctx = Context(spec=spec, seed=spec.run.seed, log=self.log)
        self._name("task", spec.task)
        self.task = self._given["task"] or build("task", spec.task, ctx)
        self.verifier = BoundedVerifier(self.task.verifier, spec.run.answer_timeout)
        self.train = list(self.task.split("train"))
        if len(self.train) < spec.run.prompts_per_step:
            raise CorlError(f"task: the train split has {len(self.train)} prompts, fewer than run.prompts_per_step "
                            f"({spec.run.prompts_per_step})")
        held_out = list(self.task.split("eval"))
        if spec.eval.size > len(held_out):
            raise CorlError(f"eval.size: {spec.eval.size} exceeds the task's eval split ({len(held_out)} prompts)")
        self.eval_prompts = held_out[: spec.eval.size]
        ctx = attrs.evolve(ctx, task=self.task)
        for a in spec.agents:
            if not layout.owns(a.name):  # held by other ranks
                continue
            if len(layout.members[a.name]) > spec.run.prompts_per_step:
                raise CorlError(f"agent {a.name!r} has {len(layout.members[a.name])} ranks but run.prompts_per_step "
                                f"is {spec.run.prompts_per_step}: every rank needs at least one prompt")
            actx = attrs.evolve(ctx, agent_name=a.name, group=layout.group(a.name))
            agent = build("agent", a.agent, actx)
            actx = attrs.evolve(actx, agent=agent)
            optimizer = None if a.frozen else build("optimizer", a.optimizer, actx)
            self.agents.append(AgentSlot(a.name, agent, build("sampler", a.sampler, actx), optimizer))
            for kind, component in (("sampler", a.sampler), ("optimizer", a.optimizer)):
                self._name(kind, component, a.name)
        self.streams = AgentStreams(spec.run.seed, [(s.name, layout.member(s.name)) for s in self.agents])
        self._name("aggregator", spec.voting.aggregator)
        self._name("router", spec.topology)
        self.aggregator = self._given["aggregator"] or build("aggregator", spec.voting.aggregator, ctx)
        self.router = self._given["router"] or build.router(spec, ctx)
        for name, observer in observers(spec, self.registry, ctx, layout.is_writer):
            register(self.pm, observer, f"observer:{name}")
        # Seed again once everything is built: whether a model was built or read from a cache
        # must not change the RNG stream the run samples from.
        process.seed_everything(spec.run.seed)

    def _name(self, kind: str, component: recipe_mod.ComponentSpec, agent: str = "") -> None:
        given = self._given.get(kind)
        if given is not None:
            text = f"{kind}= object {type(given).__name__}"
        elif component.factory is not None:
            text = f"{kind} {component.type!r} (import path)"
        else:
            text = f"{kind} {component.type!r} (plugin {self.registry.get(kind, component.type).plugin})"
        self._who[kind, agent] = f"agent {agent!r}'s {text}" if agent else text

    # -- one step, health, evaluation -----------------------------------------------------------

    def step(self, step: int) -> StepMetrics:
        return train_step(self, step)

    def watch_health(self, step: int, metrics: Mapping[str, Mapping[str, float]]) -> None:
        """Warn about collapse and collusion; count skipped (non-finite) updates and stop after
        ``run.max_nonfinite`` in a row for one agent."""
        health = self.state.health
        for message in health.check(step, metrics, self.spec.run.prompts_per_step):
            self.warn(message)
        for name, streak in health.count_nonfinite(metrics).items():
            self.warn(f"step {step}: agent {name!r}: non-finite loss, gradients or rewards; update skipped "
                     f"({streak} in a row)")
            if streak >= self.spec.run.max_nonfinite:
                last = checkpoint.latest(self.checkpoint_root)
                raise TrainingError(
                    f"agent {name!r}: non-finite loss, gradients or rewards in {streak} consecutive steps (up to step "
                    f"{step}); stopping. Last checkpoint: {last or 'none'}. Lower that agent's optimizer.lr or raise "
                    "run.max_nonfinite")

    def evaluate(self, step: int) -> dict[str, dict[str, float]]:
        return evaluate_run(self, step)

    # -- checkpoints (corl.runtime.snapshot) --------------------------------------------------------

    @property
    def checkpoint_root(self) -> Path:
        return self.output_dir / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        path = snapshot.save(self, step)
        self._checkpointed = step
        if self.layout.is_writer:
            self.log(f"step {step}: checkpoint {path}")
        return path

    def restore(self, path: Path) -> int:
        return snapshot.restore(self, path)

    # -- the whole run --------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Build everything, evaluate, train ``run.steps`` steps, evaluate, and return the summary.

        With ``resume``, continue from the newest complete checkpoint in the output dir.
        """
        started = time.perf_counter()
        layout = self.layout
        found = checkpoint.latest(self.checkpoint_root, clean=layout.is_writer) if self.resume else None
        resume_from = layout.share(found, "finding the checkpoint to resume")  # rank 0's view, on every rank
        if resume_from is not None:
            snapshot.check_compatible(self.spec, resume_from, self.force)  # before any model loads
        elif not self.resume and checkpoint.list_complete(self.checkpoint_root):
            newest = checkpoint.list_complete(self.checkpoint_root)[-1]
            raise CorlError(f"{self.output_dir} holds checkpoints of an earlier run (newest {newest.name}); continue it "
                            "with --resume, or set run.output_dir to a new folder")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if layout.is_writer:
            (self.output_dir / "recipe.json").write_text(json.dumps(recipe_mod.to_dict(self.spec), indent=2))
            # where the recipe came from: relative data paths resolve against it when resuming from the run dir
            (self.output_dir / "recipe.source").write_text(str(Path(self.spec.source).resolve()) if self.spec.source
                                                            and not self.spec.source.startswith("<") else "")
        self.setup()
        if resume_from is not None:
            self.start_step = self.restore(resume_from)
            self.log(f"resuming from {resume_from} (step {self.start_step})")
        elif self.resume:
            self.log(f"no checkpoint in {self.checkpoint_root}; starting from step 0")
        steps, every, ckpt_every = self.spec.run.steps, self.spec.eval.every, self.spec.run.checkpoint_every
        try:
            with process.StopOnSignal() as stop, self.verifier.armed():
                self.pm.hook.corl_on_run_start(run=self.view)
                if self.start_step == 0:
                    self.evaluate(0)
                for step in range(self.start_step + 1, steps + 1):
                    self.step(step)
                    process.fault("step", step, layout.rank)
                    if every and step % every == 0 and step != steps and self.stop_reason is None:
                        self.evaluate(step)
                    if ckpt_every and step % ckpt_every == 0:
                        self.checkpoint(step)
                    # a signal on any rank stops every rank after the same step
                    flags = layout.everyone((stop.signal, self.stop_reason), f"step {step}: checking for signals")
                    signum = next((s for s, _ in flags if s), None)
                    if signum is not None:
                        path = self.checkpoint(step) if self._checkpointed != step else self.checkpoint_root
                        raise Interrupted(signum, step, path)
                    requested = next((r for _, r in flags if r), None)
                    if requested is not None:  # every rank stops after the same step
                        self.stop_reason, self.stopped_at = requested, step
                        self.log(f"step {step}: stopping early: {requested}")
                        break
                last = self.stopped_at or steps
                if last and (last not in self.evals or self.start_step < last):
                    self.evaluate(last)
        except BaseException as exc:
            # Observers must close their files (and flush their logs) even when the run stops early.
            self.pm.hook.corl_on_run_failed(run=self.view, error=exc)
            layout.close(wait=False)  # another rank may be gone: do not wait for it
            raise
        summary = self.summary(time.perf_counter() - started)
        if layout.is_writer:
            (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        self.pm.hook.corl_on_run_end(run=self.view, summary=summary)
        layout.close()
        return summary

    def summary(self, seconds: float) -> dict[str, Any]:
        agents: dict[str, Any] = {}
        steps = sorted(self.evals)
        for name in self.spec.agent_names():  # every agent, wherever it ran
            if not steps:
                agents[name] = {}
                continue
            best = max(steps, key=lambda s: (self.evals[s][name].get("pass@1", 0.0), -s))
            agents[name] = {"before": self.evals[steps[0]][name], "after": self.evals[steps[-1]][name],
                            "best": self.evals[best][name], "best_step": best}
        return {"name": self.spec.run.name, "steps": self.spec.run.steps, "seconds": round(seconds, 2),
                "stopped_at": self.stopped_at, "stop_reason": self.stop_reason,
                "eval_prompts": len(self.eval_prompts), "eval_k": self.spec.eval.k, "agents": agents,
                "warnings": self.warnings}


def prepare(recipe: str | Path | Mapping[str, Any] | recipe_mod.RunSpec, overrides: Sequence[str] = (), *,
            plugins: Sequence[Any] = (), source: str | None = None) -> tuple[Any, recipe_mod.RunSpec]:
    """A per-run plugin manager and the recipe validated against its registry: the one place that
    wires plugins, registry and recipe (``corl run``, ``corl eval``, ``corl compare``, ``corl.run``)."""
    pm = make_plugin_manager(plugins)
    if isinstance(recipe, recipe_mod.RunSpec):
        return pm, recipe
    spec = recipe_mod.load_recipe(recipe, list(overrides), registry=build_registry(pm), source=source,
                                  distributions=distributions(pm))
    return pm, spec


def run(recipe: str | Path | Mapping[str, Any] | recipe_mod.RunSpec, overrides: Sequence[str] = (), *,
        plugins: Sequence[Any] = (), resume: bool = False, force: bool = False, **components: Any) -> dict[str, Any]:
    """Run Co-RL from a recipe (path, table or spec) and return the summary.

    ``components`` may hold ready ``task``, ``aggregator`` and ``router`` objects that replace
    the recipe's; ``plugins`` are plugin objects registered for this run only.
    """
    unknown = sorted(set(components) - {"task", "aggregator", "router"})
    if unknown:
        raise CorlError(f"corl.run: unknown component argument {unknown[0]}=; pass task=, aggregator= or router=")
    pm, spec = prepare(recipe, overrides, plugins=plugins)
    return Run(spec, pm=pm, resume=resume, force=force, **components).execute()


__all__ = ["Run", "prepare", "run"]

"""The run's life cycle: build the components, evaluate, train step after step, checkpoint,
evaluate, summarise.

:class:`Run` holds what a run is made of and drives the loop; what its components are and how
they are built and named lives in :mod:`corl.runtime.build`; one step lives in
:mod:`corl.runtime.step`, evaluation in :mod:`corl.runtime.evaluation`, the state carried between
steps in :mod:`corl.runtime.state`. Hooks see the run through :class:`corl.runtime.view.RunView`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl import logs
from corl import recipe as recipe_mod
from corl.context import Closers, Context, StopToken
from corl.errors import ConfigError, CorlError, Interrupted, PluginError, Stopping
from corl.plugins import PluginManager, Registry, call_hook, distributions, make_plugin_manager, register, registry_of
from corl.protocols import Agent, Aggregator, Optimizer, RewardRouter, RewardShaping, Sampler, Task
from corl.recipe.locate import resolve
from corl.recipe.schema import OBJECT_MAPPINGS, slot
from corl.runtime import checkpoint, distributed, folder, interrupts, lock, process, snapshot
from corl.runtime.aggregation import BoundAggregator
from corl.runtime.boundary import check_split, guard
from corl.runtime.build import AgentSlot, Parts, check_given
from corl.runtime.evaluation import adopt_evaluation, evaluate_run
from corl.runtime.metrics import run_summary
from corl.runtime.rng import AgentStreams
from corl.runtime.state import DataOrder, RunState
from corl.runtime.step import train_step
from corl.runtime.verify import GRACE, BoundedVerifier
from corl.runtime.view import RunView
from corl.types import Completion, Prompt, StepMetrics


class Run:
    """A Co-RL run built from a validated :class:`~corl.recipe.RunSpec`.

    Components may be passed as ready objects (dependency injection): ``task``, ``aggregator`` and
    ``router``, and by name ``agents``, ``samplers``, ``optimizers`` (by agent name), ``shaping``
    (by ``[[shaping]]`` entry name) and ``observers`` (by observer name). They replace the recipe's,
    and the run records them (their class and settings; observers aside) as what it ran with. ``pm`` is the run's plugin manager (:func:`prepare`'s, whose registry validated ``spec``),
    else one is made with ``plugins``, extra plugin objects (observers, components) for this run only.
    ``layout`` says where agents run (:mod:`corl.runtime.distributed`; by default one process, or
    the ranks of a ``torchrun`` launch); ``agents`` lists only the agents this process holds.
    """

    def __init__(self, spec: recipe_mod.RunSpec, *, plugins: Sequence[Any] = (), pm: PluginManager | None = None,
                 task: Task | None = None, aggregator: Aggregator | None = None,
                 router: RewardRouter | None = None, agents: Mapping[str, Agent] | None = None,
                 samplers: Mapping[str, Sampler] | None = None, optimizers: Mapping[str, Optimizer] | None = None,
                 shaping: Mapping[str, RewardShaping] | None = None, observers: Mapping[str, Any] | None = None,
                 log: Callable[[str], None] | None = None, resume: bool = False,
                 force: bool = False, layout: distributed.Layout | None = None, resume_from: str | None = None,
                 shared_step0: tuple[Any, ...] | None = None):
        # resume_from: exactly this checkpoint (``step-000040``), refused unless it verifies;
        # shared_step0: another run's step-0 evaluation to adopt (corl compare): results, cohort, samples, its name
        self.shared_step0 = shared_step0
        self.resume, self.force, self.resume_from = resume or resume_from is not None, force, resume_from
        self._given = given_objects(task=task, aggregator=aggregator, router=router, agents=agents, samplers=samplers,
                                    optimizers=optimizers, shaping=shaping, observers=observers)
        check_given(spec, self._given)  # before anything is built or loaded
        # what the run ran with: recipe.json and checkpoints record an object's class, not the recipe's table
        # (an observer only reports: a run resumes without it)
        self.spec = spec = attrs.evolve(spec, objects={key: recipe_mod.GivenObject.of(obj)
                                                       for key, obj in self._given.items()
                                                       if not key.startswith("observer:")})
        self.pm = pm or make_plugin_manager(plugins)
        self.registry: Registry = registry_of(self.pm)  # the one prepare() validated the recipe with
        self.layout = layout or distributed.layout_for(spec, devices={
            a.name: recipe_mod.model_facts(self.registry, a).device for a in spec.agents})
        self.layout.hint = lambda: (f"last checkpoint: {checkpoint.latest(self.checkpoint_root) or 'none'}; "
                                    "continue with the same launch command and --resume")
        self.start_step, self.completed, self.checkpointed_step = 0, 0, -1  # steps done / saved
        self.stop, self.phase = StopToken(), "while building the run"  # SIGINT / SIGTERM; where the run is
        self.closers = Closers()  # what components asked to release when the run ends (ctx.on_close)
        self.output_dir = spec.output_dir
        # messages go to the `corl` logger (corl.logs), or all to ``log`` when one is given
        self.log = log or logs.logger.info
        self.warn = log or logs.logger.warning
        self.agents: list[AgentSlot] = []
        self.observers: list[tuple[str, Any]] = []  # (name, observer object) attached to this process
        self.state = RunState(DataOrder.seeded(spec.run.seed))
        self.view = RunView(self)
        self.eval_samples: dict[int, tuple[Completion, ...]] = {}  # step -> logged completions (runtime.samples)
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
        """How messages name a component: its kind, type and plugin (or the object handed in). A
        run-wide component (the task's verifier) is named alike whichever agent's work it serves."""
        return self._who.get((kind, agent)) or self._who.get((kind, ""), kind)

    def stream(self, name: str):
        """The agent's own RNG stream (:mod:`corl.runtime.rng`): what it draws never depends on the layout."""
        return self.streams.use(name, self.layout.member(name))

    # -- building -------------------------------------------------------------------------------

    def setup(self) -> None:
        import torch

        spec, layout = self.spec, self.layout
        parts = Parts(spec, self.registry, self._given)
        self._who = parts.who  # filled in as each part is built
        process.seed_everything(spec.run.seed)
        process.return_large_blocks()
        torch.set_num_threads(spec.run.threads or os.cpu_count() or 1)
        ctx = Context(spec=spec, seed=spec.run.seed, log=self.log, stop=self.stop, closers=self.closers)
        self.task = parts.task(ctx)
        self.verifier = BoundedVerifier(self.task.verifier, spec.run.answer_timeout, who=self.who("verifier"),
                                        when=lambda: self.phase,
                                        abandon=lambda signum: interrupts.abandoned(self, signum, self.who("verifier"),
                                                                                    GRACE))
        held_out = self._split("eval")
        if spec.eval.size > len(held_out):
            raise CorlError(f"eval.size: {spec.eval.size} exceeds the task's eval split ({len(held_out)} prompts)")
        self.eval_prompts = held_out[: spec.eval.size]
        # test_time (TTRL): the evaluated prompts are the unlabeled training prompts; no label is used to train
        test_time = spec.run.protocol == "test_time"
        self.train = list(self.eval_prompts) if test_time else self._split("train")
        if len(self.train) < spec.run.prompts_per_step:
            where = "eval.size (the test-time training prompts) is" if test_time else "the train split has"
            raise CorlError(f"task: {where} {len(self.train)} prompts, fewer than run.prompts_per_step "
                            f"({spec.run.prompts_per_step})")
        ctx = attrs.evolve(ctx, task=self.task)
        for a in spec.agents:
            if not layout.owns(a.name):  # held by other ranks
                continue
            if len(layout.members[a.name]) > spec.run.prompts_per_step:
                raise CorlError(f"agent {a.name!r} has {len(layout.members[a.name])} ranks but run.prompts_per_step "
                                f"is {spec.run.prompts_per_step}: every rank needs at least one prompt")
            self.phase = f"while building agent {a.name!r}"
            self.agents.append(parts.agent(a, attrs.evolve(ctx, agent_name=a.name, group=layout.group(a.name))))
        self.streams = AgentStreams(spec.run.seed, [(s.name, layout.member(s.name)) for s in self.agents])
        self.aggregator = BoundAggregator(parts.aggregator(ctx), self.who("aggregator"))
        self.router = parts.router(ctx)
        self.shaping = parts.shaping(ctx)
        self.phase = "while building the run"
        self.observers = parts.observers(ctx, layout.is_writer)
        for name, observer in self.observers:
            register(self.pm, observer, f"observer:{name}", self.who("observer", name))
        # Seed again once everything is built: whether a model was built or read from a cache
        # must not change the RNG stream the run samples from.
        process.seed_everything(spec.run.seed)

    def _split(self, name: str) -> list[Prompt]:
        with guard(self.who("task"), f"in split({name!r}) {self.phase}"):
            return check_split(self.task.split(name), name, self.who("task"))

    # -- one step, evaluation -------------------------------------------------------------------

    def step(self, step: int) -> StepMetrics:
        return train_step(self, step)

    def evaluate(self, step: int, final: bool = False, notify: bool = True) -> dict[str, dict[str, float]]:
        """Score every agent on the held-out prompts. A one-process run abandons an evaluation on a
        signal (it is redone on resume); in a several-process run every rank finishes it first.
        ``notify=False`` (``corl eval``, outside any run's lifecycle) calls no hook."""
        self.phase = (f"during the final evaluation (after step {step})" if final else
                      f"during the evaluation after step {step}" if step else "during the evaluation before step 1")
        if step == 0 and notify and self.shared_step0 is not None:
            return adopt_evaluation(self, 0, *self.shared_step0)
        if (not step or not notify) and self.eval_prompts:  # (a minute on a real model: say what runs)
            self.log(f"evaluating {len(self.agents)} agent(s) on {len(self.eval_prompts)} held-out prompts (greedy, "
                     f"and k={self.spec.eval.k} samples each)")
        with self.stop.abandonable(self.layout.world_size == 1):
            return evaluate_run(self, step, notify=notify)

    # -- hooks ------------------------------------------------------------------------------------

    def notify(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call ``hook`` on every plugin with this run's view; a plugin that raises is named."""
        return call_hook(self.pm, hook, self._plugin_named, run=self.view, **kwargs)

    def _plugin_named(self, name: str) -> str:
        observer = name.removeprefix("observer:")
        return self._who.get(("observer", observer), f"plugin {name!r}")

    def close(self) -> None:
        """Release what the components registered with ``ctx.on_close`` (engine processes); the run
        calls it when it ends, a program that only built the run (``corl eval``) when done with it."""
        self.closers.close(self.warn)

    def _notify_failed(self, error: BaseException) -> None:
        try:
            self.notify("corl_on_run_failed", error=error)
        except CorlError as exc:  # the error that stopped the run is the one to report
            self.log(f"while stopping: {exc}")

    # -- checkpoints (corl.runtime.snapshot) --------------------------------------------------------

    @property
    def checkpoint_root(self) -> Path:
        return self.output_dir / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        path = snapshot.save(self, step)
        self.checkpointed_step = step
        if self.layout.is_writer:
            self.log(f"step {step}: checkpoint {path}")
        return path

    def restore(self, path: Path) -> int:
        return snapshot.restore(self, path)

    # -- the whole run --------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Build everything, evaluate, train ``run.steps`` steps, evaluate, and return the summary.

        With ``resume``, continue from the newest checkpoint in the output dir that verifies. SIGINT /
        SIGTERM anywhere stop the run with its completed steps saved (:class:`Interrupted`). The
        output dir is locked for the run's life (:mod:`corl.runtime.lock`): one run per folder.
        """
        started = time.perf_counter()
        with lock.holding(self.output_dir, lock.command(), enabled=self.layout.is_writer):
            resume_from = folder.open_for(self)  # refuses to write over an earlier run
            done = folder.finished(self.output_dir, resume_from, self.spec.run.steps)
            if done is not None:  # nothing to train, evaluate or append
                self.log(f"{self.output_dir}: the run finished at step {done['steps']} (summary.json); nothing to do; "
                         "raise run.steps to train it further")
                return done
            try:
                return self._execute(started, resume_from)
            finally:
                self.close()

    def _execute(self, started: float, resume_from: Path | None) -> dict[str, Any]:
        with process.StopOnSignal(self.stop):
            try:
                with self.stop.abandonable():  # building (a warm-start) may be abandoned: nothing is trained yet
                    self.setup()
            except Stopping as stop:
                raise interrupts.stopped(self, stop.signum) from None
            if resume_from is not None:
                self.start_step = self.completed = self.checkpointed_step = self.restore(resume_from)
                self.log(f"resuming from {resume_from} (step {self.start_step})")
            elif self.resume:
                self.log(f"no checkpoint in {self.checkpoint_root}; starting from step 0")
            try:
                with self.verifier.armed():
                    self.notify("corl_on_run_start")
                    self._train()
            except BaseException as exc:
                if isinstance(exc, Stopping):  # an evaluation abandoned: save what was trained
                    exc = interrupts.stopped(self, exc.signum)
                elif type(exc) is PluginError:  # a component failed: say where the run can go on from
                    exc = interrupts.failed(self, exc)
                # Observers must close their files (and flush their logs) even when the run stops early.
                self._notify_failed(exc)
                self.layout.close(wait=False)  # another rank may be gone: do not wait for it
                if isinstance(exc, Interrupted):
                    raise exc from None
                if isinstance(exc, PluginError):
                    raise exc from exc.__cause__
                raise
            summary = run_summary(self, time.perf_counter() - started)
            if self.layout.is_writer:
                (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            self.notify("corl_on_run_end", summary=summary)  # the final save: not abandoned once begun
            self.layout.close()
        if self.stop.signal is not None:  # it came during the final save, which finished first
            raise Interrupted(self.stop.signal, f"at the end of the run (step {self.completed}): the run had finished "
                                                f"and its outputs were saved first in {self.output_dir}")
        return summary

    def _train(self) -> None:
        """Evaluate, train step after step (checkpointing, evaluating), then the final evaluation."""
        steps, ckpt_every = self.spec.run.steps, self.spec.run.checkpoint_every
        if self._eval_due(self.start_step) and self.start_step not in self.evals:  # (an interrupted one, resumed)
            self.evaluate(self.start_step)
        for step in range(self.start_step + 1, steps + 1):
            self.phase = f"during step {step}"
            self.step(step)
            self.completed = step
            process.fault("step", step, self.layout.rank)
            requested = interrupts.exchange(self, step)  # a signal on any rank stops every rank here
            if self._eval_due(step) and requested is None:
                self.evaluate(step)
            # the last step's checkpoint waits for the final evaluation, so it holds it: a resume (with
            # more steps) never evaluates that step again, and its record in metrics.jsonl stays
            final_due = step == steps and requested is None and self.stop_reason is None
            if ckpt_every and step % ckpt_every == 0 and not final_due:
                self.checkpoint(step)
            if self._eval_due(step) or (ckpt_every and step % ckpt_every == 0):
                interrupts.exchange(self, step)  # one that came during them
            if requested is not None:  # every rank stops after the same step
                self.stop_reason, self.stopped_at = requested, step
                self.log(f"step {step}: stopping early: {requested}")
                break
        last = self.stopped_at or steps
        if last and (last not in self.evals or self.start_step < last):
            self.evaluate(last, final=True)
        if ckpt_every and last == steps and steps % ckpt_every == 0 and self.checkpointed_step < last:
            self.checkpoint(last)

    def _eval_due(self, step: int) -> bool:
        every = self.spec.eval.every
        return step == 0 or bool(every and step % every == 0 and step != self.spec.run.steps)


Recipe = str | os.PathLike[str] | Mapping[str, Any] | recipe_mod.RunSpec


def prepare(recipe: Recipe, overrides: Sequence[str] = (), *, plugins: Sequence[Any] = (), source: str | None = None,
            objects: Sequence[str] = (), pm: PluginManager | None = None,
            autoload: bool | None = None) -> tuple[PluginManager, recipe_mod.RunSpec]:
    """A per-run plugin manager and the recipe validated against its registry: the one place that
    wires plugins, registry and recipe (``corl run``, ``corl validate``, ``corl eval``, ``corl compare``,
    ``corl.run``). The registry is built here, once, and kept with the plugin manager
    (:func:`corl.plugins.registry_of`), so the :class:`Run` built with ``pm`` uses the same one.

    A string or path is what a user types at ``corl run``: a recipe file, a shipped recipe's name
    (``"three_agent_ring"``) or a run dir (its ``recipe.json``, written there); ``source`` names the
    file a table came from. ``objects``: the component kinds handed in as objects
    (:func:`corl.recipe.load_recipe`). ``pm``: a plugin manager the caller already made (and read
    the registry of) for this run, instead of a new one with ``plugins``. ``autoload``: load
    entry-point plugins (default: unless ``CORL_DISABLE_PLUGIN_AUTOLOAD`` is set).
    """
    pm = pm or make_plugin_manager(plugins, autoload=autoload)
    if isinstance(recipe, recipe_mod.RunSpec):
        return pm, recipe
    if isinstance(recipe, (str, os.PathLike)) and source is None:
        recipe, overrides, source = resolve(os.fspath(recipe), list(overrides))
    spec = recipe_mod.load_recipe(recipe, list(overrides), registry=registry_of(pm), source=source,
                                  distributions=distributions(pm), objects=objects)
    return pm, spec


def run(recipe: Recipe, overrides: Sequence[str] = (), *, task: Task | None = None,
        aggregator: Aggregator | None = None, router: RewardRouter | None = None,
        agents: Mapping[str, Agent] | None = None, samplers: Mapping[str, Sampler] | None = None,
        optimizers: Mapping[str, Optimizer] | None = None, shaping: Mapping[str, RewardShaping] | None = None,
        observers: Mapping[str, Any] | None = None, plugins: Sequence[Any] = (), resume: bool = False,
        force: bool = False, autoload: bool | None = None, rewards: Sequence[Any] = ()) -> dict[str, Any]:
    """The implementation of :func:`corl.run`, documented there."""
    given = {"task": task, "aggregator": aggregator, "router": router, "agents": agents, "samplers": samplers,
             "optimizers": optimizers, "shaping": shaping, "observers": observers}
    source = None
    if rewards:  # reward function objects: registered for this run, named by [[shaping]] tables added to the recipe
        recipe, overrides, source, plugins = _with_rewards(recipe, list(overrides), rewards, plugins)
    pm, spec = prepare(recipe, overrides, plugins=plugins, objects=list(given_objects(**given)), autoload=autoload,
                       source=source)
    return Run(spec, pm=pm, resume=resume, force=force, **given).execute()


def given_objects(**arguments: Any) -> dict[str, Any]:
    """``corl.run``'s component objects by slot (:func:`corl.recipe.schema.slot`): ``router=obj`` is
    ``"router"``, ``samplers={"a": obj}`` is ``"sampler:a"``. A mapping argument that is not a
    mapping of names is refused in one line."""
    out = {}
    for arg, value in arguments.items():
        if value is None:
            continue
        kind = next((k for k, a in OBJECT_MAPPINGS.items() if a == arg), None)
        if kind is None:  # a run-wide kind: one object
            out[arg] = value
            continue
        if not isinstance(value, Mapping) or not all(isinstance(name, str) and name for name in value):
            raise ConfigError(f"{arg}=: expected a mapping of names to objects ({arg}={{'NAME': obj}}), got "
                              f"{type(value).__name__}")
        out.update({slot(kind, name): obj for name, obj in value.items()})
    return out


def _with_rewards(recipe: Recipe, overrides: list[str], functions: Sequence[Any], plugins: Sequence[Any]):
    """The recipe's table with a ``[[shaping]]`` entry per reward function (one it names already, as a
    resumed run's ``recipe.json`` does, is kept as it is) and the plugin that registers them."""
    from corl import rewards as rewards_mod

    if isinstance(recipe, recipe_mod.RunSpec):
        raise CorlError("rewards=: give the recipe as a file, a name, a run dir or a table, not a RunSpec")
    plugin, tables = rewards_mod.given(functions)
    source = None
    if isinstance(recipe, (str, os.PathLike)):
        recipe, overrides, source = resolve(os.fspath(recipe), overrides)
        if isinstance(recipe, str):
            recipe, source = recipe_mod.read_toml(recipe), recipe
    data = dict(recipe)
    terms = list(data.get("shaping", []))
    named = {t.get("type") for t in terms if isinstance(t, Mapping)}
    data["shaping"] = terms + [t for t in tables if t["type"] not in named]
    return data, overrides, source, [*plugins, plugin]


__all__ = ["Run", "prepare", "run"]

"""The Co-RL loop. One step: sample, extract, vote, route, optimize, sync, observe.

The run talks to components only through :mod:`corl.protocols`; which components it gets is
decided by the recipe and the registry (or by objects handed in by an embedding program).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl import checkpoint
from corl import recipe as recipe_mod
from corl.cohort import pairwise
from corl.errors import CorlError, Interrupted, TrainingError
from corl.evaluation import evaluate, votes_of
from corl.plugins import Registry, build_registry, make_plugin_manager
from corl.protocols import Aggregator, RewardRouter, Task
from corl.types import Context, Prompt, StepMetrics
from corl.verify import BoundedVerifier


@attrs.define
class AgentSlot:
    """An agent with the sampler and optimizer that serve it."""

    name: str
    agent: Any
    sampler: Any
    optimizer: Any  # None for a frozen agent


class Run:
    """A Co-RL run built from a validated :class:`~corl.recipe.RunSpec`.

    ``task``, ``aggregator`` and ``router`` may be passed as ready objects (dependency
    injection); ``plugins`` are extra plugin objects (observers, components) for this run only.
    """

    def __init__(self, spec: recipe_mod.RunSpec, *, plugins: Sequence[Any] = (), pm=None,
                 task: Task | None = None, aggregator: Aggregator | None = None,
                 router: RewardRouter | None = None, log=None, resume: bool = False, force: bool = False):
        self.spec, self.resume, self.force = spec, resume, force
        self.start_step, self._checkpointed = 0, -1
        self._nonfinite: dict[str, int] = {}
        self._streaks: dict[tuple[str, str], int] = {}
        self._warned: set[tuple[str, str]] = set()
        self.warnings: list[str] = []
        self.cohorts: dict[int, dict[str, Any]] = {}
        self.pm = pm or make_plugin_manager(plugins)
        self.registry: Registry = build_registry(self.pm)
        self.output_dir = spec.output_dir
        self._given = {"task": task, "aggregator": aggregator, "router": router}
        self.log = log or print
        self.agents: list[AgentSlot] = []
        self.history: list[dict[str, Any]] = []
        self.evals: dict[int, dict[str, dict[str, float]]] = {}

    # -- building -------------------------------------------------------------------------------

    def _build(self, kind: str, spec: recipe_mod.ComponentSpec, ctx: Context) -> Any:
        component = self.registry.get(kind, spec.type) if spec.factory is None else None
        factory = spec.factory or component.factory
        try:
            return factory(spec.config, ctx)
        except CorlError:
            raise
        except Exception as exc:
            plugin = component.plugin if component else "import path"
            raise RuntimeError(f"{kind} {spec.type!r} (plugin {plugin}) failed to build: {exc}") from exc

    def setup(self) -> None:
        import torch

        spec = self.spec
        _seed(spec.run.seed)
        torch.set_num_threads(spec.run.threads or os.cpu_count() or 1)
        ctx = Context(spec=spec, seed=spec.run.seed, log=self.log)
        self.task = self._given["task"] or self._build("task", spec.task, ctx)
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
            actx = attrs.evolve(ctx, agent_name=a.name)
            agent = self._build("agent", a.agent, actx)
            actx = attrs.evolve(actx, agent=agent)
            optimizer = None if a.frozen else self._build("optimizer", a.optimizer, actx)
            self.agents.append(AgentSlot(a.name, agent, self._build("sampler", a.sampler, actx), optimizer))
        self.aggregator = self._given["aggregator"] or self._build("aggregator", spec.voting.aggregator, ctx)
        self.router = self._given["router"] or self._build("router", spec.topology, ctx)
        for name in spec.run.observers:
            self.pm.register(self.registry.get("observer", name).factory(None, ctx), name=f"observer:{name}")
        self._order = random.Random(spec.run.seed)
        # Seed again once everything is built: whether a model was built or read from a cache
        # must not change the RNG stream the run samples from.
        _seed(spec.run.seed)
        self._cursor, self._epoch_order = 0, []

    # -- the loop -------------------------------------------------------------------------------

    def next_prompts(self) -> list[Prompt]:
        out = []
        while len(out) < self.spec.run.prompts_per_step:
            if self._cursor >= len(self._epoch_order):
                self._epoch_order = list(range(len(self.train)))
                self._order.shuffle(self._epoch_order)
                self._cursor = 0
            out.append(self.train[self._epoch_order[self._cursor]])
            self._cursor += 1
        return out

    def step(self, step: int) -> StepMetrics:
        start = time.perf_counter()
        spec, verifier = self.spec, self.verifier
        prompts = self.next_prompts()
        rollouts, votes, labels, metrics = {}, {}, {}, {}
        for slot in self.agents:
            t0 = time.perf_counter()
            rollout = slot.sampler.sample(slot.agent, prompts, spec.voting.n_votes)
            rollouts[slot.name] = rollout
            timeouts = verifier.timeouts
            votes[slot.name] = votes_of(rollout, verifier)
            # extractions past run.answer_timeout, counted as no answer
            metrics[slot.name] = {"time/sample": time.perf_counter() - t0,
                                  "verify_timeouts": float(verifier.timeouts - timeouts)}
        t0 = time.perf_counter()
        for slot in self.agents:
            labels[slot.name] = self.aggregator.aggregate(votes[slot.name], verifier)
        truth = [p.label for p in prompts]
        has_truth = all(t is not None for t in truth)
        rewards = self.router.route(votes, labels, verifier, self.aggregator,
                                    truth if self.router.supervised else None)
        route_time = (time.perf_counter() - t0) / len(self.agents)
        for slot in self.agents:
            m = metrics[slot.name]
            m["time/vote_route"] = route_time
            train_rewards = [r[: spec.voting.n_train] for r in rewards[slot.name]]
            flat = [x for r in train_rewards for x in r]
            t0 = time.perf_counter()
            if slot.optimizer is not None:  # a frozen agent (a judge) votes but is not trained
                m.update(slot.optimizer.step(rollouts[slot.name], train_rewards))
                slot.sampler.sync(slot.agent)
            m["time/update"] = time.perf_counter() - t0
            m["reward_mean"] = statistics.fmean(flat)
            m["reward_std"] = statistics.pstdev(flat)
            m["label_share"] = statistics.fmean(lab.share for lab in labels[slot.name])
            m["answered"] = statistics.fmean(v.answer is not None for vs in votes[slot.name] for v in vs)
            m["completion_length"] = statistics.fmean(x for ls in rollouts[slot.name].lengths for x in ls)
            if has_truth:  # hidden labels: monitoring only, never handed to a label-free router
                m["label_accuracy"] = statistics.fmean(
                    lab.answer is not None and verifier.equivalent(lab.answer, t)
                    for lab, t in zip(labels[slot.name], truth))
                correct = [[float(v.answer is not None and verifier.equivalent(v.answer, t)) for v in vs[: spec.voting.n_train]]
                           for vs, t in zip(votes[slot.name], truth)]
                m["reward_accuracy"] = statistics.fmean(
                    float(r == c) for rs, cs in zip(train_rewards, correct) for r, c in zip(rs, cs))
                m["train_accuracy"] = statistics.fmean(x for cs in correct for x in cs)
        for slot in self.agents:
            metrics[slot.name]["label_mode_share"] = _mode_share([lab.answer for lab in labels[slot.name]])
        self._check_health(step, metrics)
        self._account_nonfinite(step, metrics)
        result = StepMetrics(step=step, agents=metrics, seconds=time.perf_counter() - start)
        self.history.append({"step": step, "seconds": result.seconds, "agents": metrics})
        self.pm.hook.corl_on_step_end(run=self, step=step, metrics=result)
        return result

    #: consecutive steps a symptom must last before it is reported
    HEALTH_PATIENCE = 5

    def _check_health(self, step: int, metrics: dict[str, dict[str, float]]) -> None:
        """Warn (once per agent and symptom) about collapse and collusion, the failure modes of
        label-free RL: no reward variance, no entropy, or one answer for unrelated prompts."""
        for name, m in metrics.items():
            symptoms = {
                "reward_std": m["reward_std"] < 1e-3,
                "entropy": m.get("active_fraction", 0) > 0 and m.get("entropy", 1.0) < 0.02,
                "collusion": m["label_mode_share"] > 0.5 and self.spec.run.prompts_per_step >= 8,
            }
            for symptom, present in symptoms.items():
                key = (name, symptom)
                self._streaks[key] = self._streaks.get(key, 0) + 1 if present else 0
                if self._streaks[key] == self.HEALTH_PATIENCE and key not in self._warned:
                    self._warned.add(key)
                    text = {"reward_std": "reward std ~0 (every sample of every prompt rewarded alike): no "
                                          "learning signal; collapse?",
                            "entropy": "policy entropy ~0: sampling has collapsed onto single answers",
                            "collusion": f"{m['label_mode_share']:.0%} of prompts share one pseudo-label: agents "
                                         "converging on a constant answer (collusion?); lower the learning rate"}[symptom]
                    message = f"warning: step {step}: agent {name!r}: {text} ({self.HEALTH_PATIENCE} steps in a row)"
                    self.warnings.append(message)
                    self.log(message)

    def _account_nonfinite(self, step: int, metrics: dict[str, dict[str, float]]) -> None:
        """A skipped (non-finite) update is counted; too many in a row for one agent stop the run."""
        for name, m in metrics.items():
            if not m.get("nonfinite"):
                self._nonfinite[name] = 0
                continue
            self._nonfinite[name] = self._nonfinite.get(name, 0) + 1
            self.log(f"step {step}: agent {name!r}: non-finite loss or gradients; update skipped "
                     f"({self._nonfinite[name]} in a row)")
            if self._nonfinite[name] >= self.spec.run.max_nonfinite:
                last = checkpoint.latest(self.checkpoint_root)
                raise TrainingError(
                    f"agent {name!r}: non-finite loss or gradients in {self._nonfinite[name]} consecutive steps "
                    f"(up to step {step}); stopping. Last checkpoint: {last or 'none'}. Lower that agent's "
                    "optimizer.lr or raise run.max_nonfinite")

    def evaluate(self, step: int) -> dict[str, dict[str, float]]:
        if not self.eval_prompts:
            return {}
        results, answers = {}, {}
        for slot in self.agents:
            results[slot.name], answers[slot.name] = evaluate(
                slot.agent, slot.sampler, self.verifier, self.eval_prompts, self.aggregator, self.spec.eval.k,
                self.spec.eval.temperature)
        self.evals[step] = results
        cohort = pairwise(answers, self.verifier, [p.label for p in self.eval_prompts])
        self.cohorts[step] = cohort
        self.pm.hook.corl_on_eval_end(run=self, step=step, results=results, cohort=cohort)
        return results

    # -- checkpoints ----------------------------------------------------------------------------

    @property
    def checkpoint_root(self) -> Path:
        return self.output_dir / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        state = {"step": step, "cursor": self._cursor, "epoch_order": self._epoch_order,
                 "order_rng": checkpoint.jsonable(self._order.getstate()), "history": self.history,
                 "evals": {str(k): v for k, v in self.evals.items()}, "nonfinite": self._nonfinite,
                 "health": {"streaks": [[*k, v] for k, v in self._streaks.items()], "warned": sorted(self._warned),
                            "warnings": self.warnings},
                 "recipe": recipe_mod.to_dict(self.spec)}

        def save_parts(folder: Path) -> None:
            for slot in self.agents:
                if slot.optimizer is not None:  # a frozen agent is rebuilt from the recipe
                    slot.agent.save_state(str(folder / "agents" / slot.name))
                    slot.optimizer.save_state(str(folder / "optimizers" / slot.name))

        path = checkpoint.write(self.checkpoint_root, step, state, save_parts, self.spec.run.keep_checkpoints,
                                fault=lambda where: _fault(where, step))
        self._checkpointed = step
        return path

    def restore(self, path: Path) -> int:
        state = checkpoint.read_state(path)
        for slot in self.agents:
            if slot.optimizer is not None:
                slot.agent.load_state(str(path / "agents" / slot.name))
                slot.optimizer.load_state(str(path / "optimizers" / slot.name))
        self._cursor, self._epoch_order = state["cursor"], state["epoch_order"]
        self._order.setstate(checkpoint.tuples(state["order_rng"]))
        self.history = state["history"]
        self.evals = {int(k): v for k, v in state["evals"].items()}
        self._nonfinite = state["nonfinite"]
        self._streaks = {(a, b): v for a, b, v in state["health"]["streaks"]}
        self._warned = {tuple(k) for k in state["health"]["warned"]}
        self.warnings = state["health"]["warnings"]
        checkpoint.restore_rng(path)
        return state["step"]

    def _check_compatible(self, path: Path) -> None:
        saved = checkpoint.read_state(path)["recipe"]
        changes = recipe_mod.differences(saved, recipe_mod.to_dict(self.spec))
        if changes and not self.force:
            shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
            raise CorlError(f"{path}: the recipe changed since this checkpoint ({shown}); "
                            "resume with the same recipe, or pass --force")

    # -- the whole run --------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Build everything, evaluate, train ``run.steps`` steps, evaluate, and return the summary.

        With ``resume``, continue from the newest complete checkpoint in the output dir.
        """
        started = time.perf_counter()
        resume_from = checkpoint.latest(self.checkpoint_root) if self.resume else None
        if resume_from is not None:
            self._check_compatible(resume_from)  # before any model loads
        elif not self.resume and checkpoint.list_complete(self.checkpoint_root):
            newest = checkpoint.list_complete(self.checkpoint_root)[-1]
            raise CorlError(f"{self.output_dir} holds checkpoints of an earlier run (newest {newest.name}); continue it "
                            "with --resume, or set run.output_dir to a new folder")
        self.output_dir.mkdir(parents=True, exist_ok=True)
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
            with _StopOnSignal() as stop, self.verifier.armed():
                self.pm.hook.corl_on_run_start(run=self)
                if self.start_step == 0:
                    self.evaluate(0)
                for step in range(self.start_step + 1, steps + 1):
                    self.step(step)
                    _fault("step", step)
                    if every and step % every == 0 and step != steps:
                        self.evaluate(step)
                    if ckpt_every and step % ckpt_every == 0:
                        self.checkpoint(step)
                    if stop.signal is not None:
                        path = self.checkpoint(step) if self._checkpointed != step else self.checkpoint_root
                        raise Interrupted(stop.signal, step, path)
                if steps and (steps not in self.evals or self.start_step < steps):
                    self.evaluate(steps)
        except BaseException as exc:
            # Observers must close their files (and flush their logs) even when the run stops early.
            self.pm.hook.corl_on_run_failed(run=self, error=exc)
            raise
        summary = self.summary(time.perf_counter() - started)
        (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        self.pm.hook.corl_on_run_end(run=self, summary=summary)
        return summary

    def summary(self, seconds: float) -> dict[str, Any]:
        agents: dict[str, Any] = {}
        steps = sorted(self.evals)
        for slot in self.agents:
            if not steps:
                agents[slot.name] = {}
                continue
            best = max(steps, key=lambda s: (self.evals[s][slot.name].get("pass@1", 0.0), -s))
            agents[slot.name] = {"before": self.evals[steps[0]][slot.name], "after": self.evals[steps[-1]][slot.name],
                                 "best": self.evals[best][slot.name], "best_step": best}
        return {"name": self.spec.run.name, "steps": self.spec.run.steps, "seconds": round(seconds, 2),
                "eval_prompts": len(self.eval_prompts), "eval_k": self.spec.eval.k, "agents": agents,
                "warnings": self.warnings}


def run(recipe: str | Path | Mapping[str, Any] | recipe_mod.RunSpec, overrides: Sequence[str] = (), *,
        plugins: Sequence[Any] = (), resume: bool = False, force: bool = False, **components: Any) -> dict[str, Any]:
    """Run Co-RL from a recipe (path, table or spec) and return the summary.

    ``components`` may hold ready ``task``, ``aggregator`` and ``router`` objects that replace
    the recipe's; ``plugins`` are plugin objects registered for this run only.
    """
    pm = make_plugin_manager(plugins)
    if isinstance(recipe, recipe_mod.RunSpec):
        spec = recipe
    else:
        spec = recipe_mod.load_recipe(recipe, list(overrides), registry=build_registry(pm))
    return Run(spec, pm=pm, resume=resume, force=force, **components).execute()


def _mode_share(answers: Sequence[Any]) -> float:
    """Share of prompts whose pseudo-label is the batch's most common one (exact match)."""
    counts: dict[Any, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    return max(counts.values(), default=0) / max(len(answers), 1)


def _seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _StopOnSignal:
    """Turn SIGINT / SIGTERM into a flag the loop checks after each step (main thread only)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:  # a second signal: stop now
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _fault(where: str, step: int) -> None:
    """Fault injection for the resume tests: ``CORL_FAULT=WHERE:STEP`` SIGKILLs this process there."""
    wanted = os.environ.get("CORL_FAULT")
    if wanted and wanted == f"{where}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)

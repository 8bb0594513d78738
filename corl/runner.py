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

from corl import checkpoint, distributed
from corl import recipe as recipe_mod
from corl.cohort import pairwise
from corl.errors import CorlError, Interrupted, TrainingError
from corl.evaluation import evaluate, votes_of
from corl.plugins import Registry, build_registry, make_plugin_manager
from corl.protocols import Aggregator, RewardRouter, Task
from corl.rng import AgentStreams, fixed, key, stream_seed
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
    ``layout`` says where agents run (:mod:`corl.distributed`; by default one process, or the
    ranks of a ``torchrun`` launch); ``agents`` lists only the agents this process holds.
    """

    def __init__(self, spec: recipe_mod.RunSpec, *, plugins: Sequence[Any] = (), pm=None,
                 task: Task | None = None, aggregator: Aggregator | None = None,
                 router: RewardRouter | None = None, log=None, resume: bool = False, force: bool = False,
                 layout: distributed.Local | None = None):
        self.spec, self.resume, self.force = spec, resume, force
        self.layout = layout or distributed.layout_for(spec)
        self.layout.hint = lambda: (f"last checkpoint: {checkpoint.latest(self.checkpoint_root) or 'none'}; "
                                    "continue with the same launch command and --resume")
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
        self.stop_reason: str | None = None  # set by request_stop
        self.stopped_at: int | None = None

    def request_stop(self, reason: str) -> None:
        """Stop after the current step (an observer's early stop): the run evaluates and ends as if
        that step were the last one; the summary records the step and ``reason``."""
        if self.stop_reason is None:
            self.stop_reason = reason

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
        _return_large_blocks()
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
        layout = self.layout
        for a in spec.agents:
            if not layout.owns(a.name):  # held by other ranks
                continue
            if len(layout.members[a.name]) > spec.run.prompts_per_step:
                raise CorlError(f"agent {a.name!r} has {len(layout.members[a.name])} ranks but run.prompts_per_step "
                                f"is {spec.run.prompts_per_step}: every rank needs at least one prompt")
            actx = attrs.evolve(ctx, agent_name=a.name, group=layout.group(a.name))
            agent = self._build("agent", a.agent, actx)
            actx = attrs.evolve(actx, agent=agent)
            optimizer = None if a.frozen else self._build("optimizer", a.optimizer, actx)
            self.agents.append(AgentSlot(a.name, agent, self._build("sampler", a.sampler, actx), optimizer))
        self.streams = AgentStreams(spec.run.seed, [(s.name, layout.member(s.name)) for s in self.agents])
        self.aggregator = self._given["aggregator"] or self._build("aggregator", spec.voting.aggregator, ctx)
        self.router = self._given["router"] or self._build("router", spec.topology, ctx)
        configured = {c.type: c.config for c in spec.observers}  # [observers.NAME] tables
        for name in dict.fromkeys([*spec.run.observers, *configured]):
            factory = self.registry.get("observer", name).factory
            # Observers report for the whole run from rank 0; an every_rank one (final export) runs on each.
            if layout.is_writer or getattr(factory, "every_rank", False):
                self.pm.register(factory(configured.get(name), ctx), name=f"observer:{name}")
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

    def _stream(self, name: str):
        """The agent's own RNG stream (:mod:`corl.rng`): what it draws never depends on the layout."""
        return self.streams.use(name, self.layout.member(name))

    def step(self, step: int) -> StepMetrics:
        start = time.perf_counter()
        spec, verifier, layout = self.spec, self.verifier, self.layout
        prompts = self.next_prompts()
        rollouts, local_votes, local = {}, {}, {}
        for slot in self.agents:  # the agents this process holds, each on its shard of the prompts
            t0 = time.perf_counter()
            with self._stream(slot.name):
                rollout = slot.sampler.sample(slot.agent, layout.shard(slot.name, prompts), spec.voting.n_votes)
            rollouts[slot.name] = rollout
            timeouts = verifier.timeouts
            local_votes[slot.name] = votes_of(rollout, verifier)
            # extractions past run.answer_timeout, counted as no answer
            local[slot.name] = {"time/sample": time.perf_counter() - t0,
                                "verify_timeouts": float(verifier.timeouts - timeouts),
                                "completion_length": statistics.fmean(x for ls in rollout.lengths for x in ls)}
        # Every rank gets every agent's votes, so every rank votes and routes identically.
        votes = {name: distributed.merge_shards(shards)
                 for name, shards in layout.gather(local_votes, f"step {step}: exchanging votes").items()}
        t0 = time.perf_counter()
        labels = {name: self.aggregator.aggregate(agent_votes, verifier) for name, agent_votes in votes.items()}
        truth = [p.label for p in prompts]
        has_truth = all(t is not None for t in truth)
        rewards = self.router.route(votes, labels, verifier, self.aggregator,
                                    truth if self.router.supervised else None)
        route_time = (time.perf_counter() - t0) / len(votes)
        for slot in self.agents:
            m = local[slot.name]
            train_rewards = [r[: spec.voting.n_train] for r in layout.shard(slot.name, rewards[slot.name])]
            t0 = time.perf_counter()
            if slot.optimizer is not None:  # a frozen agent (a judge) votes but is not trained
                with self._stream(slot.name):
                    m.update(slot.optimizer.step(rollouts[slot.name], train_rewards))
                    slot.sampler.sync(slot.agent)
            m["time/update"] = time.perf_counter() - t0
        metrics = {name: _merge_metrics(per_rank)
                   for name, per_rank in layout.gather(local, f"step {step}: exchanging metrics").items()}
        for name, m in metrics.items():  # from the exchanged votes: the same on every rank
            train_rewards = [r[: spec.voting.n_train] for r in rewards[name]]
            flat = [x for r in train_rewards for x in r]
            m["time/vote_route"] = route_time
            m["reward_mean"] = statistics.fmean(flat)
            m["reward_std"] = statistics.pstdev(flat)
            m["label_share"] = statistics.fmean(lab.share for lab in labels[name])
            m["answered"] = statistics.fmean(v.answer is not None for vs in votes[name] for v in vs)
            # label-free answer diversity: distinct answers per prompt (falls when sampling collapses)
            m["distinct_answers"] = statistics.fmean(len({v.answer for v in vs if v.answer is not None})
                                                     for vs in votes[name])
            if has_truth:  # hidden labels: monitoring only, never handed to a label-free router
                m["label_accuracy"] = statistics.fmean(
                    lab.answer is not None and verifier.equivalent(lab.answer, t)
                    for lab, t in zip(labels[name], truth))
                correct = [[float(v.answer is not None and verifier.equivalent(v.answer, t)) for v in vs[: spec.voting.n_train]]
                           for vs, t in zip(votes[name], truth)]
                m["reward_accuracy"] = statistics.fmean(
                    float(r == c) for rs, cs in zip(train_rewards, correct) for r, c in zip(rs, cs))
                m["train_accuracy"] = statistics.fmean(x for cs in correct for x in cs)
            m["label_mode_share"] = _mode_share([lab.answer for lab in labels[name]])
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
        local = {}
        for slot in self.agents:  # an agent's first rank evaluates it
            if self.layout.leads(slot.name):
                # common random numbers: the same draw at every evaluation (corl.rng.fixed)
                with fixed(stream_seed(self.spec.run.seed, f"{slot.name}/eval")):
                    local[slot.name] = evaluate(slot.agent, slot.sampler, self.verifier, self.eval_prompts,
                                                self.aggregator, self.spec.eval.k, self.spec.eval.temperature)
            else:
                local[slot.name] = None
        gathered = self.layout.gather(local, f"step {step}: exchanging evaluations")
        results = {name: per_rank[0][0] for name, per_rank in gathered.items()}
        answers = {name: per_rank[0][1] for name, per_rank in gathered.items()}
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
                # a frozen agent is rebuilt from the recipe; an agent's first rank writes it for its group
                if slot.optimizer is not None and self.layout.leads(slot.name):
                    slot.agent.save_state(str(folder / "agents" / slot.name))
                    slot.optimizer.save_state(str(folder / "optimizers" / slot.name))

        mine = {s.name: self.streams.state(s.name, self.layout.member(s.name)) for s in self.agents}
        streams = {key(name, k): stream for name, per_rank in self.layout.gather(mine, f"step {step}: saving RNG "
                   "streams").items() for k, stream in enumerate(per_rank)}
        path = checkpoint.write(self.checkpoint_root, step, state, {**checkpoint.rng_state(), "agents": streams},
                                save_parts, self.spec.run.keep_checkpoints, self.layout,
                                fault=lambda where: _fault(where, step, self.layout.rank))
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
        try:
            self.streams.load(checkpoint.restore_rng(path))
        except KeyError as exc:
            raise CorlError(f"{path}: no RNG stream saved for {exc.args[0]}: the checkpoint was written with another "
                            "number of ranks per agent (resume with the same agents[i].ranks) or by an older corl") from None
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
        layout = self.layout
        found = checkpoint.latest(self.checkpoint_root, clean=layout.is_writer) if self.resume else None
        resume_from = layout.share(found, "finding the checkpoint to resume")  # rank 0's view, on every rank
        if resume_from is not None:
            self._check_compatible(resume_from)  # before any model loads
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
            with _StopOnSignal() as stop, self.verifier.armed():
                self.pm.hook.corl_on_run_start(run=self)
                if self.start_step == 0:
                    self.evaluate(0)
                for step in range(self.start_step + 1, steps + 1):
                    self.step(step)
                    _fault("step", step, layout.rank)
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
            self.pm.hook.corl_on_run_failed(run=self, error=exc)
            layout.close(wait=False)  # another rank may be gone: do not wait for it
            raise
        summary = self.summary(time.perf_counter() - started)
        if layout.is_writer:
            (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        self.pm.hook.corl_on_run_end(run=self, summary=summary)
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


#: per-rank metrics that add up over an agent's ranks (the rest are averaged)
SUMMED_METRICS = ("verify_timeouts",)


def _merge_metrics(per_rank: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One agent's metrics from the ranks of its group (one rank: unchanged)."""
    if len(per_rank) == 1:
        return dict(per_rank[0])
    return {k: (sum if k in SUMMED_METRICS else statistics.fmean)([m[k] for m in per_rank]) for k in per_rank[0]}


def _mode_share(answers: Sequence[Any]) -> float:
    """Share of prompts whose pseudo-label is the batch's most common one (exact match)."""
    counts: dict[Any, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    return max(counts.values(), default=0) / max(len(answers), 1)


def _return_large_blocks() -> None:
    """Have glibc serve blocks of 1 MiB and more with mmap, so they go back to the system on free.

    glibc raises its mmap threshold as large blocks are freed, after which big transient tensors
    (a real model's [rows, vocab] logits, chunk log-softmaxes) come from the heap and stay in the
    process: the real recipe peaked at 8.6 GB RSS with the default and 6.8 GB with this, measured
    side by side (docs/real-models.md). A no-op where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD; setting it also fixes it (no dynamic growth)
    except (OSError, AttributeError):
        pass


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


def _fault(where: str, step: int, rank: int = 0) -> None:
    """Fault injection for the resume tests: ``CORL_FAULT=WHERE:STEP`` SIGKILLs this process there
    (``WHERE:STEP@RANK``: only that rank of a several-process run)."""
    wanted = os.environ.get("CORL_FAULT")
    if wanted and wanted in (f"{where}:{step}", f"{where}:{step}@{rank}"):
        os.kill(os.getpid(), signal.SIGKILL)

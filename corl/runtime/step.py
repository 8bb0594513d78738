"""One Co-RL step, top to bottom: sample, exchange, vote, route (+ shaping), update, measure, observe.

:func:`train_step` reads as its stages, one function each. Everything goes through the protocols
(:mod:`corl.protocols`) and the layout (:class:`~corl.runtime.distributed.Layout`); nothing here
names a built-in component or counts ranks. Every component call is guarded
(:func:`corl.runtime.boundary.guard`): what one raises is one line naming it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from corl.errors import TrainingError
from corl.runtime import checkpoint, shaping
from corl.runtime.boundary import check_rollout, check_routed, check_update, guard
from corl.runtime.distributed import merge_shards
from corl.runtime.evaluation import votes_of
from corl.runtime.host import StepHost
from corl.runtime.metrics import merge_ranks, vote_metrics
from corl.runtime.samples import step_samples
from corl.types import Prompt, Rollout, Routed, StepMetrics, StepOutcome

Grid = list[list[float]]  # [prompt][sample]


def train_step(run: StepHost, step: int) -> StepMetrics:
    start, during = time.perf_counter(), f"during step {step}"
    prompts = [run.train[i] for i in run.state.order.take(run.spec.run.prompts_per_step, len(run.train))]
    sampled = sample(run, prompts, during)  # 1
    seen = exchange(run, sampled.shared, step)  # 2
    t0 = time.perf_counter()
    labels, cohort_metrics = vote(run, seen, step)  # 3
    decided = route(run, prompts, seen, labels, during)  # 4
    route_time = (time.perf_counter() - t0) / len(seen.votes)
    update(run, sampled, decided, step, during)  # 5
    metrics = measure(run, step, prompts, sampled, seen, labels, decided, cohort_metrics, route_time)  # 6
    return observe(run, step, prompts, seen, labels, decided, metrics, start)  # 7


@attrs.define
class Sampled:
    """What this rank's agents sampled: their rollouts, what travels to the other ranks (votes,
    shaping values, a few texts for the logs), and their first metrics, by agent."""

    rollouts: dict[str, Rollout]
    shared: dict[str, tuple[Any, dict[str, Grid], list[tuple[int, str]]]]
    metrics: dict[str, dict[str, float]]


@attrs.define
class Seen:
    """Every agent's votes, shaping values and logged texts, whole, on every rank."""

    votes: dict[str, Any]
    terms: dict[str, dict[str, Grid]]
    texts: dict[str, dict[int, str]]


@attrs.define
class Decided:
    """The router's checked decision, the agents it gave a non-finite reward, and the rewards with
    the shaping terms added (``routed.rewards`` stays the peer reward)."""

    routed: Routed
    nonfinite: set[str]
    rewards: dict[str, Grid]


def sample(run: StepHost, prompts: Sequence[Prompt], during: str) -> Sampled:
    """1. Each agent this process holds samples its shard of the prompts; each answer is a vote.
    Shaping terms ([[shaping]]) score the completions here, where their texts are; a few texts
    travel with the votes, for the logs (run.log_completions)."""
    n_votes, keep_texts, verifier = run.spec.voting.n_votes, run.spec.run.log_completions, run.verifier
    out = Sampled({}, {}, {})
    for slot in run.agents:
        t0 = time.perf_counter()
        shard = run.layout.shard(slot.name, prompts)
        with run.stream(slot.name), guard(run.who("sampler", slot.name), during):
            rollout = slot.sampler.sample(slot.agent, shard, n_votes)
        check_rollout(rollout, shard, n_votes, run.who("sampler", slot.name))
        timeouts = verifier.timeouts
        out.rollouts[slot.name] = rollout
        agent_votes = votes_of(rollout, verifier, run.who("verifier"), during)
        at = run.layout.shard(slot.name, range(len(prompts)))  # the shard's prompts' places in the step's prompts
        texts = [(at[p], row[0]) for p, row in enumerate(rollout.texts) if at[p] < keep_texts]
        out.shared[slot.name] = (agent_votes, shaping.score(run, rollout, agent_votes), texts)
        out.metrics[slot.name] = {"time/sample": time.perf_counter() - t0,
                                  "verify_timeouts": float(verifier.timeouts - timeouts),  # past run.answer_timeout
                                  "completion_length": statistics.fmean(x for ls in rollout.lengths for x in ls)}
    return out


def exchange(run: StepHost, shared: dict[str, Any], step: int) -> Seen:
    """2. Every rank gets every agent's votes (and shaping values), so every rank votes and routes identically."""
    exchanged = run.layout.gather(shared, f"step {step}: exchanging votes")
    return Seen(votes={name: merge_shards([v for v, _, _ in shards]) for name, shards in exchanged.items()},
                terms={name: {t.name: merge_shards([values[t.name] for _, values, _ in shards])
                              for t in run.spec.shaping} for name, shards in exchanged.items()},
                texts={name: dict(t for _, _, shard in shards for t in shard) for name, shards in exchanged.items()})


def vote(run: StepHost, seen: Seen, step: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """3. Vote: a cohort aggregator first sees every agent's votes (its state, e.g. a reliability
    estimate), then each agent's answers become its own pseudo-labels."""
    cohort_metrics = run.aggregator.observe(seen.votes, run.verifier, step)
    labels = {name: run.aggregator.own_labels(agent_votes, run.verifier, name)
              for name, agent_votes in seen.votes.items()}
    return labels, cohort_metrics


def route(run: StepHost, prompts: Sequence[Prompt], seen: Seen, labels: dict[str, Any], during: str) -> Decided:
    """4. Route: whose pseudo-label rewards whom (and, per agent, the labels it was paid by and the
    prompts the router skips). Ground truth only in a run declared supervised. Then each shaping
    term, times its weight, is added to the peer reward of every completion."""
    truth = [p.label for p in prompts] if run.spec.run.supervised else None
    with guard(run.who("router"), during):
        routed = run.router.route(seen.votes, labels, run.verifier, run.aggregator, truth)
    routed, nonfinite = check_routed(routed, seen.votes, labels, run.who("router"))
    rewards = shaping.add(routed.rewards, seen.terms, {t.name: t.weight for t in run.spec.shaping},
                           peer=run.spec.run.peer_reward)
    return Decided(routed, nonfinite, rewards)


def update(run: StepHost, sampled: Sampled, decided: Decided, step: int, during: str) -> None:
    """5. Update each trained agent held here on its first n_train samples of every prompt it keeps,
    then let its sampler pick up the new weights. A non-finite reward skips the update; a frozen
    agent (a judge) votes but is not trained."""
    for slot in run.agents:
        m, t0 = sampled.metrics[slot.name], time.perf_counter()
        kept = _kept(run, slot.name, decided)
        if slot.optimizer is not None and slot.name in decided.nonfinite:
            m["nonfinite"] = m["nonfinite_reward"] = 1.0
            run.warn(f"step {step}: agent {slot.name!r}: {run.who('router')} gave a non-finite reward; update "
                     "skipped. The router (or a shaping term) computed it: check its code; a lower learning rate "
                     "will not help")
        elif slot.optimizer is not None and kept:
            mine = run.layout.shard(slot.name, decided.rewards[slot.name])
            train_rewards = [mine[p][:run.spec.voting.n_train] for p in kept]
            rollout = sampled.rollouts[slot.name]
            rollout = rollout if len(kept) == len(rollout.prompts) else rollout.select(kept)
            with run.stream(slot.name):
                with guard(run.who("optimizer", slot.name), during):
                    result = slot.optimizer.step(rollout, train_rewards)
                m.update(check_update(result, run.who("optimizer", slot.name)))
                with guard(run.who("sampler", slot.name), f"while syncing weights {during}"):
                    slot.sampler.sync(slot.agent)
        m["time/update"] = time.perf_counter() - t0


def _kept(run: StepHost, name: str, decided: Decided) -> list[int]:
    """The places of this rank's prompts of agent ``name`` that its update trains on: those its router
    did not skip. An agent whose passes are collective (:meth:`~corl.runtime.distributed.Layout.collective`)
    keeps them all, a skipped one with equal rewards (no advantage), so no rank of its group runs out
    of work before the others."""
    skipped_all = decided.routed.skipped[name]
    skipped = run.layout.shard(name, skipped_all)
    if run.layout.collective(name) and any(skipped):
        skipped = [False] * len(skipped)
        decided.rewards[name] = [[0.0] * len(row) if skip else row
                                 for row, skip in zip(decided.rewards[name], skipped_all)]
    return [p for p, skip in enumerate(skipped) if not skip]


def measure(run: StepHost, step: int, prompts: Sequence[Prompt], sampled: Sampled, seen: Seen,
            labels: dict[str, Any], decided: Decided, cohort_metrics: dict[str, dict[str, Any]],
            route_time: float) -> dict[str, dict[str, Any]]:
    """6. Metrics: timings and losses exchanged between ranks; vote metrics from the exchanged votes."""
    routed, n_train, truth = decided.routed, run.spec.voting.n_train, [p.label for p in prompts]
    metrics = {name: merge_ranks(per_rank)
               for name, per_rank in run.layout.gather(sampled.metrics, f"step {step}: exchanging metrics").items()}
    for name, m in metrics.items():
        m["time/vote_route"] = route_time
        paid = routed.rewards[name] if run.spec.run.peer_reward else decided.rewards[name]  # the peer reward, or the terms that replace it
        m.update(vote_metrics(seen.votes[name], labels[name], routed.targets[name], routed.skipped[name],
                              paid, truth, run.verifier, n_train))
        m.update(shaping.metrics(seen.terms[name], decided.rewards[name], n_train))
        m.update(routed.metrics.get(name, {}))
        m.update(cohort_metrics.get(name, {}))
    watch(run, step, metrics)
    return metrics


def observe(run: StepHost, step: int, prompts: Sequence[Prompt], seen: Seen, labels: dict[str, Any],
            decided: Decided, metrics: dict[str, dict[str, Any]], start: float) -> StepMetrics:
    """7. Observers (console, metrics.jsonl, tensorboard, early stop, ...) see the metrics and what was decided."""
    routed = decided.routed
    outcome = StepOutcome(prompts=tuple(prompts), votes=seen.votes, labels=labels, targets=routed.targets,
                          rewards=routed.rewards, skipped=routed.skipped,
                          samples=step_samples(step, prompts, seen.texts, seen.votes, routed,
                                               run.spec.run.log_completions))
    result = StepMetrics(step=step, agents=metrics, seconds=time.perf_counter() - start)
    run.state.history.append({"step": step, "seconds": result.seconds, "agents": metrics})
    run.notify("corl_on_step_end", step=step, metrics=result, outcome=outcome)
    return result


def watch(run: StepHost, step: int, metrics: Mapping[str, Mapping[str, float]]) -> None:
    """(Stage 6's end.) Warn ``run`` about collapse and collusion; count skipped (non-finite) updates and stop after
    ``run.max_nonfinite`` in a row for one agent."""
    health = run.state.health
    for message in health.check(step, metrics, run.spec.run.prompts_per_step):
        run.warn(message)
    for name, streak in health.count_nonfinite(metrics).items():
        run.warn(f"step {step}: agent {name!r}: non-finite loss, gradients or rewards; update skipped "
                f"({streak} in a row)")
        if streak >= run.spec.run.max_nonfinite:
            last = checkpoint.latest(run.checkpoint_root)
            if metrics[name].get("nonfinite_reward"):  # the router's (or a shaping term's) numbers, not the model's
                raise TrainingError(
                    f"agent {name!r}: {run.who('router')} (or a shaping term) gave non-finite rewards in {streak} "
                    f"consecutive steps (up to step {step}); stopping. Last checkpoint: {last or 'none'}. Fix the "
                    "router's reward computation (a division by zero, a NaN it reads); a lower learning rate will not help")
            raise TrainingError(
                f"agent {name!r}: non-finite loss, gradients or rewards in {streak} consecutive steps (up to step "
                f"{step}); stopping. Last checkpoint: {last or 'none'}. Lower that agent's optimizer.lr or raise "
                "run.max_nonfinite")

"""One Co-RL step, top to bottom: sample, extract, exchange, vote, route (+ shaping), update, measure, observe.

Everything goes through the protocols (:mod:`corl.protocols`) and the layout (:mod:`corl.runtime.
distributed`); nothing here names a built-in component or branches on where agents run.
"""

from __future__ import annotations

import statistics
import time

from corl.runtime import health, shaping
from corl.runtime.boundary import check_labels, check_rewards, check_rollout, check_update
from corl.runtime.distributed import merge_shards
from corl.runtime.evaluation import votes_of
from corl.runtime.metrics import merge_ranks, vote_metrics
from corl.types import StepMetrics


def train_step(run, step: int) -> StepMetrics:
    start = time.perf_counter()
    spec, layout, verifier = run.spec, run.layout, run.verifier
    n_votes, n_train = spec.voting.n_votes, spec.voting.n_train
    prompts = [run.train[i] for i in run.state.order.take(spec.run.prompts_per_step, len(run.train))]

    # 1. Each agent this process holds samples its shard of the prompts; each answer is a vote.
    #    Shaping terms ([[shaping]]) score the completions here, where their texts are.
    rollouts, local_votes, local = {}, {}, {}
    for slot in run.agents:
        t0 = time.perf_counter()
        shard = layout.shard(slot.name, prompts)
        with run.stream(slot.name):
            rollout = slot.sampler.sample(slot.agent, shard, n_votes)
        check_rollout(rollout, shard, n_votes, run.who("sampler", slot.name))
        timeouts = verifier.timeouts
        rollouts[slot.name] = rollout
        agent_votes = votes_of(rollout, verifier)
        local_votes[slot.name] = (agent_votes, shaping.score(run, rollout, agent_votes))
        local[slot.name] = {"time/sample": time.perf_counter() - t0,
                            "verify_timeouts": float(verifier.timeouts - timeouts),  # past run.answer_timeout
                            "completion_length": statistics.fmean(x for ls in rollout.lengths for x in ls)}

    # 2. Every rank gets every agent's votes (and shaping values), so every rank votes and routes identically.
    exchanged = layout.gather(local_votes, f"step {step}: exchanging votes")
    votes = {name: merge_shards([v for v, _ in shards]) for name, shards in exchanged.items()}
    terms = {name: {t.name: merge_shards([values[t.name] for _, values in shards]) for t in spec.shaping}
             for name, shards in exchanged.items()}

    # 3. Vote: each agent's answers become its pseudo-labels.
    t0 = time.perf_counter()
    labels = {}
    for name, agent_votes in votes.items():
        labels[name] = run.aggregator.aggregate(agent_votes, verifier)
        check_labels(labels[name], agent_votes, name, run.who("aggregator"))

    # 4. Route: whose pseudo-label rewards whom. Ground truth only in a run declared supervised.
    #    Then each shaping term, times its weight, is added to the peer reward of every completion.
    truth = [p.label for p in prompts]
    peer = run.router.route(votes, labels, verifier, run.aggregator, truth if spec.run.supervised else None)
    nonfinite_rewards = check_rewards(peer, votes, run.who("router"))
    rewards = shaping.add(peer, terms, {t.name: t.weight for t in spec.shaping})
    route_time = (time.perf_counter() - t0) / len(votes)

    # 5. Update each trained agent held here on its first n_train samples per prompt, then let its
    #    sampler pick up the new weights. A non-finite reward skips the update like a non-finite loss.
    for slot in run.agents:
        m, t0 = local[slot.name], time.perf_counter()
        if slot.optimizer is not None and slot.name in nonfinite_rewards:
            m["nonfinite"] = 1.0
            run.warn(f"step {step}: agent {slot.name!r}: {run.who('router')} gave a non-finite reward; update skipped")
        elif slot.optimizer is not None:  # a frozen agent (a judge) votes but is not trained
            train_rewards = [r[:n_train] for r in layout.shard(slot.name, rewards[slot.name])]
            with run.stream(slot.name):
                m.update(check_update(slot.optimizer.step(rollouts[slot.name], train_rewards),
                                      run.who("optimizer", slot.name)))
                slot.sampler.sync(slot.agent)
        m["time/update"] = time.perf_counter() - t0

    # 6. Metrics: timings and losses exchanged between ranks; vote metrics from the exchanged votes.
    metrics = {name: merge_ranks(per_rank)
               for name, per_rank in layout.gather(local, f"step {step}: exchanging metrics").items()}
    for name, m in metrics.items():
        m["time/vote_route"] = route_time
        m.update(vote_metrics(votes[name], labels[name], peer[name], truth, verifier, n_train))  # the peer reward
        m.update(shaping.metrics(terms[name], rewards[name], n_train))
    health.watch(run, step, metrics)

    # 7. Observers (console, metrics.jsonl, tensorboard, early stop, ...).
    result = StepMetrics(step=step, agents=metrics, seconds=time.perf_counter() - start)
    run.state.history.append({"step": step, "seconds": result.seconds, "agents": metrics})
    run.notify("corl_on_step_end", step=step, metrics=result)
    return result

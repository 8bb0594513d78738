"""One Co-RL step, top to bottom: sample, extract, exchange, vote, route (+ shaping), update, measure, observe.

Everything goes through the protocols (:mod:`corl.protocols`) and the layout (:mod:`corl.runtime.
distributed`); nothing here names a built-in component or branches on where agents run. Every
component call is guarded (:func:`corl.runtime.boundary.guard`): what one raises is one line naming it.
"""

from __future__ import annotations

import statistics
import time

from corl.runtime import health, shaping
from corl.runtime.boundary import check_rollout, check_routed, check_update, guard
from corl.runtime.distributed import merge_shards
from corl.runtime.evaluation import votes_of
from corl.runtime.metrics import merge_ranks, vote_metrics
from corl.runtime.samples import step_samples
from corl.types import StepMetrics, StepOutcome


def train_step(run, step: int) -> StepMetrics:
    start = time.perf_counter()
    spec, layout, verifier = run.spec, run.layout, run.verifier
    n_votes, n_train = spec.voting.n_votes, spec.voting.n_train
    prompts = [run.train[i] for i in run.state.order.take(spec.run.prompts_per_step, len(run.train))]
    during = f"during step {step}"

    # 1. Each agent this process holds samples its shard of the prompts; each answer is a vote.
    #    Shaping terms ([[shaping]]) score the completions here, where their texts are; a few texts
    #    travel with the votes, for the logs (run.log_completions).
    rollouts, local_votes, local = {}, {}, {}
    for slot in run.agents:
        t0 = time.perf_counter()
        shard = layout.shard(slot.name, prompts)
        with run.stream(slot.name), guard(run.who("sampler", slot.name), during):
            rollout = slot.sampler.sample(slot.agent, shard, n_votes)
        check_rollout(rollout, shard, n_votes, run.who("sampler", slot.name))
        timeouts = verifier.timeouts
        rollouts[slot.name] = rollout
        agent_votes = votes_of(rollout, verifier, run.who("verifier"), during)
        at = layout.shard(slot.name, range(len(prompts)))  # the shard's prompts' places in the step's prompts
        texts = [(at[p], row[0]) for p, row in enumerate(rollout.texts) if at[p] < spec.run.log_completions]
        local_votes[slot.name] = (agent_votes, shaping.score(run, rollout, agent_votes), texts)
        local[slot.name] = {"time/sample": time.perf_counter() - t0,
                            "verify_timeouts": float(verifier.timeouts - timeouts),  # past run.answer_timeout
                            "completion_length": statistics.fmean(x for ls in rollout.lengths for x in ls)}

    # 2. Every rank gets every agent's votes (and shaping values), so every rank votes and routes identically.
    exchanged = layout.gather(local_votes, f"step {step}: exchanging votes")
    votes = {name: merge_shards([v for v, _, _ in shards]) for name, shards in exchanged.items()}
    terms = {name: {t.name: merge_shards([values[t.name] for _, values, _ in shards]) for t in spec.shaping}
             for name, shards in exchanged.items()}
    texts = {name: dict(t for _, _, shard in shards for t in shard) for name, shards in exchanged.items()}

    # 3. Vote: a cohort aggregator first sees every agent's votes (its state, e.g. a reliability
    #    estimate), then each agent's answers become its own pseudo-labels.
    t0 = time.perf_counter()
    cohort_metrics = run.aggregator.observe(votes, verifier, step)
    labels = {name: run.aggregator.own_labels(agent_votes, verifier, name) for name, agent_votes in votes.items()}

    # 4. Route: whose pseudo-label rewards whom (and, per agent, the labels it was paid by and the
    #    prompts the router skips). Ground truth only in a run declared supervised.
    #    Then each shaping term, times its weight, is added to the peer reward of every completion.
    truth = [p.label for p in prompts]
    with guard(run.who("router"), during):
        routed = run.router.route(votes, labels, verifier, run.aggregator, truth if spec.run.supervised else None)
    routed, nonfinite_rewards = check_routed(routed, votes, labels, run.who("router"))
    peer = routed.rewards
    rewards = shaping.add(peer, terms, {t.name: t.weight for t in spec.shaping}, peer=spec.run.peer_reward)
    route_time = (time.perf_counter() - t0) / len(votes)

    # 5. Update each trained agent held here on its first n_train samples of every prompt its router did
    #    not skip, then let its sampler pick up the new weights. A non-finite reward skips the update.
    for slot in run.agents:
        m, t0 = local[slot.name], time.perf_counter()
        skipped = layout.shard(slot.name, routed.skipped[slot.name])
        if len(layout.members[slot.name]) > 1 and any(skipped):
            # a sharded agent's passes are collective: every rank keeps its prompts, a skipped one
            # with equal rewards (no advantage), so no rank runs out of work before the others
            skipped = [False] * len(skipped)
            rewards[slot.name] = [[0.0] * len(row) if skip else row
                                  for row, skip in zip(rewards[slot.name], routed.skipped[slot.name])]
        kept = [p for p, skip in enumerate(skipped) if not skip]
        if slot.optimizer is not None and slot.name in nonfinite_rewards:
            m["nonfinite"] = m["nonfinite_reward"] = 1.0
            run.warn(f"step {step}: agent {slot.name!r}: {run.who('router')} gave a non-finite reward; update "
                     "skipped. The router (or a shaping term) computed it: check its code; a lower learning rate "
                     "will not help")
        elif slot.optimizer is not None and kept:  # a frozen agent (a judge) votes but is not trained
            mine = layout.shard(slot.name, rewards[slot.name])
            train_rewards = [mine[p][:n_train] for p in kept]
            rollout = rollouts[slot.name]
            rollout = rollout if len(kept) == len(rollout.prompts) else rollout.select(kept)
            with run.stream(slot.name):
                with guard(run.who("optimizer", slot.name), during):
                    result = slot.optimizer.step(rollout, train_rewards)
                m.update(check_update(result, run.who("optimizer", slot.name)))
                with guard(run.who("sampler", slot.name), f"while syncing weights {during}"):
                    slot.sampler.sync(slot.agent)
        m["time/update"] = time.perf_counter() - t0

    # 6. Metrics: timings and losses exchanged between ranks; vote metrics from the exchanged votes.
    metrics = {name: merge_ranks(per_rank)
               for name, per_rank in layout.gather(local, f"step {step}: exchanging metrics").items()}
    for name, m in metrics.items():
        m["time/vote_route"] = route_time
        paid = peer[name] if spec.run.peer_reward else rewards[name]  # the peer reward, or the terms that replace it
        m.update(vote_metrics(votes[name], labels[name], routed.targets[name], routed.skipped[name], paid,
                              truth, verifier, n_train))
        m.update(shaping.metrics(terms[name], rewards[name], n_train))
        m.update(routed.metrics.get(name, {}))
        m.update(cohort_metrics.get(name, {}))
    health.watch(run, step, metrics)

    # 7. Observers (console, metrics.jsonl, tensorboard, early stop, ...) see the metrics and what was decided.
    outcome = StepOutcome(prompts=tuple(prompts), votes=votes, labels=labels, targets=routed.targets, rewards=peer,
                          skipped=routed.skipped,
                          samples=step_samples(step, prompts, texts, votes, routed, spec.run.log_completions))
    result = StepMetrics(step=step, agents=metrics, seconds=time.perf_counter() - start)
    run.state.history.append({"step": step, "seconds": result.seconds, "agents": metrics})
    run.notify("corl_on_step_end", step=step, metrics=result, outcome=outcome)
    return result

"""Held-out evaluation: greedy accuracy, pass@1 averaged over k samples, maj@k and pass@k."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from corl.protocols import Agent, AnswerVerifier, Sampler
from corl.runtime.boundary import check_rollout, guard
from corl.runtime.cohort import pairwise
from corl.runtime.rng import fixed, stream_seed
from corl.runtime.samples import eval_samples
from corl.runtime.verify import check_answers, extract_all
from corl.types import Completion, Prompt, Rollout, Vote

if TYPE_CHECKING:
    from corl.runtime.host import RunHost


def votes_of(rollout: Rollout, verifier: AnswerVerifier, who: str = "the task's verifier",
             during: str = "") -> list[list[Vote]]:
    """One vote per completion: its extracted answer, its agent and its sampling confidence (an
    exception in the verifier is one line naming it, never a silent missing answer)."""
    with guard(who, during or "while extracting answers"):
        answers = check_answers(extract_all(verifier, rollout.prompts, rollout.texts), rollout.texts, who)
    return [[Vote(a, rollout.agent, c) for a, c in zip(row, confs)]
            for row, confs in zip(answers, rollout.confidences)]


def evaluate(agent: Agent, sampler: Sampler, verifier: AnswerVerifier, prompts: Sequence[Prompt],
             aggregator: Any, k: int, temperature: float,
             check: Callable[[], None] = lambda: None, *, who: Callable[[str], str] = lambda kind: kind,
             log: int = 0, step: int = 0) -> tuple[dict[str, float], list[Any], list[Completion]]:
    """Score ``agent`` on labeled ``prompts``; maj@k votes through ``aggregator`` (the run's
    :class:`~corl.runtime.aggregation.BoundAggregator`). ``check`` is called between the stretches of
    work (a run's :meth:`~corl.context.StopToken.check`); ``who(kind)`` names a component in messages.

    Returns the scores, the agent's greedy answers (for cohort diagnostics) and its first ``log``
    sampled completions (:func:`corl.runtime.samples.eval_samples`).
    """
    if not prompts:
        return {}, [], []

    name = agent.name
    with guard(who("sampler"), "in an evaluation (greedy)"):
        greedy = sampler.sample(agent, prompts, 1, greedy=True)
    check_rollout(greedy, prompts, 1, who("sampler"))
    check()
    with guard(who("sampler"), "in an evaluation"):
        sampled = sampler.sample(agent, prompts, k, temperature=temperature)
    check_rollout(sampled, prompts, k, who("sampler"))
    check()
    votes = votes_of(sampled, verifier, who("verifier"), "in an evaluation")  # each answer extracted once
    right = lambda answer, label: answer is not None and verifier.equivalent(answer, label)
    with guard(who("verifier"), "in an evaluation"):
        hits = [[right(v.answer, p.label) for v in vs] for p, vs in zip(prompts, votes)]
    labels = aggregator.maj(votes, verifier, name)  # maj@k under the run's voting rule (and its gates), checked
    n = len(prompts)
    rates = [sum(h) / k for h in hits]
    greedy_votes = votes_of(greedy, verifier, who("verifier"), "in an evaluation")
    answers = [row[0].answer for row in greedy_votes]
    with guard(who("verifier"), "in an evaluation"):
        greedy_right = sum(right(a, p.label) for a, p in zip(answers, prompts))
        maj_right = sum(right(lab.answer, p.label) for p, lab in zip(prompts, labels))
    return {
        "greedy": greedy_right / n,
        "pass@1": sum(rates) / n,
        # sampling standard error of pass@1 on these prompts (what re-evaluating the same model moves)
        "pass@1_se": (sum(r * (1 - r) / (k - 1) for r in rates) ** 0.5 / n) if k > 1 else 0.0,
        f"maj@{k}": maj_right / n,
        f"pass@{k}": sum(any(h) for h in hits) / n,
        "length": sum(sum(ls) for ls in sampled.lengths) / (n * k),
    }, answers, eval_samples(name, step, prompts, sampled.texts, votes, labels, log)


def evaluate_run(run: RunHost, step: int, notify: bool = True) -> dict[str, dict[str, float]]:
    """Score every agent of ``run`` on its held-out prompts (each agent's first rank scores it; the
    other ranks of a sharded agent's group sample alongside, since its forward passes are collective),
    exchange the results, compute the cohort matrices and (``notify``) tell the observers."""
    if not run.eval_prompts:
        return {}
    local = {}
    for slot in run.agents:
        run.stop.check()
        if run.layout.owns(slot.name):
            # common random numbers: the same draw at every evaluation (corl.runtime.rng.fixed)
            with fixed(stream_seed(run.spec.run.seed, f"{slot.name}/eval")):
                scores = evaluate(slot.agent, slot.sampler, run.verifier, run.eval_prompts,
                                  run.aggregator, run.spec.eval.k, run.spec.eval.temperature,
                                  check=run.stop.check, who=lambda kind, name=slot.name: run.who(kind, name),
                                  log=run.spec.run.log_completions, step=step)
            local[slot.name] = scores if run.layout.leads(slot.name) else None
        else:
            local[slot.name] = None
    gathered = run.layout.gather(local, f"step {step}: exchanging evaluations")
    results = {name: per_rank[0][0] for name, per_rank in gathered.items()}
    answers = {name: per_rank[0][1] for name, per_rank in gathered.items()}
    samples = [c for per_rank in gathered.values() for c in per_rank[0][2]]
    cohort = pairwise(answers, run.verifier, [p.label for p in run.eval_prompts])
    return _record(run, step, results, cohort, tuple(samples), notify)


def adopt_evaluation(run: RunHost, step: int, results: dict[str, dict[str, float]], cohort: dict[str, Any],
                     samples: tuple[Completion, ...], origin: str) -> dict[str, dict[str, float]]:
    """Record another run's evaluation of ``step`` (``origin`` names it) as ``run``'s own, telling the
    observers as an evaluation would: for runs whose agents at that step, evaluation settings and
    seed are the same (``corl compare``'s shared step-0 evaluation,
    :func:`corl.tools.compare.evaluation_key`), whose evaluations are the same draw
    (:func:`corl.runtime.rng.fixed`)."""
    run.log(f"step {step}: evaluation shared with {origin} (the same agents, evaluation settings and seed)")
    return _record(run, step, results, cohort, samples, notify=True)


def _record(run: RunHost, step: int, results: dict[str, dict[str, float]], cohort: dict[str, Any],
            samples: tuple[Completion, ...], notify: bool) -> dict[str, dict[str, float]]:
    """What an evaluation of ``step`` leaves in ``run`` (scores, cohort matrices, logged completions),
    and (``notify``) the observers told of it."""
    run.state.evals[step], run.state.cohorts[step], run.eval_samples[step] = results, cohort, samples
    if notify:
        run.notify("corl_on_eval_end", step=step, results=results, cohort=cohort, samples=samples)
    return results

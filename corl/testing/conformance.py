"""Conformance checks of the plugin contract, one call each: what corl's own hf backend, engine
plugins and optimizers pass in corl's tests, for a plugin author to run on theirs.

    from corl.testing import conformance

    def test_my_sampler(tmp_path):
        agent, sampler, stop = ...                     # built with corl.testing.context(stop=stop)
        conformance.check_sampler(agent, sampler, prompts)
        conformance.check_agent_state(agent, tmp_path / "state")
        conformance.check_stop(sampler, agent, prompts, stop)

    def test_my_optimizer(tmp_path):
        conformance.check_optimizer(lambda ctx: MyOptimizer(MyConfig(), ctx), tmp_path)

Each raises ``AssertionError`` with one sentence saying what the component got wrong; nothing is
skipped silently. The defaults (``make_agent``, ``make_sampler``) are the kit's trainable fake agent
and its sampler (:mod:`corl.testing.fakes`), so an optimizer is tested without a model.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl.context import Context, StopToken
from corl.errors import Stopping
from corl.runtime.boundary import check_rollout
from corl.types import Prompt, Rollout, TokenBatch


def check_sampler(agent: Any, sampler: Any, prompts: Sequence[Prompt], *, n: int = 4, atol: float = 1e-4) -> Rollout:
    """``sampler.sample(agent, prompts, n)`` returns a rollout of ``len(prompts) x n`` completions whose
    batch is a :class:`corl.types.TokenBatch` (``[R, T]`` tensors, rows ``p * n + s``,
    ``select``), and the agent scores every sampled token as the sampler did: ``token_logprobs``
    equals ``old_logprobs`` within ``atol`` (an optimizer's first ratio is exactly 1)."""
    import torch

    rollout = sampler.sample(agent, prompts, n)
    check_rollout(rollout, prompts, n, f"sampler {type(sampler).__name__}")
    batch, rows = rollout.batch, len(prompts) * n
    assert isinstance(batch, TokenBatch), (f"the rollout's batch ({type(batch).__name__}) is not a "
                                           "corl.types.TokenBatch: completion_ids, completion_mask, old_logprobs, "
                                           "temperature, truncated, max_new_tokens, select()")
    for name in ("completion_ids", "completion_mask", "old_logprobs"):
        shape = tuple(getattr(batch, name).shape)
        assert len(shape) == 2 and shape[0] == rows, f"batch.{name} is {shape}, expected [{rows}, T] (rows p * n + s)"
    assert batch.completion_ids.shape == batch.completion_mask.shape == batch.old_logprobs.shape, \
        "batch.completion_ids, completion_mask and old_logprobs differ in shape"
    lengths, truncated = batch.completion_mask.sum(1), torch.as_tensor(batch.truncated)
    assert tuple(truncated.shape) == (rows,) and truncated.dtype == torch.bool, \
        f"batch.truncated is {tuple(truncated.shape)} {truncated.dtype}, expected [{rows}] bool (one flag per row)"
    cap = batch.max_new_tokens
    assert isinstance(cap, int) and cap >= 0, f"batch.max_new_tokens is {cap!r}, expected the sampler's cap (an int)"
    assert not cap or int(lengths.max()) <= cap, f"a row has {int(lengths.max())} tokens, over max_new_tokens = {cap}"
    assert bool((lengths[truncated] == cap).all()), "a row marked truncated is shorter than max_new_tokens"
    with torch.no_grad():
        logp, entropy = agent.token_logprobs(batch, torch.arange(rows))
    assert tuple(logp.shape) == tuple(batch.old_logprobs.shape) == tuple(entropy.shape), (
        f"token_logprobs gave {tuple(logp.shape)} log-probs and {tuple(entropy.shape)} entropies for a batch of "
        f"{tuple(batch.old_logprobs.shape)}")
    mask = batch.completion_mask.bool()
    gap = float((logp - batch.old_logprobs).abs()[mask].max()) if mask.any() else 0.0
    assert gap <= atol, (f"the agent scores a sampled token {gap:.2e} nats away from its sampling-time log-prob "
                         f"(allowed {atol:g}): training would start off-policy (same temperature? same positions?)")
    picked = batch.select([rows - 1, 0])
    assert torch.equal(picked.completion_ids, batch.completion_ids[[rows - 1, 0]]) and torch.equal(
        torch.as_tensor(picked.truncated), truncated[[rows - 1, 0]]), "batch.select(rows) does not return those rows in that order"
    return rollout


def check_agent_state(agent: Any, path: str | Path) -> None:
    """``save_state`` then ``load_state`` gives back every parameter exactly, after they had changed."""
    import torch

    params = [p for p in agent.parameters() if p.dtype.is_floating_point]
    assert params, "the agent has no floating-point parameters to train"
    saved = [p.detach().clone() for p in params]
    agent.save_state(str(path))
    with torch.no_grad():
        for p in params:
            p.add_(1.0)
    agent.load_state(str(path))
    for i, (p, before) in enumerate(zip(params, saved)):
        assert torch.equal(p.detach(), before), f"parameter {i} differs after save_state / load_state"


def check_stop(sampler: Any, agent: Any, prompts: Sequence[Prompt], stop: StopToken) -> None:
    """The sampler polls the run's stop token (``ctx.stop.check()`` between units of work): with a
    stop requested it raises ``corl.errors.Stopping``. Build the sampler with a context whose
    ``stop`` is ``stop`` (:func:`corl.testing.context`)."""
    stop.request(signal.SIGINT)
    with stop.abandonable():
        try:
            sampler.sample(agent, prompts, 2)
        except Stopping:
            return
    raise AssertionError(f"sampler {type(sampler).__name__} never called ctx.stop.check(): a Ctrl-C during an "
                         "evaluation would wait for the whole batch")


def check_optimizer(make_optimizer: Callable[[Context], Any], path: str | Path, *,
                    make_agent: Callable[[Context], Any] | None = None,
                    make_sampler: Callable[[Context], Any] | None = None,
                    prompts: Sequence[Prompt] | None = None, n: int = 4, tokens: int = 3) -> None:
    """An optimizer built by ``make_optimizer(ctx)`` (``ctx.agent`` is the agent it updates):

    * one step moves the loss the right way: the completions it rewards gain log-probability
      relative to the ones it does not;
    * it reports what it measured as a dict of numbers, ``nonfinite`` included;
    * a save / load resume is bit-identical: two steps in a row give the same weights as one step,
      ``save_state`` of agent and optimizer, a fresh agent and optimizer loading them, and the
      second step.

    The agent and sampler default to the kit's trainable fake agent (:class:`corl.testing.FakeAgent`),
    writing completions of 1 to ``tokens`` tokens (padded after each row's end), so an optimizer is
    held to the mask and to per-token and per-sequence sums as a language model's batches need."""
    import torch

    from corl.testing import FakeAgent, FakeAgentConfig, FakeSampler, context

    make_agent = make_agent or (lambda ctx: FakeAgent(FakeAgentConfig(accuracy=0.4, wrong=3, tokens=tokens), ctx))
    make_sampler = make_sampler or (lambda ctx: FakeSampler(None, ctx))
    prompts = list(prompts) if prompts is not None else [Prompt(f"p{i}", f"{i}+{i}=", 2 * i) for i in range(4)]
    path = Path(path)

    def build():
        ctx = context(agent_name="checked")
        agent = make_agent(ctx)
        ctx = attrs.evolve(ctx, agent=agent)
        return agent, make_sampler(ctx), make_optimizer(ctx)

    def scores(agent, rollout):
        with torch.no_grad():
            logp, _ = agent.token_logprobs(rollout.batch, torch.arange(len(rollout.prompts) * rollout.n))
        return (logp * rollout.batch.completion_mask).sum(1)

    def rewards(rollout) -> list[list[float]]:  # each prompt's samples that repeat its first one are right
        return [[float(t == row[0]) for t in row] for row in rollout.texts]

    torch.manual_seed(0)
    agent, sampler, optimizer = build()
    first = sampler.sample(agent, prompts, n)
    r = rewards(first)
    paid = torch.tensor([x for row in r for x in row]).bool()
    assert paid.any() and (~paid).any(), "the check needs samples that differ: raise n or use more varied prompts"
    before = scores(agent, first)
    metrics = optimizer.step(first, r)
    assert isinstance(metrics, dict) and all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in
                                             metrics.items()), "step() must return a dict of metric names to numbers"
    assert not metrics.get("nonfinite"), f"a plain step reported nonfinite = {metrics['nonfinite']}"
    moved = scores(agent, first) - before
    assert float(moved[paid].mean()) > float(moved[~paid].mean()), (
        f"after one step the rewarded completions moved {float(moved[paid].mean()):+.3g} nats and the unrewarded "
        f"{float(moved[~paid].mean()):+.3g}: the update goes the wrong way (or not at all)")
    agent.save_state(str(path / "agent"))
    optimizer.save_state(str(path / "optimizer"))
    torch.manual_seed(1)
    second = sampler.sample(agent, prompts, n)
    torch.manual_seed(2)
    optimizer.step(second, rewards(second))
    straight = [p.detach().clone() for p in agent.parameters()]

    torch.manual_seed(0)
    agent, sampler, optimizer = build()
    agent.load_state(str(path / "agent"))
    optimizer.load_state(str(path / "optimizer"))
    torch.manual_seed(2)
    optimizer.step(second, rewards(second))
    for i, (p, q) in enumerate(zip(agent.parameters(), straight)):
        assert torch.equal(p.detach(), q), (f"parameter {i} differs after a save / load resume: the optimizer's "
                                           "save_state misses part of its state (moments, step count, schedule)")


def check_resume(path: str | Path, recipe: Any = None, *, plugins: Sequence[Any] = (), at: int = 2,
                 overrides: Sequence[str] = (), **components: Any) -> None:
    """A real resume is bit-identical: ``recipe`` (default :func:`corl.testing.fake_recipe`), run
    straight and run interrupted after step ``at``'s checkpoint then resumed
    (:func:`corl.testing.interrupt_and_resume`), ends with the same summary, metrics and final
    weights. Put your component in the recipe (or pass it as an object, ``router=...``): whatever its
    kind, state it keeps across steps must go through :class:`corl.protocols.Stateful`, or the resumed
    run diverges from step ``at + 1`` and this says where."""
    from corl.testing import fake_recipe, interrupt_and_resume

    recipe = fake_recipe(**{"run.steps": at + 2}) if recipe is None else recipe
    straight, resumed = interrupt_and_resume(path, recipe, overrides, plugins, at=at, **components)
    for i, (a, b) in enumerate(zip(straight[1], resumed[1])):
        assert a == b, (f"the resumed run differs from the straight one at metrics record {i} (step {a.get('step')}): "
                        "a component's state did not survive the checkpoint; implement save_state / load_state "
                        "(corl.protocols.Stateful)")
    assert len(straight[1]) == len(resumed[1]), "the resumed run logged another number of metrics records"
    assert straight[0] == resumed[0], "the resumed run's summary differs from the straight one's"
    for name in straight[2]:
        assert straight[2][name].keys() == resumed[2].get(name, {}).keys() and all(
            (straight[2][name][k] == resumed[2][name][k]).all() for k in straight[2][name]), \
            f"agent {name!r}'s final weights differ after the resume"

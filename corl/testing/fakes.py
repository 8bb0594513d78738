"""Fake components for tests: a ``fake`` agent, sampler and optimizer with no model behind them.

The agent is one softmax over answer kinds (the right answer or one of a few wrong ones) shared
by every prompt, updated by REINFORCE, so a run of a few steps takes milliseconds and still learns
from whatever rewards a router gives it (held-out prompts included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl.context import Context
from corl.hookspecs import hookimpl
from corl.types import Prompt, Rollout


@attrs.frozen
class _NoOptions:
    pass


@attrs.frozen
class FakeAgentConfig:
    accuracy: float = attrs.field(default=0.5, validator=[attrs.validators.ge(0), attrs.validators.le(1)],
                                  metadata={"help": "probability of the right answer before training"})
    wrong: int = attrs.field(default=3, validator=attrs.validators.ge(1),
                             metadata={"help": "how many distinct wrong answers share the rest"})
    shared_wrong: bool = attrs.field(default=False, metadata={
        "help": "every fake agent makes the same wrong answers (correlated errors); else its own"})
    tokens: int = attrs.field(default=1, validator=attrs.validators.ge(1), metadata={
        "help": "the longest completion in tokens: the answer's token, then up to tokens - 1 more drawn from "
                "the same table (each row's length drawn from 1..tokens): a multi-token batch with padding"})
    vocabulary: tuple[str, ...] = attrs.field(default=(), converter=tuple, metadata={
        "help": "answers in the task's alphabet: the right one is the label as text, the wrong ones are drawn "
                "from these words (empty: numbers near the label)"})


@attrs.frozen
class FakeOptimizerConfig:
    lr: float = attrs.field(default=5.0, validator=attrs.validators.gt(0), metadata={"help": "step size on the logits"})


@attrs.frozen
class FakeBatch:
    """A :class:`corl.types.TokenBatch` of the fake agent's completions: each row's first token is the
    index of the answer kind it sampled (0: right); with ``tokens > 1`` more tokens follow, each row
    as long as it drew (``mask``), padded after its end. Every row ends on its own: none is cut off."""

    completion_ids: Any  # [rows, T] the answer kind, then the row's further tokens (0 after its end)
    old_logprobs: Any  # [rows, T] at `temperature` (0 after a row's end)
    temperature: float = 1.0
    max_new_tokens: int = 1  # the agent's `tokens`
    mask: Any = None  # [rows, T]; None: every position (one-token completions)

    @property
    def completion_mask(self):
        import torch

        return torch.ones_like(self.completion_ids) if self.mask is None else self.mask

    @property
    def truncated(self):
        import torch

        return torch.zeros(len(self.completion_ids), dtype=torch.bool)

    def select(self, rows) -> FakeBatch:
        import torch

        index = torch.as_tensor(list(rows), dtype=torch.long)
        return FakeBatch(self.completion_ids[index], self.old_logprobs[index], self.temperature, self.max_new_tokens,
                         None if self.mask is None else self.mask[index])


class FakeAgent:
    """A policy of one softmax over answer *kinds*: the right answer, or the k-th of ``wrong``
    wrong ones (label + a per-agent offset). Shared by every prompt, so what it learns on the
    train split shows on held-out prompts; prompts without an integer label get a stand-in.

    Its logits are a trainable parameter and its batches are :class:`corl.types.TokenBatch`
    (one token per completion), so the built-in ``grpo`` and ``rloo`` optimizers, or yours, train it
    as they train a language model; ``freeze_reference`` keeps a copy for a KL term."""

    def __init__(self, config: FakeAgentConfig, ctx: Context, answers: Answers | None = None):
        import torch

        self.name, self.config, self.answers = ctx.agent_name, config, answers
        self.writes = ctx.group.rank == 0  # on several ranks every one calls save_state; the first writes
        acc, k = config.accuracy, config.wrong
        right = math.log(max(acc, 1e-6)) - math.log(max((1 - acc) / k, 1e-6))
        self.logits = torch.nn.Parameter(torch.tensor([right] + [0.0] * k))
        self.reference = None
        self._offset = 0 if config.shared_wrong else sum(map(ord, self.name)) % 7

    def candidates(self, prompt: Prompt) -> list[str]:
        """The texts of the answer kinds for ``prompt``: the right one first, then ``wrong`` wrong ones.
        In the task's own alphabet when told it: ``answers(prompt, wrong)`` (a callable given to
        :class:`FakePlugin`), else the ``vocabulary`` (a config key), else numbers near the label."""
        wrong = self.config.wrong
        if self.answers is not None:
            texts = [str(t) for t in self.answers(prompt, wrong)]
            if len(texts) != wrong + 1:
                raise ValueError(f"the fake agents' answers({prompt.id!r}, {wrong}) gave {len(texts)} texts, expected "
                                 f"{wrong + 1}: the right answer, then {wrong} wrong ones")
            return texts
        if self.config.vocabulary:
            right = str(prompt.label)
            others = [w for w in self.config.vocabulary if w != right] or [right]
            start = self._offset + sum(map(ord, prompt.id))
            return [right] + [others[(start + k) % len(others)] for k in range(wrong)]
        label = prompt.label if isinstance(prompt.label, int) else sum(map(ord, prompt.text)) % 100
        return [str(label)] + [str(label + 1 + self._offset + k) for k in range(wrong)]

    def parameters(self):
        return [self.logits]

    def token_logprobs(self, batch: FakeBatch, rows, *, reference: bool = False):
        if reference and self.reference is None:
            raise RuntimeError(f"agent {self.name!r}: reference log-probs asked before freeze_reference()")
        logits = self.reference if reference else self.logits
        logp_all = (logits / batch.temperature).log_softmax(-1)
        logp = logp_all[batch.completion_ids[rows]]  # [len(rows), T]: every position draws from the one table
        entropy = -(logp_all.exp() * logp_all).sum().detach().expand(logp.shape)
        return logp, entropy

    def freeze_reference(self) -> None:
        self.reference = self.logits.detach().clone()

    def save(self, path: str) -> None:
        self.save_state(path)

    def save_state(self, path: str) -> None:
        from safetensors.torch import save_file

        if not self.writes:
            return
        Path(path).mkdir(parents=True, exist_ok=True)
        save_file({"logits": self.logits.detach().contiguous()}, str(Path(path) / "model.safetensors"))

    def load_state(self, path: str) -> None:
        import torch
        from safetensors.torch import load_file

        with torch.no_grad():  # the same parameter: an optimizer built before the restore keeps holding it
            self.logits.copy_(load_file(str(Path(path) / "model.safetensors"))["logits"])


class FakeSampler:
    """Draws answers from the fake agent's table (in the run's RNG stream for that agent), polling
    the run's stop token between prompts."""

    stop = None  # the run's StopToken (a subclass that skips this __init__ polls nothing)

    def __init__(self, config=None, ctx=None):
        self.stop = ctx.stop if ctx is not None else None

    def check(self) -> None:
        if self.stop is not None:
            self.stop.check()

    def sample(self, agent: FakeAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        temp = 1.0 if greedy else (temperature or 1.0)
        tokens = agent.config.tokens
        texts, confs, choices, lengths = [], [], [], []
        with torch.no_grad():
            logp = (agent.logits / temp).log_softmax(-1)
        for p in prompts:
            self.check()
            names = agent.candidates(p)
            picks = logp.argmax().repeat(n) if greedy else torch.multinomial(logp.exp(), n, replacement=True)
            texts.append(tuple(names[i] for i in picks.tolist()))
            if tokens == 1:
                confs.append(tuple(logp[picks].tolist()))
                choices.append(picks[:, None])
                lengths.append((1,) * n)
                continue
            more = (logp.argmax().repeat(n, tokens - 1) if greedy else
                    torch.multinomial(logp.exp(), n * (tokens - 1), replacement=True).view(n, tokens - 1))
            rows = torch.cat([picks[:, None], more], 1)
            length = torch.full((n,), tokens) if greedy else torch.randint(1, tokens + 1, (n,))
            rows = rows.masked_fill(torch.arange(tokens)[None, :] >= length[:, None], 0)
            confs.append(tuple(((logp[rows] * (torch.arange(tokens)[None, :] < length[:, None])).sum(1)
                                / length).tolist()))
            choices.append(rows)
            lengths.append(tuple(length.tolist()))
        ids = torch.cat(choices)
        mask = (torch.arange(tokens)[None, :] < torch.tensor([x for row in lengths for x in row])[:, None]).long()
        batch = FakeBatch(ids, logp[ids] * mask, temp, tokens, None if tokens == 1 else mask)
        return Rollout(agent=agent.name, prompts=tuple(prompts), texts=tuple(texts), lengths=tuple(lengths),
                       confidences=tuple(confs), batch=batch)

    def sync(self, agent: FakeAgent) -> None:
        pass


class FakeOptimizer:
    """REINFORCE with a group-mean baseline on the fake agent's logits."""

    def __init__(self, config: FakeOptimizerConfig, ctx: Context):
        self.lr, self.agent = config.lr, ctx.agent

    def step(self, rollout: Rollout, rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        import torch

        logits, n = self.agent.logits.detach(), rollout.n
        probs, grad = logits.softmax(-1), torch.zeros_like(logits)
        for p, row in enumerate(rewards):
            mean = sum(row) / len(row)
            for s, reward in enumerate(row):
                onehot = torch.zeros_like(logits)
                onehot[rollout.batch.completion_ids[p * n + s, 0]] = 1.0
                grad += (reward - mean) * (onehot - probs)
        grad /= max(1, sum(len(row) for row in rewards))
        if not bool(torch.isfinite(grad).all()):
            return {"nonfinite": 1.0}  # skipped: nothing measured
        with torch.no_grad():
            self.agent.logits += self.lr * grad
        return {"loss": 0.0, "grad_norm": float(grad.norm()), "nonfinite": 0.0}

    def save_state(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "optimizer.json").write_text("{}")

    def load_state(self, path: str) -> None:
        pass


#: how fake agents write a prompt's answers in a task's alphabet: ``answers(prompt, wrong)`` is the right
#: answer's text followed by ``wrong`` wrong ones (``lambda p, k: [p.label, *WRONG[:k]]``)
Answers = Callable[[Prompt, int], Sequence[str]]


class FakePlugin:
    """Registers ``fake`` agent, sampler and optimizer: ``plugins=[FakePlugin()]``. ``answers``: how
    the fake agents write answers in your task's alphabet (:data:`Answers`; a recipe can give a
    ``vocabulary`` instead); :func:`corl.testing.run_tiny` then uses this one instead of its own."""

    def __init__(self, answers: Answers | None = None):
        self.answers = answers

    @hookimpl
    def corl_register_components(self, registry):
        agent = FakeAgent if self.answers is None else lambda config, ctx: FakeAgent(config, ctx, self.answers)
        registry.add("agent", "fake", agent, FakeAgentConfig, help="tabular softmax policy (corl.testing)")
        registry.add("sampler", "fake", FakeSampler, _NoOptions, help="samples the fake agent's table")
        registry.add("optimizer", "fake", FakeOptimizer, FakeOptimizerConfig, help="REINFORCE on the fake table")


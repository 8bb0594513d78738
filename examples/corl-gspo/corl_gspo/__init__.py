"""corl-gspo: a worked example of a corl plugin package (docs/plugins.md), written against corl's
public contract only (``corl``, ``corl.protocols``, ``corl.types``, ``corl.testing``).

It adds two components:

* optimizer ``gspo``: Group Sequence Policy Optimization (Zheng et al. 2025): group-normalised
  advantages as in GRPO, but one importance ratio per *sequence*, the exponential of the mean token
  log-ratio, clipped as a whole;
* aggregator ``agreement``: a cohort vote (:class:`corl.protocols.CohortAggregator`) that weighs a
  pooled vote by how often each agent's own majority has agreed with its peers' across the steps
  seen so far, a state it keeps in checkpoints (:class:`corl.protocols.Stateful`).

A recipe uses them by name, e.g. ``optimizer = { type = "gspo", lr = 1e-5 }`` and
``[voting] type = "agreement"``, once ``pip install ./examples/corl-gspo`` has registered the entry
point ``gspo`` in the ``corl`` group.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import attrs

import corl
from corl.types import PseudoLabel, Vote, VoteContext


@attrs.frozen
class GSPOConfig:
    lr: float = attrs.field(default=1e-5, validator=attrs.validators.gt(0), metadata={"help": "AdamW learning rate"})
    clip: float = attrs.field(default=3e-4, validator=attrs.validators.gt(0), metadata={
        "help": "clip range of the sequence ratio (GSPO's ratios are length-normalised, so the range is small)"})
    max_grad_norm: float = attrs.field(default=1.0, validator=attrs.validators.gt(0), metadata={
        "help": "gradient clipping norm"})


class GSPO:
    """One agent's optimizer: sequence-level clipped policy gradient (corl.protocols.Optimizer)."""

    def __init__(self, config: GSPOConfig, ctx):
        import torch

        self.config, self.agent = config, ctx.agent
        self.params = [p for p in self.agent.parameters() if p.requires_grad]
        self.optim = torch.optim.AdamW(self.params, lr=config.lr)

    def step(self, rollout, rewards):
        import torch

        batch, n_train = rollout.batch, len(rewards[0])
        r = torch.tensor(rewards, dtype=torch.float32)
        std = r.std(dim=1, keepdim=True)
        adv = torch.where(std > 1e-6, (r - r.mean(dim=1, keepdim=True)) / (std + 1e-6), torch.zeros_like(r)).flatten()
        rows = torch.tensor([p * rollout.n + s for p in range(len(rewards)) for s in range(n_train)])
        active = adv.abs() > 1e-8
        if not active.any():
            return {"nonfinite": 0.0, "active_fraction": 0.0}  # no signal: nothing measured, nothing updated
        rows, adv = rows[active], adv[active]
        mask = batch.completion_mask[rows].float()
        logp, entropy = self.agent.token_logprobs(batch, rows)
        tokens = mask.sum(1).clamp(min=1)
        ratio = torch.exp(((logp - batch.old_logprobs[rows]) * mask).sum(1) / tokens)  # one ratio per sequence
        clipped = ratio.clamp(1 - self.config.clip, 1 + self.config.clip)
        loss = -torch.minimum(ratio * adv, clipped * adv).mean()
        if not torch.isfinite(loss):
            return {"nonfinite": 1.0}
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
        if not torch.isfinite(norm):
            self.optim.zero_grad(set_to_none=True)
            return {"nonfinite": 1.0}
        self.optim.step()
        return {"loss": float(loss.detach()), "grad_norm": float(norm), "nonfinite": 0.0,
                "entropy": float((entropy.detach() * mask).sum() / mask.sum()),
                "active_fraction": float(active.float().mean()),
                "clip_frac": float(((ratio - clipped).abs() > 0).float().mean())}

    def save_state(self, path: str) -> None:
        import torch

        Path(path).mkdir(parents=True, exist_ok=True)
        torch.save(self.optim.state_dict(), Path(path) / "gspo.pt")

    def load_state(self, path: str) -> None:
        import torch

        self.optim.load_state_dict(torch.load(Path(path) / "gspo.pt", weights_only=True))


@attrs.frozen
class AgreementConfig:
    floor: float = attrs.field(default=0.05, validator=attrs.validators.ge(0), metadata={
        "help": "the smallest weight an agent's votes keep, however rarely it agreed"})


class AgreementVote:
    """A cohort vote: each agent's votes in a pool count as often as its own majority has agreed with
    its peers' majorities so far (label-free, across steps); one agent's votes are a plain majority."""

    def __init__(self, config: AgreementConfig, ctx=None):
        self.config = config
        self.agreed: dict[str, int] = {}
        self.seen: dict[str, int] = {}

    def observe(self, cohort, verifier, step):
        names = list(cohort)
        for p in range(len(cohort[names[0]])):
            top = {a: _mode(cohort[a][p]) for a in names}
            for a in names:
                peers = [top[b] for b in names if b != a and top[b] is not None]
                if top[a] is None or not peers:
                    continue
                self.seen[a] = self.seen.get(a, 0) + 1
                self.agreed[a] = self.agreed.get(a, 0) + sum(verifier.equivalent(top[a], t) for t in peers) / len(peers)
        return {a: {"agreement": self.weight(a)} for a in names}

    def weight(self, agent: str) -> float:
        seen = self.seen.get(agent, 0)
        return max(self.config.floor, self.agreed.get(agent, 0) / seen) if seen else 1.0

    def aggregate(self, votes, verifier, context: VoteContext):
        out = []
        for vs in votes:
            weights: Counter = Counter()
            for v in vs:
                if v.answer is not None:
                    rep = next((k for k in weights if verifier.equivalent(k, v.answer)), v.answer)
                    weights[rep] += self.weight(v.agent) if context.purpose == "pooled" else 1.0
            if not weights:
                out.append(PseudoLabel(None, 0.0, {}))
                continue
            answer, top = max(weights.items(), key=lambda kv: (kv[1], repr(kv[0])))
            out.append(PseudoLabel(answer, top / sum(weights.values()), dict(weights)))
        return out

    def save_state(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "agreement.json").write_text(json.dumps({"agreed": self.agreed, "seen": self.seen}))

    def load_state(self, path: str) -> None:
        state = json.loads((Path(path) / "agreement.json").read_text())
        self.agreed, self.seen = state["agreed"], state["seen"]


def _mode(votes: list[Vote]):
    answers = Counter(v.answer for v in votes if v.answer is not None)
    return max(answers.items(), key=lambda kv: (kv[1], repr(kv[0])))[0] if answers else None


@corl.hookimpl
def corl_register_components(registry):
    registry.add("optimizer", "gspo", GSPO, GSPOConfig, help="sequence-level ratio and clip (GSPO)")
    registry.add("aggregator", "agreement", AgreementVote, AgreementConfig,
                 help="pooled votes weighted by each agent's agreement with its peers so far")

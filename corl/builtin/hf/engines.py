"""Inference engines colocated with an ``hf`` agent's trainer: what the vLLM and SGLang sampler
plugins share.

The trainer is the agent's transformers model; the engine only samples, in the same process
(vLLM) or in processes it starts next to it (SGLang), on the same GPU. One protocol for both:

* ``sample``: wake the engine if it sleeps; push the trainer's weights if the engine does not hold
  them; sample N completions per prompt with their sampling-time log-probs; pack them into the
  agent's own :class:`~corl.builtin.hf.batch.SampleBatch`; then, with ``sleep``, release the engine's GPU
  memory (weights and KV cache) so the trainer's step has it.
* ``sync`` (after every optimizer step): push the trainer's weights into the engine (tensors,
  never files; no restart) and, with ``check_sync``, check on a probe sequence that the engine now
  scores tokens like the trainer does, so stale weights (TRL issue 5312: a sleeping engine woken
  and reloaded from disk, over the synced weights) stop the run instead of training on them.

A weight push always follows a wake, and weights are treated as lost whenever the engine slept,
so no sample is ever drawn from weights the trainer did not just push. An engine plugin supplies
an :class:`Engine` adapter; everything else is here and is tested against fake engines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

from corl.builtin.hf.batch import rollout
from corl.errors import CorlError, TrainingError
from corl.types import Prompt, Rollout

v = attrs.validators


def _table(instance, attribute, value) -> None:
    if not isinstance(value, dict):
        raise ValueError("expected a table of engine arguments")


@attrs.frozen
class EngineSamplerConfig:
    temperature: float = attrs.field(default=1.0, validator=v.gt(0), metadata={"help": "sampling temperature"})
    top_p: float = attrs.field(default=1.0, validator=[v.gt(0), v.le(1)], metadata={
        "help": "nucleus sampling mass (1: off; the trained log-probs are then exactly logits / temperature)"})
    top_k: int = attrs.field(default=0, validator=v.ge(0), metadata={"help": "top-k sampling (0: off)"})
    max_new_tokens: int = attrs.field(default=512, validator=v.ge(1), metadata={"help": "completion length limit"})
    memory: float = attrs.field(default=0.3, validator=[v.gt(0), v.le(1)], metadata={
        "help": "share of the GPU's memory the engine takes (weights + KV cache); the trainer needs the rest"})
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = attrs.field(default="auto", metadata={
        "help": "the engine's weight dtype (auto: the model's); the trainer keeps its own"})
    sleep: bool = attrs.field(default=True, metadata={
        "help": "release the engine's GPU memory after sampling, while the trainer steps; woken at the next sync"})
    check_sync: bool = attrs.field(default=True, metadata={
        "help": "after every weight sync, check that the engine scores a probe like the trainer (stale weights stop the run)"})
    sync_tolerance: float = attrs.field(default=0.1, validator=v.gt(0), metadata={
        "help": "largest allowed |engine - trainer| token log-prob on the probe (bf16 engines differ by ~1e-2)"})
    engine_args: Any = attrs.field(factory=dict, validator=_table, metadata={
        "help": "extra keyword arguments for the engine's constructor (e.g. max_model_len, enforce_eager)"})


@attrs.frozen
class SamplingRequest:
    """What the sampler asks an engine for, in engine-neutral terms."""

    n: int
    temperature: float  # 0: greedy
    top_p: float
    top_k: int  # 0: off
    max_new_tokens: int
    stop_token_ids: tuple[int, ...]
    seeds: tuple[int, ...]  # one per prompt, drawn from the agent's RNG stream


class Engine(Protocol):
    """The adapter an engine plugin writes around its engine."""

    name: str

    def generate(self, prompt_ids: Sequence[Sequence[int]], request: SamplingRequest
                 ) -> list[list[tuple[list[int], list[float]]]]:
        """``request.n`` completions per prompt: ``[p][s] = (token ids, sampling-time log-probs)``."""

    def score(self, ids: Sequence[int]) -> list[float]:
        """Log-probs (temperature 1) of ``ids[1:]``, each given the tokens before it."""

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Replace the engine's weights by these (Hugging Face names) and drop cached KV. The
        iterable is consumed once, in order, and whole: a sharded agent gathers each tensor as it
        is reached, on every rank of its group at once, so the whole model never exists outside
        the engine; a tensor is the engine's to copy, not to keep."""

    def sleep(self) -> None:
        """Release weights and KV cache from the GPU; their contents may be lost."""

    def wake(self) -> None:
        """Take the GPU memory back (weights must be pushed again before sampling)."""


def serves_hf_agent(ctx, sampler: str) -> Any:
    """The agent a colocated engine samples for: an ``hf``-style agent (tokenizer, model, encode)."""
    agent = ctx.agent
    if agent is None or not all(hasattr(agent, a) for a in ("tokenizer", "model", "encode", "weights", "device")):
        raise CorlError(f"agent {ctx.agent_name!r}: sampler {sampler!r} samples for an hf agent (a transformers "
                        "model the trainer updates); give that agent type = \"hf\"")
    return agent


def model_source(agent) -> str:
    """The folder (or hub id) the agent's weights came from, for the engine to load the same model."""
    return str(getattr(agent.model, "name_or_path", "") or agent.model.config._name_or_path)


def device_index(agent) -> int:
    """The CUDA device the agent's trainer sits on (the engine takes the same one)."""
    import torch

    device = agent.device
    if device.type != "cuda":
        raise CorlError(f"agent {agent.name!r}: a GPU engine needs the agent on a GPU; set device = \"cuda\"")
    return device.index if device.index is not None else torch.cuda.current_device()


def sampler_factory(name: str, build: Callable[[Any, EngineSamplerConfig, int], Engine]):
    """The factory an engine plugin registers: a :class:`ColocatedSampler` over the engine that
    ``build(agent, config, seed)`` starts for the hf agent the sampler serves."""
    def factory(config: EngineSamplerConfig, ctx) -> ColocatedSampler:
        agent = serves_hf_agent(ctx, name)
        return ColocatedSampler(config, build(agent, config, ctx.seed))

    factory.__name__ = factory.__qualname__ = f"{name}_sampler"
    return factory


class ColocatedSampler:
    """A sampler that draws from a colocated engine and trains the agent's transformers model."""

    def __init__(self, config: EngineSamplerConfig, engine: Engine):
        self.config, self.engine = config, engine
        self.asleep = False
        self.current = False  # the engine holds the trainer's latest weights (never assumed at start:
        # a resumed run's agent loads checkpoint weights after the engine loaded the base model)
        self.probe: list[int] | None = None
        self.last_gap: float | None = None

    def sample(self, agent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg = self.config
        self._ready(agent)
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        prompt_ids = encode_prompts(agent, prompts)
        # engine-side randomness, seeded from the agent's stream (corl.runtime.rng): reproducible where the engine is
        seeds = tuple(torch.randint(0, 2**31 - 1, (len(prompts),)).tolist())
        request = SamplingRequest(n=n, temperature=0.0 if greedy else temp, top_p=1.0 if greedy else cfg.top_p,
                                  top_k=0 if greedy else cfg.top_k, max_new_tokens=cfg.max_new_tokens,
                                  stop_token_ids=(agent.tokenizer.eos_token_id,), seeds=seeds)
        samples = self.engine.generate(prompt_ids, request)
        if len(samples) != len(prompts) or any(len(s) != n for s in samples):
            raise RuntimeError(f"{self.engine.name} returned {[len(s) for s in samples]} samples for "
                               f"{len(prompts)} prompts x {n}")
        packed = pack_samples(agent, prompts, prompt_ids, samples, temp)
        first_ids, _ = samples[0][0]
        self.probe = [*prompt_ids[0], *first_ids]  # scored again after the next sync
        if cfg.sleep:
            self.engine.sleep()
            self.asleep, self.current = True, False
        return packed

    def sync(self, agent) -> None:
        """The trainer stepped: push its weights now (and check them)."""
        self.current = False
        self._ready(agent)

    def _ready(self, agent) -> None:
        if self.asleep:
            self.engine.wake()
            self.asleep = False
        if not self.current:
            self.engine.load_weights(trainer_weights(agent))
            self.current = True
            if self.config.check_sync and self.probe and len(self.probe) > 1:
                self.check(agent)

    def check(self, agent) -> float:
        """Largest |engine - trainer| log-prob over the probe; past ``sync_tolerance`` the run stops."""
        engine = self.engine.score(self.probe)
        trainer = trainer_logprobs(agent, self.probe)
        if len(engine) != len(trainer):
            raise RuntimeError(f"{self.engine.name} scored {len(engine)} tokens of a {len(self.probe)}-token probe")
        gap = max(abs(a - b) for a, b in zip(engine, trainer))
        self.last_gap = gap
        if gap > self.config.sync_tolerance:
            raise TrainingError(
                f"agent {agent.name!r}: after a weight sync the {self.engine.name} engine scores tokens up to "
                f"{gap:.3f} nats away from the trainer (sampler.sync_tolerance = {self.config.sync_tolerance}): it is "
                "not sampling from the updated weights (stale weights after sync / sleep). Stopping rather than "
                "training on stale samples")
        return gap


def encode_prompts(agent, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Each prompt's token ids, exactly as the agent encodes them for itself (chat template included)."""
    enc = agent.encode(prompts)
    return [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]


def trainer_weights(agent) -> Iterable[tuple[str, Any]]:
    """The trainer's parameters under their Hugging Face names (tied weights once), one at a time:
    adapters merged in, a sharded agent's gathered tensor by tensor (:meth:`HFAgent.weights`)."""
    return agent.weights()


def trainer_logprobs(agent, ids: Sequence[int]) -> list[float]:
    """The trainer's log-probs (temperature 1) of ``ids[1:]``."""
    import torch

    model = agent.model
    with torch.no_grad():  # (a sharded model's forward is collective: every rank of the group checks)
        x = torch.tensor([list(ids)], device=agent.device)
        logits = model(input_ids=x).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


def import_engine(module: str, sampler: str, package: str):
    """Import an engine package inside the sampler that needs it (``corl plugins`` works without it)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CorlError(f"sampler {sampler!r} needs the {module} package ({exc}); install it on a GPU machine with "
                        f"`pip install {package}`") from None


def pack_samples(agent, prompts: Sequence[Prompt], prompt_ids: Sequence[Sequence[int]],
                 samples: Sequence[Sequence[tuple[Sequence[int], Sequence[float]]]], temperature: float) -> Rollout:
    """A rollout in the hf agent's own format from tokens another engine sampled (vLLM, SGLang).

    ``prompt_ids[p]`` are prompt ``p``'s token ids (unpadded, as the agent's ``encode`` makes them);
    ``samples[p][s]`` is sample ``s``'s completion ids and their sampling-time log-probs at
    ``temperature``. The agent and its optimizer train on the result exactly as on the hf sampler's.
    """
    import torch

    tok, n = agent.tokenizer, len(samples[0])
    eos, pad = tok.eos_token_id, tok.pad_token_id
    completions = []
    for per_prompt in samples:
        for ids, logps in per_prompt:
            ids = list(ids)
            end = ids.index(eos) + 1 if eos in ids else len(ids)  # up to and including the first EOS
            completions.append((ids[:end], list(logps)[:end]))
    width_p, width_c = max(len(ids) for ids in prompt_ids), max(1, max(len(c) for c, _ in completions))
    rows = len(completions)
    sequences = torch.full((rows, width_p), pad, dtype=torch.long)
    prompt_mask = torch.zeros((rows, width_p), dtype=torch.long)
    completion = torch.full((rows, width_c), pad, dtype=torch.long)
    cmask = torch.zeros((rows, width_c), dtype=torch.long)
    logp = torch.zeros((rows, width_c), dtype=torch.float32)
    for r, (ids, logps) in enumerate(completions):
        prompt = prompt_ids[r // n]
        sequences[r, width_p - len(prompt):] = torch.tensor(prompt)  # left padding, as encode makes it
        prompt_mask[r, width_p - len(prompt):] = 1
        completion[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        cmask[r, : len(ids)] = 1
        logp[r, : len(ids)] = torch.tensor(logps, dtype=torch.float32)
    device = agent.device
    return rollout(agent, prompts, n, sequences.to(device), prompt_mask.to(device), completion.to(device),
                   logp.to(device), cmask.to(device), temperature)

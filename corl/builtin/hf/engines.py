"""The public API for engine plugins (corl-vllm, corl-sglang, a third party's): inference engines
colocated with an ``hf`` agent's trainer. Its import path stays put whatever moves inside the hf
package; its names are :data:`__all__` (docs/explanation/architecture.md, "The public API for engine plugins").
A plugin writes an :class:`Engine` adapter and a ``build(agent, config, ctx, sleep=...)`` that starts
its engine, and registers ``sampler_factory(name, build)`` with :class:`EngineSamplerConfig` (or a
subclass adding the engine's keys); it samples for any agent with the
:class:`~corl.protocols.LanguageModelAgent` surface (the contract's).

The trainer is the agent's transformers model; the engine only samples, on the agent's device:
a GPU (in the trainer's process, or in processes the engine starts beside it) or the CPU (vLLM's
CPU build, in a child process). One protocol for all:

* ``sample``: wake the engine if it sleeps; push the trainer's weights if the engine does not hold
  them; sample N completions per prompt with their sampling-time log-probs; pack them into the
  agent's own :class:`~corl.builtin.hf.backend.batch.SampleBatch`; then, with ``sleep`` (GPU engines),
  release the engine's memory (weights and KV cache) so the trainer's step has it.
* ``sync`` (after every optimizer step): push the trainer's weights into the engine (no restart,
  no model folder written) and, with ``check_sync``, check on a probe sequence that the engine now
  scores tokens like the trainer does, so stale weights (TRL issue 5312: a sleeping engine woken
  and reloaded from disk, over the synced weights; a repacked CPU layer that a plain
  ``load_weights`` never reaches) stop the run instead of training on them.

A weight push always follows a wake, and weights are treated as lost whenever the engine slept,
so no sample is ever drawn from weights the trainer did not just push. Tested against fake engines
and, in ``tox -e vllm``, against vLLM's CPU build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

from corl.builtin.hf.backend.batch import rollout
from corl.context import Context
from corl.errors import CorlError, TrainingError
from corl.protocols import LanguageModelAgent, missing_members
from corl.types import Prompt, Rollout

__all__ = ["Engine", "EngineSamplerConfig", "SamplingRequest", "ColocatedSampler", "sampler_factory",
           "serves_hf_agent", "model_source", "engine_device", "device_index", "resolve_sleep", "import_engine",
           "encode_prompts", "pack_samples", "trainer_weights", "trainer_logprobs", "probe_gap", "PROBE_SAMPLES",
           "FLOAT32_TOLERANCE", "HALF_PRECISION_TOLERANCE"]

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
        "help": "a GPU engine: share of the GPU's memory it takes (weights + KV cache); the trainer needs the rest"})
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = attrs.field(default="auto", metadata={
        "help": "the engine's weight dtype; the trainer keeps its own. auto: float32 on the CPU (vLLM's CPU bf16 "
                "path sampled ~5x slower here, docs/how-to/scale-out.md), the engine's own choice on a GPU (bf16 for a "
                "float32 checkpoint)"})
    sleep: bool | None = attrs.field(default=None, metadata={
        "help": "release the engine's GPU memory after sampling, while the trainer steps; woken at the next sync "
                "(default: on for a GPU engine; a CPU engine has no sleep mode, so true is refused there)"})
    check_sync: bool = attrs.field(default=True, metadata={
        "help": "after every weight sync, check that the engine scores a probe like the trainer (stale weights stop the run)"})
    sync_tolerance: float | None = attrs.field(default=None, validator=v.optional(v.gt(0)), metadata={
        "help": "largest allowed gap after a sync, in nats: the mean |engine - trainer| log-prob over the probes' "
                "sampled tokens, on top of twice the engine's own floor measured on the start weights (default: "
                "0.005 for a float32 engine, 0.05 for a bf16 / fp16 one, whose rounding drifts as the weights move; "
                "docs/how-to/scale-out.md)"})
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
    dtype: str  # the weights' dtype as the engine holds them ("float32", "bfloat16", "float16")

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

    def close(self) -> None:
        """Stop the engine and release what it holds (processes, files); called once, at the end."""


def serves_hf_agent(ctx: Context, sampler: str) -> LanguageModelAgent:
    """The agent a colocated engine samples for: one with the :class:`~corl.protocols.LanguageModelAgent` surface."""
    agent = ctx.agent
    lacking = ["the agent"] if agent is None else missing_members(agent, LanguageModelAgent)
    if lacking:
        raise CorlError(f"agent {ctx.agent_name!r}: sampler {sampler!r} samples for an hf agent (a transformers "
                        f"model the trainer updates; this one has no {', '.join(lacking)}); give that agent "
                        "type = \"hf\"")
    return agent


def model_source(agent: LanguageModelAgent) -> str:
    """The folder (or hub id) the agent's weights came from, for the engine to load the same model."""
    return str(getattr(agent.model, "name_or_path", "") or agent.model.config._name_or_path)


def engine_device(agent: LanguageModelAgent):
    """Where the engine runs: the agent's own device (a CUDA device with its index, or the CPU)."""
    import torch

    device = torch.device(agent.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cuda", "cpu"):
        raise CorlError(f"agent {agent.name!r}: an engine sampler runs on a CUDA device or the CPU, not {device.type!r}")
    return device


def device_index(agent: LanguageModelAgent) -> int:
    """The CUDA device the agent's trainer sits on (engines that only run on a GPU take the same one)."""
    device = engine_device(agent)
    if device.type != "cuda":
        raise CorlError(f"agent {agent.name!r}: this engine needs the agent on a GPU; set device = \"cuda\"")
    return device.index


def resolve_sleep(config: EngineSamplerConfig, device, key: str) -> bool:
    """Whether the engine sleeps between sampling and the next sync: by default on a GPU, never on
    the CPU (engines have no sleep mode there; ``key`` names the setting in the refusal)."""
    if config.sleep is None:
        return device.type == "cuda"
    if config.sleep and device.type != "cuda":
        raise CorlError(f"{key}: sleep = true needs a GPU engine (a CPU engine has no sleep mode); remove the key or "
                        "set it to false")
    return config.sleep


def sampler_factory(name: str, build: Callable[..., Engine]):
    """The factory an engine plugin registers: a :class:`ColocatedSampler` over the engine that
    ``build(agent, config, ctx, sleep=...)`` starts for the hf agent the sampler serves. The engine
    is closed when the run ends (``ctx.on_close``)."""
    def factory(config: EngineSamplerConfig, ctx: Context) -> ColocatedSampler:
        from corl.builtin.hf.backend.common import sampler_key

        agent = serves_hf_agent(ctx, name)
        sleep = resolve_sleep(config, engine_device(agent), sampler_key(ctx, "sleep"))
        engine = build(agent, config, ctx, sleep=sleep)
        ctx.on_close(engine.close)
        sampler = ColocatedSampler(config, engine, sleep=sleep, dtype=engine.dtype, check=ctx.stop.check)
        prompts = ctx.task.split("train")[:1] if ctx.task is not None else []
        if config.check_sync and prompts:  # before any step: the engine holds the trainer's start weights
            sampler.calibrate(agent, prompts[0])
        return sampler

    factory.__name__ = factory.__qualname__ = f"{name}_sampler"
    return factory


#: completions of the first prompt a check scores (pooled: one sequence's few tokens are too noisy)
PROBE_SAMPLES = 4
#: default sync tolerances (nats, mean over the probes' sampled tokens) on top of twice the start floor.
#: A float32 engine matches a float32 trainer to ~1e-5, so one stale step at lr 2e-6 (~0.01 on SmolLM2)
#: stands out; a bf16 engine's rounding of updated weights moves its scores by a few 1e-2 from one
#: step to the next, as much as a small step does: only staleness beyond that can be told (docs/how-to/scale-out.md).
FLOAT32_TOLERANCE, HALF_PRECISION_TOLERANCE = 0.005, 0.05


def probe_gap(engine: Sequence[Sequence[float]], trainer: Sequence[Sequence[float]], starts: Sequence[int]) -> float:
    """Mean |engine - trainer| log-prob over the probes' sampled tokens, pooled (``probe[starts[i]:]``
    of probe ``i``; the scores are of ``probe[1:]``). Sampled tokens are the ones the policy gives
    probability to: a rare token's log-prob, where a low-precision engine's rounding shows most,
    weighs one token's share."""
    gaps = [abs(a - b) for e, t, start in zip(engine, trainer, starts) for a, b in list(zip(e, t))[max(start - 1, 0):]]
    return sum(gaps) / len(gaps) if gaps else 0.0


class ColocatedSampler:
    """A sampler that draws from a colocated engine and trains the agent's transformers model."""

    def __init__(self, config: EngineSamplerConfig, engine: Engine, *, sleep: bool = False, dtype: str = "float32",
                 check: Callable[[], None] = lambda: None):
        self.config, self.engine, self.sleeps, self.dtype = config, engine, sleep, dtype
        self.check_stop = check  # the run's stop token, polled around each engine call
        self.asleep = False
        self.current = False  # the engine holds the trainer's latest weights (never assumed at start:
        # a resumed run's agent loads checkpoint weights after the engine loaded the base model)
        self.probes: list[tuple[list[int], int]] = []  # (prompt + completion ids, where the completion starts)
        self.floor = 0.0  # the engine's own precision gap on the start weights (calibrate)
        self.last_gap: float | None = None

    def calibrate(self, agent: LanguageModelAgent, prompt: Prompt) -> float:
        """Measure the gap an engine shows when it holds exactly the trainer's weights (its dtype's and
        kernels' rounding): on the start weights, which both loaded from the same folder, before any
        step, on completions sampled as the checks' probes are. The check after every sync allows
        twice that on top of ``sync_tolerance``."""
        [ids] = encode_prompts(agent, [prompt])
        request = SamplingRequest(n=PROBE_SAMPLES, temperature=self.config.temperature, top_p=self.config.top_p,
                                  top_k=self.config.top_k, max_new_tokens=self.config.max_new_tokens,
                                  stop_token_ids=(agent.tokenizer.eos_token_id,), seeds=(0,))
        [samples] = self.engine.generate([ids], request)
        self.floor = self._gap(agent, [([*ids, *completion], len(ids)) for completion, _ in samples])
        return self.floor

    def sample(self, agent: LanguageModelAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg = self.config
        self.check_stop()
        self._ready(agent)
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        prompt_ids = encode_prompts(agent, prompts)
        # engine-side randomness, seeded from the agent's stream (corl.runtime.rng): reproducible where the engine is
        seeds = tuple(torch.randint(0, 2**31 - 1, (len(prompts),)).tolist())
        request = SamplingRequest(n=n, temperature=0.0 if greedy else temp, top_p=1.0 if greedy else cfg.top_p,
                                  top_k=0 if greedy else cfg.top_k, max_new_tokens=cfg.max_new_tokens,
                                  stop_token_ids=(agent.tokenizer.eos_token_id,), seeds=seeds)
        samples = self.engine.generate(prompt_ids, request)
        self.check_stop()
        if len(samples) != len(prompts) or any(len(s) != n for s in samples):
            raise RuntimeError(f"{self.engine.name} returned {[len(s) for s in samples]} samples for "
                               f"{len(prompts)} prompts x {n}")
        packed = pack_samples(agent, prompts, prompt_ids, samples, temp, cfg.max_new_tokens)
        # the first prompt's completions are scored again after the next sync
        self.probes = [([*prompt_ids[0], *ids], len(prompt_ids[0])) for ids, _ in samples[0][:PROBE_SAMPLES]]
        if self.sleeps:
            self.engine.sleep()
            self.asleep, self.current = True, False
        return packed

    def sync(self, agent: LanguageModelAgent) -> None:
        """The trainer stepped: push its weights now (and check them)."""
        self.current = False
        self._ready(agent)

    def _ready(self, agent: LanguageModelAgent) -> None:
        if self.asleep:
            self.engine.wake()
            self.asleep = False
        if not self.current:
            self.engine.load_weights(trainer_weights(agent))
            self.current = True
            if self.config.check_sync and self.probes:
                self.check(agent)

    def _gap(self, agent: LanguageModelAgent, probes: Sequence[tuple[list[int], int]]) -> float:
        probes = [(ids, start) for ids, start in probes if len(ids) > 1]
        engine = [self.engine.score(ids) for ids, _ in probes]
        trainer = [trainer_logprobs(agent, ids, self.dtype) for ids, _ in probes]
        for (ids, _), scores in zip(probes, engine):
            if len(scores) != len(ids) - 1:
                raise RuntimeError(f"{self.engine.name} scored {len(scores)} tokens of a {len(ids)}-token probe")
        return probe_gap(engine, trainer, [start for _, start in probes])

    @property
    def tolerance(self) -> float:
        """``sync_tolerance``, or its default for the engine's dtype."""
        if self.config.sync_tolerance is not None:
            return self.config.sync_tolerance
        return HALF_PRECISION_TOLERANCE if self.dtype in ("bfloat16", "float16") else FLOAT32_TOLERANCE

    def check(self, agent: LanguageModelAgent) -> float:
        """The mean gap over the probes' sampled tokens (:func:`probe_gap`); past the tolerance plus
        twice the engine's own floor (:meth:`calibrate`) the run stops."""
        gap = self.last_gap = self._gap(agent, self.probes)
        if gap > self.tolerance + 2 * self.floor:
            raise TrainingError(
                f"agent {agent.name!r}: after a weight sync the {self.engine.name} engine scores the probe's tokens "
                f"{gap:.4f} nats away from the trainer on average (allowed: sampler.sync_tolerance = "
                f"{self.tolerance:g} for a {self.dtype} engine + twice its own floor of {self.floor:.4f} on the start "
                "weights): it is not sampling from the updated weights (stale weights after sync / sleep). Stopping "
                "rather than training on stale samples")
        return gap


def encode_prompts(agent: LanguageModelAgent, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Each prompt's token ids, exactly as the agent encodes them for itself (chat template included)."""
    enc = agent.encode(prompts)
    return [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]


def trainer_weights(agent: LanguageModelAgent) -> Iterable[tuple[str, Any]]:
    """The trainer's parameters under their Hugging Face names (tied weights once), one at a time:
    adapters merged in, a sharded agent's gathered tensor by tensor (:meth:`HFAgent.weights`)."""
    return agent.weights()


def trainer_logprobs(agent: LanguageModelAgent, ids: Sequence[int], dtype: str = "float32") -> list[float]:
    """The trainer's log-probs (temperature 1) of ``ids[1:]``, its matmuls in ``dtype``: a bf16
    engine is compared with the trainer's weights rounded as the engine's are (autocast rounds each
    weight to bf16, to nearest, as the engine's load does), since a bf16 copy of updated float32
    weights can sit further from them than the start weights' copy did (docs/how-to/scale-out.md)."""
    import contextlib

    import torch

    model = agent.model
    low = dtype in ("bfloat16", "float16")
    with torch.no_grad(), (torch.autocast(torch.device(agent.device).type, dtype=getattr(torch, dtype)) if low
                           else contextlib.nullcontext()):  # (a sharded model's forward is collective: every rank checks)
        x = torch.tensor([list(ids)], device=agent.device)
        logits = model(input_ids=x).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


def import_engine(module: str, sampler: str, install: str):
    """Import an engine package inside the sampler that needs it (``corl plugins`` works without it);
    ``install`` says how to get it (``pip install ...``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CorlError(f"sampler {sampler!r} needs the {module} package ({exc}); install it with {install}") from None


def pack_samples(agent: LanguageModelAgent, prompts: Sequence[Prompt], prompt_ids: Sequence[Sequence[int]],
                 samples: Sequence[Sequence[tuple[Sequence[int], Sequence[float]]]], temperature: float,
                 max_new_tokens: int = 0) -> Rollout:
    """A rollout in the hf agent's own format from tokens another engine sampled (vLLM, SGLang).

    ``prompt_ids[p]`` are prompt ``p``'s token ids (unpadded, as the agent's ``encode`` makes them);
    ``samples[p][s]`` is sample ``s``'s completion ids and their sampling-time log-probs at
    ``temperature``; ``max_new_tokens`` the engine's cap (a row that reached it without an EOS was
    cut off, ``batch.truncated``; 0: rows are never called cut off). The agent and its optimizer
    train on the result exactly as on the hf sampler's.
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
                   logp.to(device), cmask.to(device), temperature, max_new_tokens=max_new_tokens)

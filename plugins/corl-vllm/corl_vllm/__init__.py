"""corl plugin: the ``vllm`` sampler, vLLM colocated with an ``hf`` agent's trainer.

Written against vLLM 0.33's offline API: ``vllm.LLM`` (``generate``, ``collective_rpc``,
``sleep`` / ``wake_up``, ``reset_prefix_cache``) and ``vllm.SamplingParams``. vLLM is imported
inside the sampler, so ``corl plugins`` lists this plugin where vLLM is not installed.

* The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and the
  ``external_launcher`` executor over a one-process world of its own), so a weight push hands
  the trainer's tensors to the model's ``load_weights`` by reference: no copy through files.
* Sampling-time log-probs are vLLM's ``processed_logprobs`` of the sampled token: log-softmax of
  logits / temperature, what the hf agent's optimizer expects.
* Sleep is level 2 (weights and KV cache dropped, nothing kept on the CPU): the weights are
  pushed again from the trainer at every wake, which is also why nothing is ever reloaded from
  disk over synced weights (TRL issue 5312).
* One vLLM engine per process: give each vllm agent its own rank (docs/scale-out.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import corl
from corl.builtin.hf.engines import (
    EngineSamplerConfig,
    SamplingRequest,
    device_index,
    import_engine,
    model_source,
    sampler_factory,
)
from corl.errors import CorlError

_ENGINES_IN_PROCESS: list[Any] = []


class VLLMEngine:
    """The :class:`corl.builtin.hf.engines.Engine` adapter around a ``vllm.LLM``."""

    name = "vLLM"

    def __init__(self, llm, vllm_module):
        self.llm, self.vllm = llm, vllm_module

    @classmethod
    def build(cls, agent, config: EngineSamplerConfig, seed: int) -> VLLMEngine:
        if _ENGINES_IN_PROCESS:
            raise CorlError(f"agent {agent.name!r}: one vLLM engine per process; launch with torchrun and give each "
                            "vllm agent its own rank (agents[i].ranks; see docs/scale-out.md)")
        # The engine core in this process: weight pushes pass tensors by reference.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = import_engine("vllm", "vllm", "corl-vllm")
        gpu = device_index(agent)
        args = dict(model=model_source(agent), dtype=config.dtype, gpu_memory_utilization=config.memory,
                    enable_sleep_mode=config.sleep, seed=seed, logprobs_mode="processed_logprobs",
                    distributed_executor_backend="external_launcher")
        args.update(config.engine_args)
        with _world_of_one(gpu):
            llm = vllm.LLM(**args)
        _ENGINES_IN_PROCESS.append(llm)
        return cls(llm, vllm)

    def generate(self, prompt_ids: Sequence[Sequence[int]], request: SamplingRequest):
        params = [self.vllm.SamplingParams(
            n=request.n, temperature=request.temperature, top_p=request.top_p, top_k=request.top_k or -1,
            max_tokens=request.max_new_tokens, logprobs=0, seed=seed, stop_token_ids=list(request.stop_token_ids),
            detokenize=False) for seed in request.seeds]
        outputs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in prompt_ids], params, use_tqdm=False)
        return [[_tokens_and_logprobs(c) for c in sorted(out.outputs, key=lambda c: c.index)] for out in outputs]

    def score(self, ids: Sequence[int]) -> list[float]:
        params = self.vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        [out] = self.llm.generate([{"prompt_token_ids": list(ids)}], params, use_tqdm=False)
        # prompt_logprobs[i]: {token id: Logprob} for prompt token i (None for the first)
        return [float(entry[token].logprob) for entry, token in zip(out.prompt_logprobs[1:], ids[1:])]

    def load_weights(self, named_tensors: list[tuple[str, Any]]) -> None:
        self.llm.collective_rpc(_load_weights_on_worker, args=(named_tensors,))
        self.llm.reset_prefix_cache()  # cached KV was computed by the old weights

    def sleep(self) -> None:
        self.llm.sleep(level=2)

    def wake(self) -> None:
        self.llm.wake_up()


def _load_weights_on_worker(worker, named_tensors) -> None:
    """Runs on vLLM's worker (in this process): the model maps Hugging Face names onto its own
    (fused) parameters and casts to its dtype."""
    worker.model_runner.model.load_weights(weights=named_tensors)


def _tokens_and_logprobs(completion) -> tuple[list[int], list[float]]:
    ids = list(completion.token_ids)
    # logprobs[i]: {token id: Logprob}; with logprobs=0 it holds the sampled token
    return ids, [float(entry[token].logprob) for entry, token in zip(completion.logprobs, ids)]


@contextmanager
def _world_of_one(gpu: int):
    """vLLM's external launcher reads the torch.distributed environment: give it a world of its own
    (rank 0 of 1 on this GPU), whatever ranks corl itself runs on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wanted = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": str(gpu), "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(port)}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for k, val in saved.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val


vllm_sampler = sampler_factory("vllm", VLLMEngine.build)


@corl.hookimpl
def corl_register_components(registry):
    registry.add("sampler", "vllm", vllm_sampler, EngineSamplerConfig,
                 help="vLLM colocated with an hf agent: weight sync after every step, sleep while training")

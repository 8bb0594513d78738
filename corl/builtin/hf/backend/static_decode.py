"""The ``hf_static`` sampler: the ``hf`` sampler with a fixed-shape decode step over a preallocated
KV cache (opt-in: ``sampler.type = "hf_static"``), compiled with ``torch.compile`` on request
(``compile = true``).

:func:`decode_static` prefills each prompt once, as :func:`corl.builtin.hf.backend.decode.decode`
does, then copies the prompts' keys and values, each repeated ``n`` times, into a transformers
``StaticCache`` sized for the prompt and every new token. Each decode step then has the same
shapes: one token per row, the whole ``[rows, cache length]`` attention mask (the slots not yet
written are hidden by the causal mask), the cache written in place; no tensor grows. That is the
shape a compiler needs: :class:`CompiledStep` runs the step through ``torch.compile`` (inductor,
whole graph; the prefill stays eager), its artefacts cached across runs under
``$CORL_CACHE_DIR/inductor``, and falls back to the eager step, saying so in one log line, where the
model or platform does not compile. Greedy tokens equal ``generate()``'s and the sampling-time
log-probs equal the training forward's, compiled or not (``tests/unit/builtin/hf/test_static_decode.py``).

Models whose cache is not plain full attention (sliding-window layers: Gemma 2 / 3, Mistral) take
the dynamic loop.
"""

from __future__ import annotations

import functools
import logging
import os

from corl.builtin.hf.backend import decode as dynamic
from corl.builtin.hf.backend import sampler as hf_sampler

BACKEND = "inductor"  # torch.compile's backend ("eager" traces the graph without generating code: the fast tests)
BUCKET = 16  # a compiled step's cache length is rounded up to this: one graph for nearby prompt widths (64
# cost the tiny zoo model a third of its speed in attention over empty slots)


def decode_static(model, ids, mask, n: int, max_new_tokens: int, temp: float, greedy: bool, warpers, eos: int,
                  pad: int, stop=None, check=lambda: None, processors=(), forward=None):
    """:func:`corl.builtin.hf.backend.decode.decode` (same arguments and result) with a static KV cache.

    ``forward(cache, cached, inputs)`` runs one decode step, ``model(**inputs)`` (the default, eager),
    e.g. a :class:`CompiledStep`; ``cached`` is how many positions ``cache`` holds before the step."""
    import torch
    from transformers import StaticCache
    from transformers.cache_utils import DynamicLayer

    params = dynamic._forward_params(model)
    cache_key = "cache" if "cache" in params else "past_key_values"
    config = model.config.get_text_config(decoder=True)
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()) or getattr(config, "sliding_window", None):
        return dynamic.decode(model, ids, mask, n, max_new_tokens, temp, greedy, warpers, eos, pad, stop, check,
                              processors)
    check()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding; GPT-2 needs them explicit
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
    prefilled = getattr(out, cache_key)
    layers = getattr(prefilled, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return dynamic.decode(model, ids, mask, n, max_new_tokens, temp, greedy, warpers, eos, pad, stop, check,
                              processors)
    prompt_len = ids.shape[1]
    width = prompt_len + max_new_tokens
    if forward is not None and getattr(forward, "bucket", 1) > 1:
        width = -(-width // forward.bucket) * forward.bucket
    cache = StaticCache(config=model.config, max_cache_len=width)
    for static, layer in zip(cache.layers, layers):  # each prompt's keys and values, n copies, written once
        static.update(layer.keys.repeat_interleave(n, 0), layer.values.repeat_interleave(n, 0))
    del prefilled, layers
    rows = len(ids) * n
    full = torch.ones(rows, width, dtype=mask.dtype, device=mask.device)
    full[:, :prompt_len] = mask.repeat_interleave(n, 0)  # (unwritten slots: hidden by the causal mask)
    logits = out.logits[:, -1].float().repeat_interleave(n, 0)
    last = positions[:, -1:].repeat_interleave(n, 0)
    del out
    run = forward or (lambda cache, cached, inputs: model(**inputs))
    cached = prompt_len

    def step(token):  # one token per row, every tensor the same shape at every step
        nonlocal last, cached
        last = last + 1
        out = run(cache, cached, dict(input_ids=token[:, None], attention_mask=full, position_ids=last,
                                      use_cache=True, **{cache_key: cache}))
        cached += 1
        return out.logits[:, -1].float()

    return dynamic.loop(logits, ids.repeat_interleave(n, 0), max_new_tokens, temp, greedy, warpers, processors, eos,
                        pad, stop, check, step)


class CompiledStep:
    """One model's decode step through ``torch.compile`` (whole graph), eager after a failure.

    Parameters are read at every call (no freezing), so the policy's updates are seen. The first
    call compiles (or loads the compiled code from ``$CORL_CACHE_DIR/inductor``); a compile or run
    failure logs one line and this and every later step run eagerly, the cache set back to where the
    failed step found it."""

    bucket = BUCKET

    def __init__(self, model, log=None, who: str = "hf_static"):
        import torch

        from corl.builtin.hf.models.catalog import cache_root

        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
        self.model, self.who = model, who
        self.log = log or logging.getLogger("corl").info
        # static shapes first; another row count or cache length compiles a graph with that size
        # symbolic (torch's automatic dynamic shapes): at most three graphs serve every shape
        self.compiled = torch.compile(_call, backend=BACKEND, fullgraph=True)
        self.failed: str | None = None

    def __call__(self, cache, cached: int, inputs: dict):
        if self.failed is None:
            try:
                return self.compiled(self.model, **inputs)
            except Exception as error:  # noqa: BLE001 - any compiler or platform failure: eager from here on
                first = (str(error).strip().splitlines() or [""])[0][:200]
                self.failed = f"{type(error).__name__}: {first}"
                self.log(f"{self.who}: torch.compile of the decode step failed ({self.failed}); decoding eagerly")
                for layer in cache.layers:  # (a step that ran part-way: the cache as the step found it)
                    layer.cumulative_length.fill_(cached)
        return self.model(**inputs)


def _call(model, **inputs):
    return model(**inputs)


class HFStaticSampler(hf_sampler.HFSampler):
    """The ``hf`` sampler, its decode step on a static KV cache (:func:`decode_static`), compiled on request."""

    def __init__(self, config, ctx=None):
        super().__init__(config, ctx)
        self._log = ctx.log if ctx is not None else None
        self._who = f"agent {ctx.agent_name!r}" if ctx is not None and ctx.agent_name else "hf_static"
        self._steps: dict[int, CompiledStep] = {}  # id(model): its compiled step

    def decode(self, model, *args, **kwargs):
        forward = None
        if getattr(self.config, "compile", False):
            step = self._steps.get(id(model))
            if step is None or step.model is not model:
                step = self._steps[id(model)] = CompiledStep(model, self._log, self._who)
            forward = step
        return decode_static(model, *args, forward=forward, **kwargs)

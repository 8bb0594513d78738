"""The ``hf_static`` sampler: the ``hf`` sampler with a fixed-shape decode step over a preallocated
KV cache (opt-in: ``sampler.type = "hf_static"``).

:func:`decode_static` prefills each prompt once, as :func:`corl.builtin.hf.backend.decode.decode`
does, then copies the prompts' keys and values, each repeated ``n`` times, into a transformers
``StaticCache`` sized for the prompt and every new token. Each decode step then has the same
shapes: one token per row, the whole ``[rows, cache length]`` attention mask (the slots not yet
written are hidden by the causal mask), the cache written in place; no tensor grows. That is the
shape a compiler needs; the step is a parameter (``forward``), so ``bench/bounds.py`` measures it
through ``torch.compile``. Compiled, it was slower than eager for SmolLM2 on the CPUs measured
(docs/results/performance.md), so no recipe key compiles it. Greedy tokens equal ``generate()``'s and
the sampling-time log-probs equal the training forward's (``tests/unit/builtin/hf/test_static_decode.py``).

Models whose cache is not plain full attention (sliding-window layers: Gemma 2 / 3, Mistral) take
the dynamic loop.
"""

from __future__ import annotations

from corl.builtin.hf.backend import decode as dynamic
from corl.builtin.hf.backend import sampler as hf_sampler


def decode_static(model, ids, mask, n: int, max_new_tokens: int, temp: float, greedy: bool, warpers, eos: int,
                  pad: int, stop=None, check=lambda: None, processors=(), forward=None, bucket: int = 1):
    """:func:`corl.builtin.hf.backend.decode.decode` (same arguments and result) with a static KV cache.

    ``forward(**inputs)`` runs each decode step (default: ``model``), e.g. ``model`` through
    ``torch.compile`` (``bench/bounds.py``); ``bucket`` rounds the cache length up to a multiple of
    it (fewer shapes to compile)."""
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
    width = -(-(prompt_len + max_new_tokens) // bucket) * bucket  # (rounded up to a multiple of the bucket)
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
    forward = model if forward is None else forward  # (a compiled module has no truth value)

    def step(token):  # one token per row, every tensor the same shape at every step
        nonlocal last
        last = last + 1
        out = forward(input_ids=token[:, None], attention_mask=full, position_ids=last, use_cache=True,
                      **{cache_key: cache})
        return out.logits[:, -1].float()

    return dynamic.loop(logits, ids.repeat_interleave(n, 0), max_new_tokens, temp, greedy, warpers, processors, eos,
                        pad, stop, check, step)


class HFStaticSampler(hf_sampler.HFSampler):
    """The ``hf`` sampler, its decode step on a static KV cache (:func:`decode_static`)."""

    def decode(self, model, *args, **kwargs):
        return decode_static(model, *args, **kwargs)

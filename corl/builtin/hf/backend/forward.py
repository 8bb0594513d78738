"""The update's forward pass of an hf agent: the body's last hidden states at the positions that
predict each completion token (``[rows, T, width]``), without the output layer, which the agent
applies chunk by chunk.

**Shared prompts.** GRPO draws n completions of every prompt, and the n rows of a prompt hold the
same prompt tokens. Run whole, the body would compute the prompt n times, in forward and in
backward. Instead each distinct prompt of the micro-batch goes through the body once, and its
keys and values are handed to each of its completions (what the sampler's prefill does): the
prompt's compute and activations are not repeated n times, and the gradients through the shared
keys and values add up exactly as they would over n copies. The completions read the prompt's keys
and values from a cache that never grows (each layer returns prompt + new keys and stores nothing),
so a layer recomputed in backward (``gradient_checkpointing``) reads the same prompt again; the
layers are told so (transformers otherwise drops a cache from a checkpointed layer, since its usual
cache grows on every call). Sliding-window layers (Gemma 2 / 3, Mistral) share too: the prompt's
keys and values are handed over whole and the model's own sliding mask hides those beyond the
window, as in one pass. Only a prompt longer than its window (whose cache would keep the window's
tail alone: known from the config before any pass, and checked on the cache after the prompt pass),
or a cache of another kind, runs its rows whole.

**Sharded models** run through their root (whose forward gathers the root's own weights:
embeddings, final norm, output layer) with the output layer on one position only; the body's
output is caught on its way out.
"""

from __future__ import annotations

import contextlib
import functools
import inspect


def hidden_states(model, ids, mask, prompt_len: int, *, root: bool, share: bool, body=None):
    """``[rows, T, width]``: the body's output at positions ``prompt_len - 1 .. end - 1``; ``body`` runs
    the body in place of the model's own (the compiled one of :mod:`corl.builtin.hf.backend.compiled`)."""
    import torch

    if share:
        flat = torch.cat([ids[:, :prompt_len], mask[:, :prompt_len]], 1)
        distinct, inverse = torch.unique(flat, dim=0, return_inverse=True)
        # (a sharded model's passes are collective: every rank of its group takes the same two, so its
        # prompt pass runs even where the prompts outgrow a window, whatever the other ranks' lengths)
        if root or (len(distinct) < len(ids) and not _outgrows_window(model, prompt_len)):
            return _shared(model, ids, mask, prompt_len, distinct, inverse, root, body)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding; GPT-2 needs them explicit
    hidden, _ = _body(model, root, body, input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
    return hidden[:, prompt_len - 1: -1]


def _shared(model, ids, mask, prompt_len: int, distinct, inverse, root: bool, body):
    import torch

    p_ids, p_mask = distinct[:, :prompt_len], distinct[:, prompt_len:]
    p_positions = (p_mask.cumsum(-1) - 1).clamp(min=0)
    with _checkpointed_layers(model, prompt=True):
        prompt, cache = _body(model, root, body, input_ids=p_ids, attention_mask=p_mask, position_ids=p_positions,
                              use_cache=True)
    if cache is None or not all(_whole_prompt(layer, prompt_len) for layer in getattr(cache, "layers", [None])):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden, _ = _body(model, root, body, input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        return hidden[:, prompt_len - 1: -1]
    for layer in cache.layers:  # each row gets its prompt's keys and values (gradients add up)
        layer.keys, layer.values = _rows_of(layer.keys, inverse), _rows_of(layer.values, inverse)
        layer.__class__ = _prompt_layer(type(layer))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, prompt_len:]
    with _checkpointed_layers(model, prompt=False):
        completion, _ = _body(model, root, body, input_ids=ids[:, prompt_len:], attention_mask=mask,
                              position_ids=positions, use_cache=True, **{_cache_key(model): cache})
    return torch.cat([_rows_of(prompt[:, -1:], inverse), completion[:, :-1]], 1)


def _rows_of(x, index):
    """``x[index]`` along the first dimension, whose backward adds each row's gradient into its source
    row with ``index_add_`` on a contiguous copy. Indexing's own backward (an accumulating
    ``index_put_``) and ``index_select``'s (a ``scatter_add_``) are slow on the strided gradients that
    the attention's concatenation hands back: on the zoo's update this backward takes about half
    their time. The sums run in the same row order: the gradients are bit for bit the same."""
    return _row_gather().apply(x, index)


@functools.cache
def _row_gather():
    import torch

    class RowGather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, index):
            ctx.save_for_backward(index)
            ctx.rows = x.shape[0]
            return x.index_select(0, index)

        @staticmethod
        def backward(ctx, grad):
            (index,) = ctx.saved_tensors
            return grad.new_zeros((ctx.rows, *grad.shape[1:])).index_add_(0, index, grad.contiguous()), None

    return RowGather


def _outgrows_window(model, prompt_len: int) -> bool:
    """Whether the model's sliding-window layers would keep only the tail of a prompt this long (they
    keep the last ``window - 1`` positions), read from its config: then the rows run whole without a
    wasted prompt pass. A config that does not say so is caught after the pass (``_whole_prompt``)."""
    config = model.config.get_text_config()
    window = getattr(config, "sliding_window", None)
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or ())
    return sliding and bool(window) and prompt_len >= window


def _whole_prompt(layer, prompt_len: int) -> bool:
    """Whether a cache layer holds every prompt position, as a plain layer does; a sliding-window
    layer does while the prompt is shorter than its window (it keeps the last ``window - 1``)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if type(layer) is DynamicLayer:
        return True
    return type(layer) is DynamicSlidingWindowLayer and layer.keys.shape[-2] == layer.cumulative_length == prompt_len


@functools.cache
def _prompt_layer(base: type):
    """``base`` (a plain or sliding-window cache layer) holding a prompt's keys and values that never
    grows: ``update`` returns the prompt's and the new ones together and stores nothing, so calling it
    again (a layer recomputed in backward) gives the same result. The layer's mask sizes are its
    base's: for a sliding layer holding a whole prompt shorter than the window, every prompt position
    from offset 0, the keys this ``update`` returns."""

    class PromptLayer(base):
        def update(self, key_states, value_states, *args, **kwargs):
            import torch

            return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    PromptLayer.__name__ = PromptLayer.__qualname__ = f"Prompt{base.__name__}"
    return PromptLayer


@contextlib.contextmanager
def _checkpointed_layers(model, *, prompt: bool):
    """transformers checkpoints a layer in train mode and then drops the cache (its usual cache grows
    on every call, and would grow again on recompute); its models turn ``use_cache`` off likewise.
    The prompt pass writes the cache: its layers run uncheckpointed (the prompts are few). The
    completions only read the prompt's cache, the same on recompute: their layers are told the cache
    may stay (``_can_checkpoint_with_cache``). Done with the ``training`` flags of the layers and
    models themselves (no dropout lives there), for the duration of the pass; nothing when not training."""
    found = [m for m in model.modules() if m.training and getattr(m, "gradient_checkpointing", False) is True]
    layers = [m for m in found if hasattr(type(m), "_can_checkpoint_with_cache")]
    models = [m for m in found if not hasattr(type(m), "_can_checkpoint_with_cache")]
    quiet = models + layers if prompt else models
    for module in quiet:
        module.training = False
    for layer in [] if prompt else layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for module in quiet:
            module.training = True
        for layer in [] if prompt else layers:
            del layer._can_checkpoint_with_cache


def _body(model, root: bool, body, **inputs):
    """The body's last hidden states and the KV cache (None without ``use_cache``)."""
    body = body_of(model) if body is None else body
    key = _cache_key(model)
    if not root:
        out = body(**inputs)
        return out.last_hidden_state, getattr(out, key, None)
    caught = []
    hook = body.register_forward_hook(lambda module, args, out: caught.append(out.last_hidden_state))
    try:
        out = model(**inputs, logits_to_keep=1)
    finally:
        hook.remove()
    return caught[0], getattr(out, key, None)


def body_of(model):
    """The model without its output layer: the decoder (``base_model`` where there is no ``get_decoder``)."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.base_model


def _cache_key(model) -> str:
    """transformers 5 names the KV cache ``cache``; earlier versions ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

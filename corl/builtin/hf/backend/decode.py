"""The hf sampler's decode loop: N samples per prompt with a KV cache, each prompt prefilled once."""

from __future__ import annotations


def processors(cfg) -> list:
    """transformers' logits processors that ``generate`` applies also when greedy (the repetition
    penalty), from a sampler config; each is called with the rows' ids so far, prompt included."""
    from transformers import RepetitionPenaltyLogitsProcessor

    penalty = getattr(cfg, "repetition_penalty", 1.0)
    return [RepetitionPenaltyLogitsProcessor(penalty)] if penalty != 1.0 else []


def warpers(cfg) -> list:
    """transformers' top-k / top-p / min-p logits warpers, in ``generate``'s order (sampling only)."""
    from transformers import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = [TopKLogitsWarper(cfg.top_k)] if cfg.top_k else []
    out += [TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1.0 else []
    return out + ([MinPLogitsWarper(cfg.min_p)] if getattr(cfg, "min_p", 0.0) > 0 else [])


def decode(model, ids, mask, n: int, max_new_tokens: int, temp: float, greedy: bool, warpers, eos: int, pad: int,
            stop=None, check=lambda: None, processors=()):
    """N samples for each of a batch of left-padded prompts, with a KV cache.

    Each prompt is prefilled once and its cache repeated ``n`` times (``generate`` prefills every
    sample's copy); the loop ends as soon as every row has sampled EOS or a stop string. Returns
    ``(ids, logps, mask)``, each ``[rows, T]``: the completion ids (pad after a row's end), their
    sampling-time log-probs from the raw logits at ``temp`` (``processors`` (the repetition penalty,
    also greedy) and ``warpers`` (top-k / top-p / min-p, sampling only) shape what is drawn, never the
    recorded log-prob, which stays the training forward's), and the mask of each row's own tokens,
    up to and including the
    EOS or stop-string token that ended it. One step's ``[rows, vocab]`` logits exist at a time.
    ``check()`` runs before every forward pass (a run's stop: :class:`corl.context.StopToken`).
    """
    import torch

    check()
    params = _forward_params(model)
    cache_key = "cache" if "cache" in params else "past_key_values"
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding; GPT-2 needs them explicit
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
    cache = getattr(out, cache_key)
    if n > 1:
        cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].float().repeat_interleave(n, 0)
    mask, last = mask.repeat_interleave(n, 0), positions[:, -1:].repeat_interleave(n, 0)
    del out  # (the prompt pass's logits: only the last position's are kept)

    def step(token):  # the next position's logits: the cache grows by one token per row
        nonlocal cache, mask, last
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        last = last + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=last, use_cache=True,
                    **{cache_key: cache})
        cache = out[cache_key]  # (a transformers ModelOutput reads as a mapping too)
        return out.logits[:, -1].float()

    return loop(logits, ids.repeat_interleave(n, 0), max_new_tokens, temp, greedy, warpers, processors, eos, pad,
                stop, check, step)


def loop(logits, prompts, max_new_tokens: int, temp: float, greedy: bool, warpers, processors, eos: int, pad: int,
         stop, check, step):
    """The decode loop both KV caches share: from the prompts' last logits (``[rows, vocab]``, rows =
    ``prompts``' rows, each prompt repeated per sample), pick a token per row, record its log-prob,
    and ask ``step(token)`` for the next logits until every row has ended or ``max_new_tokens``.
    Returns what :func:`decode` returns."""
    import torch

    done = torch.zeros(len(logits), dtype=torch.bool, device=logits.device)
    tokens, logps, live = [], [], []
    history = prompts if processors else None  # what a repetition penalty looks back on
    for t in range(max_new_tokens):
        token, scaled = pick(logits, temp, greedy, warpers, processors, history)
        live.append(~done)
        token = token.masked_fill(done, pad)
        tokens.append(token)
        if history is not None:
            history = torch.cat([history, token[:, None]], 1)
        logps.append(scaled.log_softmax(-1).gather(1, token[:, None]).squeeze(1))
        done = done | (token == eos)
        if stop is not None:
            done = done | stop(torch.stack(tokens, 1))
        if t == max_new_tokens - 1 or bool(done.all()):
            break
        check()
        logits = step(token)
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(live, 1)


def pick(logits, temp: float, greedy: bool, warpers, processors, history):
    """One decode step's token per row, and the logits at ``temp`` its recorded log-prob is read from:
    ``processors`` (a repetition penalty, looking back on ``history``; also greedy) and ``warpers``
    (top-k / top-p / min-p, sampling only) shape what is drawn, never the recorded log-prob."""
    scaled = logits / temp if temp != 1.0 else logits  # (x / 1 is x: a vocabulary-sized pass saved)
    shaped = scaled
    for process in processors:  # (a penalty divides or multiplies a logit: the same before or after 1/temp)
        shaped = process(history, shaped)
    if greedy:
        return shaped.argmax(-1), scaled
    for warp in warpers:
        shaped = warp(None, shaped)
    return draw(shaped), scaled


def draw(logits):
    """One token per row from ``softmax(logits)``, by inverting the row's CDF at one uniform draw.

    ``torch.multinomial`` draws an exponential for every vocabulary entry (its no-replacement path,
    and on CPU its replacement path costs the same): ~40 ms a step for 32 rows x 49k tokens on one
    core, against ~3 ms here. The CDF is summed in float64, so a token's chance is its probability
    to ~1e-16; a token of probability 0 (cut by top-k / top-p) is never drawn.
    """
    import torch

    cdf = logits.softmax(-1).double().cumsum(-1)
    u = torch.rand(len(cdf), 1, dtype=torch.float64, device=cdf.device) * cdf[:, -1:]
    token = torch.searchsorted(cdf, u, right=True).squeeze(1)  # first entry whose CDF exceeds u
    if bool((token >= cdf.shape[1]).any()):  # u rounded up to the total: never in practice
        token = torch.where(token < cdf.shape[1], token, logits.argmax(-1))
    return token


class StopAt:
    """Rows whose completion so far ends in a stop string (transformers' StopStringCriteria, which
    also catches a stop string split across tokens)."""

    def __init__(self, tokenizer, stop):
        from transformers import StopStringCriteria

        self.criteria = StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))

    def __call__(self, completion):
        return self.criteria(completion, None)


def _forward_params(model) -> frozenset:
    import inspect

    return frozenset(inspect.signature(model.forward).parameters)


"""The one supervised trainer the zoo uses to warm-start its tiny models (text and vision-language).

Loss on the answer and EOS only, AdamW (weight decay 0.01), linear warmup (5% of the steps unless
``warmup_steps`` says) then cosine decay or a constant rate, gradient clipping at 1.0, a seeded data order. Progress goes through :mod:`corl.logs`
(a bar on a terminal, a logged line every 10% elsewhere).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from corl import logs
from corl.builtin.hf.models.config import ZooConfig


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Build and train under ``seed`` in a forked RNG: the caller's stream is left untouched."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def right_padded(sequences: Sequence[Sequence[int]], answer_lengths: Sequence[int], pad: int):
    """``(input_ids, labels, mask)`` for sequences whose last ``answer_lengths[i]`` tokens are the
    target (positions start at 0: right padding; -100 labels everywhere else)."""
    import torch

    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad)
    labels = torch.full((len(sequences), width), -100)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, (seq, n) in enumerate(zip(sequences, answer_lengths)):
        input_ids[i, : len(seq)] = torch.tensor(list(seq))
        labels[i, len(seq) - n: len(seq)] = torch.tensor(list(seq[len(seq) - n:]))
        mask[i, : len(seq)] = 1
    return input_ids, labels, mask


def lr_factor(config: ZooConfig) -> Callable[[int], float]:
    """Step -> multiple of ``config.lr``: linear warmup, then cosine decay to 0 or constant."""
    warmup = config.warmup_steps or max(1, config.steps // 20)
    if config.schedule == "constant":
        return lambda s: min((s + 1) / warmup, 1.0)
    return lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * s / config.steps)))


def train(model, input_ids, labels, mask, config: ZooConfig, description: str,
          extra: Callable[[Any], dict] | None = None, check: Callable[[], None] = lambda: None):
    """``config.steps`` (or ``config.stop``) supervised steps of ``config.batch_size`` rows drawn with ``config.seed``;
    ``extra(rows)`` adds per-row model inputs (a vision-language model's images); ``check()`` runs
    before every step (the run's ``ctx.stop.check``: a signal abandons the warm-start there)."""
    import torch

    optim = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_factor(config))
    gen = torch.Generator().manual_seed(config.seed)
    model.train()
    steps = config.stop or config.steps  # (stop: the schedule still spans config.steps)
    for _ in logs.track(range(steps), description, steps, log=logs.get("zoo")):
        check()
        rows = torch.randint(len(input_ids), (config.batch_size,), generator=gen)
        out = model(input_ids=input_ids[rows], attention_mask=mask[rows], labels=labels[rows],
                    **(extra(rows) if extra else {}))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        optim.zero_grad(set_to_none=True)
    return model.eval()

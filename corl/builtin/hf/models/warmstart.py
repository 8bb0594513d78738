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


# ---------------------------------------------------------------------------------------------
# Warm-ups of any model (pypi:, gguf:, a folder): the zoo's protocol for real models


def source_fingerprint(source: str) -> str:
    """A cache key of a model folder (its config, and each weight file's name, size, first and last
    MiB) or, for a hub id, the id."""
    import hashlib
    from pathlib import Path

    folder = Path(source)
    if not folder.is_dir():
        return hashlib.sha256(source.encode()).hexdigest()[:16]
    h = hashlib.sha256((folder / "config.json").read_bytes() if (folder / "config.json").exists() else b"")
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with path.open("rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def warm_up(source: str, settings, examples: Sequence[tuple[str, str]], *, add_special_tokens: bool,
            freeze_embeddings: bool, who: str, trust_remote_code: bool = False,
            log: Callable[[str], None] = logs.logger.info, check: Callable[[], None] = lambda: None):
    """The folder of model ``source`` after ``settings.steps`` supervised steps on ``examples``
    (rendered prompt, answer), each taught as ``settings.target`` then EOS; built once and cached
    under the model's and the warm-up's fingerprint. Returns ``(folder, record)``: ``record`` (the
    fingerprints, settings and example count) goes into the run's log and the folder's warm_up.json."""
    import hashlib
    import json
    import time
    from pathlib import Path

    import attrs

    from corl.atomic import atomic_folder
    from corl.builtin.hf.models.catalog import cache_root
    from corl.errors import CorlError

    if not examples:
        raise CorlError(f"{who}: warm_up.steps = {settings.steps} but the task's labeled seed split is empty")
    model_fp = source_fingerprint(source)
    key = json.dumps([model_fp, attrs.asdict(settings), add_special_tokens, freeze_embeddings, list(examples)])
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    record = {"base": source, "base_fingerprint": model_fp, "warm_up_fingerprint": fp, "examples": len(examples),
              **attrs.asdict(settings)}
    folder = cache_root() / "warm" / f"{Path(source).name}-{fp}"
    if (folder / "config.json").exists():
        try:
            return folder, json.loads((folder / "warm_up.json").read_text())
        except (OSError, ValueError):
            return folder, record
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    log(f"{who}: warming up {settings.steps} supervised steps (lr {settings.lr}, batch {settings.batch_size}) on "
        f"{len(examples)} labeled seed examples (once; cached in {folder.parent})")
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    if tokenizer.eos_token_id is None:
        raise CorlError(f"{who}: the tokenizer has no EOS token: a warm-up cannot teach the model to stop")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    answers = [tokenizer(settings.target.format(answer=a), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
               for _, a in examples]
    sequences = [tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"] + a for (p, _), a in zip(examples, answers)]
    batch = right_padded(sequences, [len(a) for a in answers], pad)
    config = ZooConfig(steps=settings.steps, batch_size=settings.batch_size, lr=settings.lr, seed=settings.seed,
                       schedule="constant", warmup_steps=1)
    with seeded(settings.seed):
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, trust_remote_code=trust_remote_code)
        if freeze_embeddings:  # as the agent trains: no gradients or AdamW state for the (tied) embeddings
            model.get_input_embeddings().weight.requires_grad_(False)
        model = train(model, *batch, config, f"warm-up {who}", check=check)
    for p in model.parameters():
        p.requires_grad_(True)
    record["seconds"] = round(time.perf_counter() - start, 1)
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / "warm_up.json").write_text(json.dumps(record, indent=2))
    log(f"{who}: warmed up in {record['seconds']:.0f}s -> {folder}")
    return folder, record

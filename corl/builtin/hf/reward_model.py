"""``[[shaping]] type = "reward_model"``: a learned reward model scores every completion.

A sequence-classification model (``AutoModelForSequenceClassification``, one output: a scalar
score, as TRL's reward models) is loaded from a local folder once and scores ``prompt +
completion`` (or the pair as a chat, with ``chat = true``) in batches, under ``torch.no_grad``, on
the device of the agent whose completions it scores (the rollout's tensors say which; a copy per
device). Its value is the raw score (the term's ``weight`` scales it). As a shaping term it adds
to the peer reward; with ``run.peer_reward = false`` it is the whole reward: the judge-style
baseline in which a trained model, not a peer's vote, pays every completion.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs

from corl.errors import CorlError
from corl.types import Rollout

v = attrs.validators


def _folder(instance, attribute, value: str) -> None:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ValueError("no such folder")
    if not (path / "config.json").is_file():
        raise ValueError("not a Hugging Face model folder (no config.json)")


@attrs.frozen
class RewardModelConfig:
    model: str = attrs.field(validator=_folder, metadata={
        "help": "a local folder holding a sequence-classification model with one output (a reward model, as "
                "AutoModelForSequenceClassification loads it) and its tokenizer"})
    batch_size: int = attrs.field(default=16, validator=v.ge(1), metadata={
        "help": "completions scored per forward pass"})
    max_length: int = attrs.field(default=1024, validator=v.ge(8), metadata={
        "help": "prompt + completion tokens kept (the prompt's start is cut first, as TRL truncates left)"})
    chat: bool = attrs.field(default=False, metadata={
        "help": "score the pair as a chat (user: prompt, assistant: completion) through the reward model's chat "
                "template; false: the plain text prompt + completion"})
    dtype: str = attrs.field(default="float32", validator=v.in_(("float32", "bfloat16", "float16")), metadata={
        "help": "the reward model's weights' dtype"})
    device: str = attrs.field(default="", metadata={
        "help": "where it runs; empty: the device of the agent whose completions it scores"})


class RewardModel:
    """Scores completions with a reward model (see the module doc)."""

    def __init__(self, config: RewardModelConfig, ctx: Any = None):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from corl.builtin.hf.backend.common import quiet_libraries

        quiet_libraries()
        self.config = config
        folder = str(Path(config.model).expanduser())
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[config.dtype]
            model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise CorlError(f"reward model {config.model}: {str(exc).strip().splitlines()[0]}") from None
        if model.config.num_labels != 1:
            raise CorlError(f"reward model {config.model}: has {model.config.num_labels} outputs (num_labels); a "
                            "reward model gives one score per text (num_labels = 1)")
        if self.tokenizer.pad_token is None:  # a batch needs padding; the score is read at the last real token
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side, self.tokenizer.truncation_side = "right", "left"
        self.models = {"cpu": model.eval().requires_grad_(False)}

    def _model(self, device: str):
        if device not in self.models:  # one copy per device its agents sample on
            self.models[device] = copy.deepcopy(self.models["cpu"]).to(device)
        return self.models[device]

    def texts(self, prompts: list[str], completions: list[str]) -> list[str]:
        if not self.config.chat:
            return [p + c for p, c in zip(prompts, completions)]
        return [self.tokenizer.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": c}],
                                                   tokenize=False) for p, c in zip(prompts, completions)]

    def scores(self, prompts: list[str], completions: list[str], device: str = "cpu") -> list[float]:
        """One score per (prompt, completion), in batches of ``batch_size``."""
        import torch

        model, texts, out = self._model(device), self.texts(prompts, completions), []
        for start in range(0, len(texts), self.config.batch_size):
            enc = self.tokenizer(texts[start: start + self.config.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.config.max_length).to(device)
            with torch.no_grad():
                out += model(**enc).logits[:, 0].float().tolist()
        return out

    def score(self, rollout: Rollout, answers, verifier, truth=None) -> list[list[float]]:
        n = rollout.n
        prompts = [p.text for p in rollout.prompts for _ in range(n)]
        flat = self.scores(prompts, [t for row in rollout.texts for t in row], self.config.device or _device_of(rollout))
        return [flat[p * n: (p + 1) * n] for p in range(len(rollout.texts))]


def _device_of(rollout: Rollout) -> str:
    """The device of the agent's sampled tokens (its rollout's batch), else the CPU."""
    return "cpu" if rollout.batch is None else str(rollout.batch.completion_ids.device)

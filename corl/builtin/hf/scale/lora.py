"""Low-rank adapters (peft LoRA) on an hf agent: only the adapters train.

peft injects its LoRA layers into the agent's own transformers model, in place; the agent keeps
sampling and training that model, and keeps the ``PeftModel`` around it for what only peft does:
switching the adapters off (the KL reference is the base model, no second copy) and writing the
adapter folder. Engines get merged weights (``W + scale * B @ A``, computed per layer and never
written back, so the trained base stays exact); the export writes the adapter folder and, with
``lora.export_merged``, a plain merged model beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from corl.builtin.hf.scale.sharding import full
from corl.errors import CorlError

v = attrs.validators
PREFIX = "base_model.model."  # the PeftModel's names of the wrapped model's tensors


def _needs_peft(instance, attribute, value: int) -> None:
    import importlib.util

    if value and importlib.util.find_spec("peft") is None:
        raise ValueError("adapters need the peft package (not installed); install it with pip install 'co-rl[lora]'")


def _module_names(instance, attribute, value) -> None:
    if any(not name or not all(c.isalnum() or c in "_.-" for c in name) for name in value):
        raise ValueError("must be module names such as q_proj, v_proj")


@attrs.frozen
class LoraSettings:
    """Low-rank adapters (peft LoRA) instead of full fine-tuning: only the adapters train."""

    rank: int = attrs.field(default=0, validator=[v.ge(0), _needs_peft], metadata={
        "help": "adapter rank r (0: no adapters, every weight trains)"})
    alpha: float = attrs.field(default=16.0, validator=v.gt(0), metadata={
        "help": "adapter scale numerator (updates are scaled by alpha / rank)"})
    target_modules: tuple[str, ...] = attrs.field(default=(), validator=_module_names, metadata={
        "help": "names of the modules to adapt, e.g. [\"q_proj\", \"v_proj\"]; empty: every linear layer but the "
                "output head"})
    dropout: float = attrs.field(default=0.0, validator=[v.ge(0), v.lt(1)], metadata={
        "help": "dropout on the adapters' input in the update's forward (never while sampling); above 0 the "
                "first policy ratio is no longer exactly 1"})
    export_merged: bool = attrs.field(default=False, metadata={
        "help": "the final export writes the merged model (base + adapters, a plain HF folder) into merged/ "
                "beside the adapter"})


def add_adapters(model, settings: LoraSettings, who: str):
    """The ``PeftModel`` around ``model``, with LoRA layers injected into ``model`` itself."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise CorlError(f"{who}: lora needs the peft package; install it with pip install 'co-rl[lora]'") from None
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout, bias="none",
                        target_modules=list(settings.target_modules) or "all-linear", task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise CorlError(f"{who}: lora.target_modules: {str(exc).strip().splitlines()[0]}") from None


def is_adapter(name: str) -> bool:
    return ".lora_" in name


def dropouts(model) -> list[Any]:
    """The adapters' dropout modules (nn.Identity where dropout is 0)."""
    import torch

    return [m for name, m in model.named_modules() if ".lora_dropout." in f".{name}." and isinstance(m, torch.nn.Dropout)]


def merged_weights(model) -> Iterator[tuple[str, Any]]:
    """The base model's parameters under their Hugging Face names, each adapted layer's weight
    merged with its adapter, gathered one at a time (every rank of a sharded agent iterates)."""
    from peft.tuners.lora import LoraLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    for name, p in model.named_parameters():
        if is_adapter(name):
            continue
        owner, _, leaf = name.rpartition(".base_layer.")
        weight = full(p.detach())
        if owner and leaf == "weight":
            weight = weight + delta(layers[owner]).to(weight.dtype)
        yield name.replace(".base_layer.", "."), weight


def delta(layer) -> Any:
    """``scale * B @ A`` of ``layer``'s (active) adapter, in float32 (transposed for GPT-2's Conv1D)."""
    name = layer.active_adapters[0]
    b, a = full(layer.lora_B[name].weight.detach()).float(), full(layer.lora_A[name].weight.detach()).float()
    out = (b @ a) * layer.scaling[name]
    return out.T if getattr(layer, "fan_in_fan_out", False) else out


ADAPTER_FILE = "adapter_model.safetensors"  # peft's names: PeftModel.from_pretrained(base, folder) reads the folder
LEGACY_FILE = "adapters.safetensors"  # step checkpoints of corl before 0.x: the adapters under the model's own names


def name_base(peft_model, source: str) -> None:
    """The adapter's base as the recipe names it (``zoo:llama-add3``, a hub id), not the absolute
    folder it was loaded from: the adapter folder then says what it adapts on any machine."""
    for config in peft_model.peft_config.values():
        config.base_model_name_or_path = source


def save_adapters(peft_model, model, tokenizer, path: str, keep: bool) -> None:
    """The adapter folder peft loads (``adapter_config.json``, ``adapter_model.safetensors``) and the
    tokenizer, written where ``keep`` (every rank of a sharded agent gathers)."""
    state = adapter_state(model, keep=keep)
    if not keep:
        return
    # peft's model card names the base by the model's name_or_path (the local folder it was loaded
    # from): while saving, it is the recipe's source, as the adapter config says
    loaded_from = model.name_or_path, model.config._name_or_path
    model.name_or_path = model.config._name_or_path = next(iter(peft_model.peft_config.values())).base_model_name_or_path
    try:
        # (no embedding layers: all-linear leaves them out, and "auto" would look the base up by its name)
        peft_model.save_pretrained(path, state_dict=state, save_embedding_layers=False)
    finally:
        model.name_or_path, model.config._name_or_path = loaded_from
    tokenizer.save_pretrained(path)


def load_adapters(peft_model, model, path: str, who: str) -> None:
    """Copy the adapters saved in ``path`` (an adapter folder, or a step checkpoint of an older corl)
    into ``model``'s LoRA layers, exactly; every adapter tensor must be there."""
    import torch
    from safetensors.torch import load_file

    folder = Path(path)
    if (folder / ADAPTER_FILE).is_file():
        from peft.utils import set_peft_model_state_dict

        result = set_peft_model_state_dict(peft_model, load_file(str(folder / ADAPTER_FILE)))
        missing = [k for k in result.missing_keys if is_adapter(k)]
        unexpected = list(result.unexpected_keys)
        if missing or unexpected:
            raise CorlError(f"{who}: {folder / ADAPTER_FILE} does not match this agent's adapters (lora.rank, "
                            f"lora.target_modules): {'missing' if missing else 'unexpected'} "
                            f"{(missing or unexpected)[:3]}")
        return
    if not (folder / LEGACY_FILE).is_file():
        raise CorlError(f"{who}: {folder} holds no {ADAPTER_FILE}: not an adapter folder of this agent")
    saved = load_file(str(folder / LEGACY_FILE))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_adapter(name):
                p.copy_(saved[name])


def adapter_state(model, keep: bool) -> dict[str, Any]:
    """The adapter tensors under the PeftModel's names, gathered; kept where ``keep``."""
    out = {}
    for name, p in model.named_parameters():
        if is_adapter(name):
            whole = full(p.detach())  # every rank takes part in the gather
            if keep:
                out[PREFIX + name] = whole.cpu()
    return out

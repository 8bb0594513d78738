"""Whether the update recomputes activations (``gradient_checkpointing = "auto"``): only when the
micro-batch's activations would not fit.

The estimate counts what an eager decoder layer keeps for its backward pass, per token: about ten
hidden-width tensors (norm inputs and outputs, queries / keys / values, the attention's output, the
residual stream), four of the MLP's width (gate, up, their activation and product), and, for an
attention that keeps its probabilities (eager), one row of them per head. In float32 bytes, times
layers, rows and tokens. It errs high (the CPU's fused attention keeps no probabilities); the update
runs without the recompute when the estimate takes at most half the memory available now (the
device's free memory on a GPU, ``MemAvailable`` on a CPU), since the rest of the step (weights,
gradients, AdamW's moments, the log-softmax chunks) also needs room.
"""

from __future__ import annotations

import os

FRACTION = 0.5  # of the available memory the activations may take without the recompute


def activation_bytes(config, rows: int, tokens: int) -> int:
    """The estimated bytes of activations one forward pass keeps for backward, ``rows`` x ``tokens``."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    width = text.hidden_size
    mlp = getattr(text, "intermediate_size", None) or 4 * width
    heads = getattr(text, "num_attention_heads", 1)
    per_token = 10 * width + 4 * mlp + heads * tokens
    return 4 * text.num_hidden_layers * rows * tokens * per_token


def available_bytes(device) -> int:
    """Memory free for the update now: the GPU's free memory, else the system's ``MemAvailable``."""
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def needed(estimate: int, available: int) -> bool:
    """Recompute when the activations would take more than ``FRACTION`` of what is available."""
    return estimate > FRACTION * available


def describe(who: str, recompute: bool, estimate: int, available: int, rows: int, tokens: int) -> str:
    """The run log's one line about the choice."""
    state = "on" if recompute else "off"
    verb = "would not fit in" if recompute else "fit in"
    return (f"{who}: gradient checkpointing {state} (auto): the update's activations, ~{estimate / 2**30:.2f} GiB "
            f"for {rows} rows x {tokens} tokens, {verb} half the {available / 2**30:.1f} GiB available")

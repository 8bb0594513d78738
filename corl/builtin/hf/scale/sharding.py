"""An hf agent sharded over its ranks with PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each decoder block (the model's ``_no_split_modules``) is its own FSDP unit and the model is the
root (embeddings, final norm, ``lm_head``: tied weights stay in one unit). Every rank holds
``1/size`` of each parameter, its gradient and its AdamW state, in float32; with mixed precision
a block is all-gathered in bf16 for its forward and backward and its gradient reduced in float32.

* **Update**: FSDP gathers block by block in forward and again in backward and reduce-scatters
  each block's gradient; gradients are *summed* over the group (the loss is already the group's
  token mean), never averaged. The passes are collective, so every rank of the group runs as many
  micro-batches as the others (the optimizer agrees on the count, ``ctx.group.max``).
* **Sampling** (:func:`gathered`): a decode step would gather every block again for each new
  token, a whole model's traffic per token; instead the sampler gathers the model once (in the
  compute dtype: bf16 with mixed precision), decodes on plain tensors, and frees the gathered
  copy. Ranks then decode as many steps as their own prompts need.
* **Weights for an engine** (:func:`full_tensors`): one parameter at a time, gathered on every
  rank and handed on, so the whole model never exists at once outside the engine.
* **Checkpoints** (:func:`save_shards` / :func:`load_shards`): each rank writes its own shard
  (safetensors, no gathering); resume with the same ranks. **Export** (:func:`full_state_dict`):
  gathered one tensor at a time, kept only on the group's first rank, which writes it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from corl.errors import CorlError


def wanted(config, group) -> bool:
    """Whether the agent is sharded: ``shard = "fsdp"``, or (``auto``) several ranks, mixed precision or CPU offload."""
    return config.shard == "fsdp" or group.size > 1 or config.mixed_precision or config.cpu_offload


def mesh_for(config, group, who: str):
    device = str(config.device).split(":")[0]
    if config.cpu_offload and device != "cuda":
        raise CorlError(f"{who}: cpu_offload keeps a GPU agent's shards in CPU memory; this agent's device is "
                        f"{config.device!r} (set device = \"cuda\" or cpu_offload = false)")
    mesh = group.mesh(device)
    if mesh is None:
        raise CorlError(f"{who}: sharding (shard, mixed_precision, cpu_offload) needs the device mesh a corl run "
                        "provides (ctx.group); build the agent inside a run")
    return mesh


def shard(model, mesh, *, mixed_precision: bool, cpu_offload: bool) -> None:
    """Apply FSDP2 to ``model`` in place: each decoder block, then the model as the root."""
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    options = {"mesh": mesh, "offload_policy": CPUOffloadPolicy() if cpu_offload else OffloadPolicy(),
               "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
               if mixed_precision else MixedPrecisionPolicy()}
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, **options)
    fully_shard(model, **options)
    for unit in units(model):
        unit.set_gradient_divide_factor(1.0)  # sum: each rank's loss is already divided by the group's tokens
        unit.set_force_sum_reduction_for_comms(True)  # plain SUM collectives (gloo has no PREMUL_SUM)
    # Settle the model as the root now: the sampler's first call may reach a block before the root.
    model._get_fsdp_state()._lazy_init()


def units(model) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model):
    """The whole model gathered on every rank of the group (all ranks enter together), for
    sampling: forward passes inside run locally, as many as each rank needs."""
    found = units(model)
    for unit in found:
        unit.set_reshard_after_forward(False, recurse=False)
    for unit in found:
        unit.unshard()
    try:
        yield
    finally:
        for unit in found:
            unit.reshard()
        for unit in found:  # blocks free their gathered weights after forward again; the root keeps them
            unit.set_reshard_after_forward(unit is not model, recurse=False)


def full(tensor):
    """The whole of a (possibly sharded) tensor: a collective for a DTensor. A CPU-offloaded shard
    of a GPU agent is moved to its GPU first, so the gather runs over NCCL, not gloo (not yet run
    on a GPU)."""
    if not hasattr(tensor, "full_tensor"):
        return tensor
    if tensor.device.type != tensor.device_mesh.device_type:
        tensor = tensor.to(tensor.device_mesh.device_type)
    return tensor.full_tensor()


def full_tensors(named):
    """``(name, whole tensor)`` for each of ``named``, gathered one at a time (every rank iterates)."""
    for name, tensor in named:
        yield name, full(tensor.detach())


def full_state_dict(model, keep: bool) -> dict[str, Any]:
    """The model's whole state dict on CPU where ``keep`` (the group's first rank), gathered
    tensor by tensor on every rank (a tied weight once)."""
    out, first = {}, {}
    for name, tensor in model.state_dict().items():
        if id(tensor) not in first:
            first[id(tensor)] = name
            whole = full(tensor)  # every rank takes part in the gather
            if keep:
                out[name] = whole.detach().cpu()
        elif keep:
            out[name] = out[first[id(tensor)]]
    return out


def _file(path: str, rank: int, size: int) -> Path:
    return Path(path) / f"model.shard-{rank:03d}-of-{size:03d}.safetensors"


def save_shards(named, path: str, rank: int, size: int) -> None:
    """This rank's shard of each ``(name, parameter)`` (safetensors; nothing gathered)."""
    from safetensors.torch import save_file

    Path(path).mkdir(parents=True, exist_ok=True)
    local = {name: (p.to_local() if hasattr(p, "to_local") else p).detach().cpu().contiguous() for name, p in named}
    save_file(local, str(_file(path, rank, size)))


def load_shards(named, path: str, rank: int, size: int, who: str) -> None:
    import torch
    from safetensors.torch import load_file

    file = _file(path, rank, size)
    if not file.is_file():
        raise CorlError(f"{who}: {path} holds no shard {file.name}: the checkpoint was written with another number "
                        "of ranks for this agent (resume with the same agents[i].ranks)")
    saved = load_file(str(file))
    named = dict(named)
    if set(saved) != set(named):
        raise CorlError(f"{who}: {file} does not match this model (e.g. {sorted(set(saved) ^ set(named))[:3]})")
    with torch.no_grad():
        for name, p in named.items():
            (p.to_local() if hasattr(p, "to_local") else p).copy_(saved[name])

"""An agent's group of ranks as its agent and optimizer see it (``ctx.group``), and the device
mesh a sharding engine (FSDP2) shards the agent over.

corl never creates torch's default process group (an inference engine in the same process sets up
its own, as if it were alone), so an agent's group is a standalone ``ProcessGroup`` built from the
launcher's store: gloo for CPU tensors (the optimizer's small sums, a CPU agent's shards) and NCCL
for a GPU agent's shards. It is registered under its own name, which is what DTensor's collectives
look groups up by, and wrapped in a one-dimensional ``DeviceMesh`` built without the default group
(``_init_backend=False``, the group's own rank). An agent on one rank gets a one-rank group on an
in-memory store, built only when its agent asks for a mesh (``shard = "fsdp"``, mixed precision or
CPU offload on one rank).

Private torch API used here (torch 2.13; the FSDP tests fail first if it changes):
``ProcessGroup._register_backend`` / ``_set_default_backend`` / ``_set_group_name`` (what
``torch.distributed.new_group`` does inside), ``torch._C._distributed_c10d._register_process_group``,
and ``DeviceMesh``'s ``_init_backend`` / ``_rank`` / ``_dim_group_names`` / ``_pg_registry``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from corl.context import OneRank

_names = itertools.count()


def process_group(name: str, store, rank: int, size: int, timeout, *, cuda: bool) -> Any:
    """A standalone ``ProcessGroup``: gloo for CPU tensors, NCCL for CUDA ones when ``cuda``."""
    import torch
    import torch.distributed as dist

    backend = dist.ProcessGroup.BackendType
    pg = dist.ProcessGroup(store, rank, size)
    pg._set_default_backend(backend.NCCL if cuda else backend.GLOO)
    pg._register_backend(torch.device("cpu"), backend.GLOO,
                         dist.ProcessGroupGloo(dist.PrefixStore("gloo", store), rank, size, timeout))
    if cuda:
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        pg._register_backend(torch.device("cuda"), backend.NCCL,
                             dist.ProcessGroupNCCL(dist.PrefixStore("nccl", store), rank, size, options))
    pg._set_group_name(name)
    torch._C._distributed_c10d._register_process_group(name, pg)
    return pg


class TorchGroup(OneRank):
    """An agent's ranks on a standalone process group (``rank`` / ``size`` within the group)."""

    def __init__(self, label: str, store, rank: int, size: int, timeout, *, cuda: bool,
                 describe: Callable[[str, BaseException], BaseException]):
        self.rank, self.size, self._describe = rank, size, describe
        self.name = f"corl/{label}/{next(_names)}"  # unique in this process (registered by name)
        self._pg = process_group(self.name, store, rank, size, timeout, cuda=cuda)
        self._meshes: dict[str, Any] = {}

    def _all_reduce(self, values: Sequence[float], op, what: str) -> list[float]:
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        try:
            self._pg.allreduce([t], opts).wait()
        except RuntimeError as exc:
            raise self._describe(what, exc) from None
        return t.tolist()

    def sum(self, values: Sequence[float]) -> list[float]:
        import torch.distributed as dist

        return self._all_reduce(values, dist.ReduceOp.SUM, "summing optimizer statistics")

    def max(self, values: Sequence[float]) -> list[float]:
        import torch.distributed as dist

        return self._all_reduce(values, dist.ReduceOp.MAX, "agreeing on the number of micro-batches")

    def mesh(self, device_type: str) -> Any:
        if device_type not in self._meshes:
            import torch
            from torch.distributed.device_mesh import DeviceMesh

            mesh = DeviceMesh(device_type, torch.arange(self.size), _init_backend=False, _rank=self.rank)
            mesh._dim_group_names = [self.name]
            mesh._pg_registry[self.name] = self._pg
            self._meshes[device_type] = mesh
        return self._meshes[device_type]

    def close(self) -> None:
        import torch

        if self._pg is not None:
            torch._C._distributed_c10d._unregister_process_group(self.name)
            self._pg, self._meshes = None, {}


class LocalGroup(OneRank):
    """An agent on one rank: nothing to reduce; a one-rank group (in-memory store) for its mesh,
    built on first use."""

    def __init__(self) -> None:
        self._group: dict[str, TorchGroup] = {}

    def mesh(self, device_type: str) -> Any:
        if device_type not in self._group:
            import datetime

            import torch.distributed as dist

            self._group[device_type] = TorchGroup(
                "one-rank", dist.HashStore(), 0, 1, datetime.timedelta(seconds=600), cuda=device_type == "cuda",
                describe=lambda what, exc: exc)
        return self._group[device_type].mesh(device_type)

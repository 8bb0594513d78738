"""Runs inside vLLM's worker (``worker_extension_cls``): the weight push, by vLLM's supported
in-place reload.

vLLM's CPU build repacks every unquantized linear layer after loading (a kernel layout beside the
checkpoint-format weight), so a plain ``model.load_weights`` cannot update what the kernels read;
``reload_weights(..., is_checkpoint_format=True)`` loads layer by layer and processes each layer
again. A tied ``lm_head`` shares the embedding's weight but loads nothing itself, so its CPU GEMM
copy is made again here (on a GPU that processing is a no-op).

Imports only torch and safetensors: this module is loaded in vLLM's worker processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class WeightSync:
    """Mixed into vLLM's worker class; its methods are called through ``LLM.collective_rpc``."""

    def corl_load_tensors(self, named_tensors: Iterable[tuple[str, Any]]) -> int:
        """The engine in the trainer's process: the trainer's tensors, by reference."""
        return self._corl_reload(named_tensors)

    def corl_load_file(self, path: str) -> int:
        """The engine in a child process: the tensors the trainer wrote to a shared-memory file."""
        from safetensors import safe_open

        with safe_open(path, "pt", device="cpu") as f:
            return self._corl_reload((name, f.get_tensor(name)) for name in f.keys())

    def _corl_reload(self, named_tensors: Iterable[tuple[str, Any]]) -> int:
        seen = []

        def counted():
            for name, tensor in named_tensors:
                seen.append(name)
                yield name, tensor

        self.model_runner.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)
        _reprocess_tied_head(self.model_runner.get_model())
        return len(seen)


def _reprocess_tied_head(model) -> None:
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    head = getattr(model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if isinstance(method, UnquantizedEmbeddingMethod):  # idempotent for unquantized heads, tied or not
        method.process_weights_after_loading(head)

"""``compile_update``: the update's forward and backward through ``torch.compile`` (inductor).

The body of the model (its decoder, without the output layer, which the update applies chunk by
chunk) is wrapped once with ``torch.compile(dynamic=True)``: one graph for the shared-prompt pass
and one for the completions' pass serve every row count and completion length, so a run compiles
once (about a minute for a zoo model on one CPU core, several for a 135M model) and then reuses the
graphs. Inductor keeps what it built in ``$CORL_CACHE_DIR/inductor`` (unless
``TORCHINDUCTOR_CACHE_DIR`` is set), so a later run on the same machine loads it.

Only the update's pass with gradients compiles; sampling, the reference model's log-probs, a pass
that recomputes activations (``gradient_checkpointing``) and a sharded model stay eager, and so does
a call of the body over one row or one position (a micro-batch's single distinct prompt, one-token
completions): torch compiles a size of 1 apart, another compile for a call that small. A compiled
kernel adds in another order: log-probs differ from eager ones by about 1e-5 (measured in
docs/results/performance.md), so the first policy ratio is no longer exactly 1. Where the compiler
fails (no C++ compiler, an operator inductor cannot lower), the run says so once and goes on eager.
"""

from __future__ import annotations

import os

from corl.builtin.hf.backend.forward import body_of
from corl.builtin.hf.models.catalog import cache_root

_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


class CompiledBody:
    """The agent's body compiled on first use, or ``None`` from :meth:`get` where it stays eager."""

    def __init__(self, model, who: str, log):
        self._model, self._who, self._log = model, who, log
        self._body, self._failed = None, False

    def run(self, forward, use: bool):
        """``forward(body)``: with the compiled body where ``use`` (the update's pass with gradients, not
        recomputed) and compiling has not failed, else ``forward(None)`` (eager). A compiler error
        (dynamo's, which wraps inductor's) is said once and the pass runs again eager."""
        body = self.get() if use else None
        if body is None:
            return forward(None)
        from torch._dynamo.exc import TorchDynamoException

        try:
            return forward(body)
        except TorchDynamoException as error:
            self._fail(error)
            return forward(None)

    def get(self):
        """The compiled body (built on the first call), or None once compiling failed."""
        if self._failed:
            return None
        if self._body is None:
            import torch
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir

            if os.environ.get(_CACHE_ENV) in (None, default_cache_dir()):  # (importing dynamo sets the default)
                os.environ[_CACHE_ENV] = str(cache_root() / "inductor")
            eager = body_of(self._model)
            compiled = torch.compile(eager, dynamic=True)

            def body(**inputs):  # (torch specializes a size of 1: such a pass would compile again)
                return (eager if 1 in inputs["input_ids"].shape else compiled)(**inputs)

            self._body = body
            self._log(f"{self._who}: compile_update: the update's body is compiled on its first pass, or loaded "
                      f"from inductor's cache in {os.environ[_CACHE_ENV]}")
        return self._body

    def _fail(self, error: BaseException) -> None:
        """The compiler failed: say so once; the update runs eager from now on."""
        self._failed = True
        first = (str(error).strip().splitlines() or [""])[0][:200]
        self._log(f"{self._who}: compile_update: torch.compile failed ({type(error).__name__}: {first}); "
                  f"the update runs eager")

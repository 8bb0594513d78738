"""Programs, limits, outcomes, and :class:`Sandbox`, which runs a batch of programs in one worker."""

from __future__ import annotations

import json
import os
import selectors
import time
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from . import outer


@attrs.frozen
class Limits:
    """Per-program limits (a program's inputs share them)."""

    wall_seconds: float = attrs.field(default=2.0, validator=attrs.validators.gt(0), metadata={
        "help": "wall-clock seconds a program may take over all its inputs; past it: timeout"})
    cpu_seconds: float = attrs.field(default=1.0, validator=attrs.validators.gt(0), metadata={
        "help": "CPU seconds per program (RLIMIT_CPU, whole seconds); past it: timeout"})
    memory_mb: int = attrs.field(default=512, validator=attrs.validators.ge(64), metadata={
        "help": "address space per program in MiB (RLIMIT_AS); past it: memory"})
    output_chars: int = attrs.field(default=2000, validator=attrs.validators.ge(16), metadata={
        "help": "characters a program may print, and the longest output value; past it: output_limit"})
    file_mb: float = attrs.field(default=1.0, validator=attrs.validators.ge(0), metadata={
        "help": "MiB a program may write in its own folder, all its files together (a tmpfs of that size) "
                "and any one of them (RLIMIT_FSIZE)"})


@attrs.frozen
class Program:
    """A program and the inputs to run it on. ``mode``: ``expression`` (evaluated with ``x`` bound
    to each input) or ``function`` (the source defines ``entry``, called as ``entry(*input)``)."""

    source: str
    inputs: tuple[Any, ...]
    mode: Literal["expression", "function"] = "expression"
    entry: str = "f"


@attrs.frozen
class Outcome:
    """One input's result: ``output`` (the canonical string of the value) or ``error``, a kind:
    ``syntax``, ``no_function``, ``crash:<Exception>``, ``crash:exit``, ``crash:signal<N>``,
    ``timeout``, ``memory``, ``output_limit``, ``forbidden`` (refused by the audit hook or the
    kernel's seccomp filter), ``killed``, ``sandbox`` (the sandbox itself failed)."""

    output: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: error kinds that say more about the machine than about the program's behaviour
RESOURCE_ERRORS = frozenset({"timeout", "memory", "output_limit", "forbidden", "killed", "sandbox"})


class Sandbox:
    """Runs batches of :class:`Program`, ``parallel`` at a time (0: two per CPU).

    ``isolate=False`` starts the worker as a plain process (no bubblewrap, no namespaces; a child's
    own layers still apply). ``without`` names child layers to leave off (``seccomp``, ``uid``,
    ``private-tmp``, ``audit-hook``): for measuring what each costs and testing the ones beneath
    it, never for running untrusted code.
    """

    def __init__(self, limits: Limits = Limits(), *, isolate: bool = True, parallel: int = 0,
                 without: Sequence[str] = ()):
        self.limits, self.isolate, self.without = limits, isolate, frozenset(without)
        # children at once; 0: two per CPU (a child spends much of its life waiting to be scheduled)
        self.parallel = parallel or 2 * (os.cpu_count() or 1)

    def run(self, programs: Sequence[Program]) -> list[list[Outcome]]:
        """Every program's outcome per input, in order. One worker process for the whole batch."""
        if not programs:
            return []
        plan = outer.plan(self.isolate)
        folder = None if plan.folder else outer.new_folder()
        chars = self.limits.output_chars
        settings = {"limits": attrs.asdict(self.limits), "parallel": self.parallel, "jobs": len(programs),
                    "layers": [layer for layer in plan.layers if layer not in self.without], "uids": plan.uids,
                    "folder": plan.folder or folder, "outer": plan.outer}
        request = outer.frame(settings) + b"".join(
            outer.frame({"source": p.source, "inputs": list(p.inputs), "mode": p.mode, "entry": p.entry})
            for p in programs)
        # what an honest worker can write: a line per program, each value at most 12 bytes a character
        cap = sum(len(p.inputs) * (12 * chars + 64) + 256 for p in programs)
        budget = 10.0 + len(programs) * (self.limits.wall_seconds + 0.5) / min(self.parallel, len(programs))
        try:
            proc = plan.start(folder)
            try:
                out = _exchange(proc, request, cap, time.monotonic() + budget, len(programs))
            finally:
                outer.kill(proc)
                proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    stream.close()
        except OSError:
            out = b""
        finally:
            if folder:
                outer.remove(folder)
        return _results(out, programs, chars)


def _exchange(proc, request: bytes, cap: int, deadline: float, lines: int) -> bytes:
    """Write the request, read the worker's lines until there are ``lines`` of them (one per program:
    no need to wait for the sandbox to be torn down), it ends, the deadline passes, or ``cap`` bytes."""
    out, sent = bytearray(), 0
    os.set_blocking(proc.stdin.fileno(), False)  # never stuck writing while the worker waits to write
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        while (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                if key.fileobj is proc.stdin:
                    try:
                        sent += os.write(proc.stdin.fileno(), request[sent:sent + 65536])
                    except BlockingIOError:
                        pass
                    except BrokenPipeError:
                        sent = len(request)
                    if sent >= len(request):
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                out += chunk[:cap - len(out)]
                if not chunk or len(out) >= cap or out.count(b"\n") >= lines:  # cap: more than a worker writes
                    return bytes(out)
    return bytes(out)


def _results(out: bytes, programs: Sequence[Program], chars: int) -> list[list[Outcome]]:
    """One program's line, the first for its index that is well formed; ``sandbox`` for the rest."""
    results: list[list[Outcome] | None] = [None] * len(programs)
    for line in out.split(b"\n"):
        try:
            row = json.loads(line)
            i, values = row["i"], row["results"]
        except (ValueError, KeyError, TypeError):
            continue
        if not (isinstance(i, int) and 0 <= i < len(programs) and results[i] is None and isinstance(values, list)
                and len(values) == len(programs[i].inputs)):
            continue
        if all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], bool) and isinstance(v[1], str)
               and len(v[1]) <= chars for v in values):
            results[i] = [Outcome(output=v) if ok else Outcome(error=v) for ok, v in values]
    return [r if r is not None else [Outcome(error="sandbox")] * len(p.inputs) for r, p in zip(results, programs)]

"""Programs, limits, outcomes, and :class:`Sandbox`, which runs a batch of programs in one worker."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from corl.errors import ConfigError

from . import outer
from .inside import lines

#: the recipe key (of a code task) that lets programs run as root where nothing else can be had
UNSAFE_KEY = "task.unsafe_run_as_root"


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
    ``timeout``, ``memory``, ``output_limit``, ``bad_output`` (a result that is not one: a line the
    program wrote to its result channel itself, a value whose text holds a NUL or a lone surrogate),
    ``forbidden`` (refused by the audit hook or the kernel's seccomp filter), ``killed``, ``sandbox``
    (the sandbox itself failed)."""

    output: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: error kinds that say more about the machine than about the program's behaviour
RESOURCE_ERRORS = frozenset({"timeout", "memory", "output_limit", "bad_output", "forbidden", "killed", "sandbox"})


class Sandbox:
    """Runs batches of :class:`Program`, ``parallel`` at a time (0: two per CPU).

    ``isolate=False`` starts the worker as a plain process (no bubblewrap, no network or PID
    namespace; the worker's own view and a child's own layers still apply where the machine allows
    them); ``"bubblewrap"``, ``"unshare"`` or ``"none"`` ask for that outer layer only. ``without``
    names layers to leave off (``seccomp``, ``uid``, ``private-tmp``, ``audit-hook``, and ``view``
    outside bubblewrap): for measuring what each costs and testing the ones beneath it, never for
    running untrusted code.

    Where programs would run as root (the parent is root and no uid of their own holds: no
    bubblewrap, and no view in which the programs' uids can read the Python installation),
    :meth:`check` and :meth:`run` refuse, unless ``unsafe_run_as_root``.
    """

    def __init__(self, limits: Limits = Limits(), *, isolate: bool | str = True, parallel: int = 0,
                 without: Sequence[str] = (), unsafe_run_as_root: bool = False):
        outer.outer_layers(isolate)  # a misspelt outer layer fails here, not at the first batch
        self.limits, self.isolate, self.without = limits, isolate, frozenset(without)
        self.unsafe_run_as_root = unsafe_run_as_root
        # children at once; 0: two per CPU (a child spends much of its life waiting to be scheduled)
        self.parallel = parallel or 2 * (os.cpu_count() or 1)

    def check(self) -> outer.Plan:
        """The plan batches run under; raises :class:`~corl.errors.ConfigError` where it would run
        programs as root and ``unsafe_run_as_root`` is off."""
        plan = outer.plan(self.isolate)
        if outer.as_root(plan) and not self.unsafe_run_as_root:
            install = "" if plan.outer == "bubblewrap" else "install bubblewrap (apt-get install bubblewrap), "
            raise ConfigError(
                f"{UNSAFE_KEY}: the code sandbox cannot give programs a uid of their own here (outer layer "
                f"{plan.outer}, layers {', '.join(plan.layers) or 'none'}), so they would run as root; {install}run "
                f"as a user that is not root, or set {UNSAFE_KEY} = true to run them as root anyway")
        return plan

    def run(self, programs: Sequence[Program]) -> list[list[Outcome]]:
        """Every program's outcome per input, in order. One worker process for the whole batch."""
        if not programs:
            return []
        plan = self.check()
        view = "view" in plan.layers and "view" not in self.without
        host = None if plan.outer == "bubblewrap" else outer.new_folder()
        chars = self.limits.output_chars
        settings = {"limits": attrs.asdict(self.limits), "parallel": self.parallel, "jobs": len(programs),
                    "layers": [layer for layer in plan.layers if layer not in self.without], "uids": plan.uids,
                    "outer": plan.outer, **plan.where(host, view)}
        request = outer.frame(settings) + b"".join(
            outer.frame({"source": p.source, "inputs": list(p.inputs), "mode": p.mode, "entry": p.entry})
            for p in programs)
        # what an honest worker can write: a line per program, each value at most 12 bytes a character
        cap = sum(len(p.inputs) * (12 * chars + 64) + 256 for p in programs)
        budget = 10.0 + len(programs) * (self.limits.wall_seconds + 0.5) / min(self.parallel, len(programs))
        try:
            proc = plan.start(host)
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
            outer.remove(host)
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
    """One program's line, the first for its index that is well formed (:func:`.lines.parse_row`: every
    text round-trips); ``sandbox`` for the rest."""
    results: list[list[Outcome] | None] = [None] * len(programs)
    for line in out.split(b"\n"):
        row = lines.parse_row(line)
        if row is None:
            continue
        i, values = row
        if i < len(programs) and results[i] is None and len(values) == len(programs[i].inputs) and all(
                len(text) <= chars for _, text in values):
            results[i] = [Outcome(output=text) if ok else Outcome(error=text) for ok, text in values]
    return [r if r is not None else [Outcome(error="sandbox")] * len(p.inputs) for r, p in zip(results, programs)]

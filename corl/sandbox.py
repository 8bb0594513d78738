"""Run untrusted programs (model completions) on inputs, contained, many per process.

One call of :meth:`Sandbox.run` starts one worker process (:mod:`corl._sandbox_worker`) for the
whole batch: ``python -I`` (no user site, no environment variables read), a scrubbed
environment, an empty temporary working folder that is deleted afterwards, and, where the machine
allows it, fresh network / PID / mount namespaces (``unshare``: no network, no other process to
see or signal). The worker forks one child per program, which sets CPU, memory, process-count and
file-size limits, installs an audit hook that refuses forbidden operations (processes, signals,
sockets, native code, writes outside its own folder, ``/proc``), and runs the program on each
input. A child that crashes, loops or blows a limit is killed with its process group; the batch
goes on. The worker itself runs under a wall-clock bound and is killed with its process group.

What this does not protect against is listed in docs/code-tasks.md.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

_WORKER = Path(__file__).with_name("_sandbox_worker.py")
#: the whole environment a worker sees
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
#: namespace flags, most isolated first; the first that works on this machine is used
_UNSHARE = (("unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"),
            ("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"))


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
        "help": "largest file a program may write in its own temporary folder (RLIMIT_FSIZE), MiB"})


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
    ``syntax``, ``no_function``, ``crash:<Exception>``, ``timeout``, ``memory``, ``output_limit``,
    ``forbidden``, ``killed``, ``sandbox`` (the worker itself failed)."""

    output: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: error kinds that say more about the machine than about the program's behaviour
RESOURCE_ERRORS = frozenset({"timeout", "memory", "output_limit", "forbidden", "killed", "sandbox"})


@functools.cache
def isolation() -> tuple[str, ...]:
    """The ``unshare`` prefix this machine allows (empty, with a warning, when none works)."""
    if shutil.which("unshare"):
        for prefix in _UNSHARE:
            try:
                if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                    return prefix
            except (OSError, subprocess.TimeoutExpired):
                pass
    warnings.warn("corl sandbox: no network / PID namespaces on this machine (unshare refused); programs run "
                  "under rlimits and the audit hook only, with the network reachable", RuntimeWarning, stacklevel=2)
    return ()


class Sandbox:
    """Runs batches of :class:`Program`; ``isolate=False`` skips the namespaces (rlimits and the
    audit hook still apply); ``parallel`` children run at once."""

    def __init__(self, limits: Limits = Limits(), *, isolate: bool = True, parallel: int = 0):
        self.limits, self.isolate = limits, isolate
        # children at once; 0: two per CPU (a child spends much of its life waiting to be scheduled)
        self.parallel = parallel or 2 * (os.cpu_count() or 1)

    def run(self, programs: Sequence[Program]) -> list[list[Outcome]]:
        """Every program's outcome per input, in order. One worker process for the whole batch."""
        if not programs:
            return []
        request = {"limits": attrs.asdict(self.limits), "parallel": self.parallel,
                   "jobs": [{"source": p.source, "inputs": list(p.inputs), "mode": p.mode, "entry": p.entry}
                            for p in programs]}
        prefix = isolation() if self.isolate else ()
        budget = 10.0 + len(programs) * (self.limits.wall_seconds + 0.5) / min(self.parallel, len(programs))
        folder = tempfile.mkdtemp(prefix="corl-sandbox-")
        lines: list[bytes] = []
        try:
            proc = subprocess.Popen([*prefix, sys.executable, "-I", "-S", str(_WORKER)], cwd=folder, env=_ENV,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                out, _ = proc.communicate(json.dumps(request).encode(), timeout=budget)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                out, _ = proc.communicate()
            finally:
                _kill_group(proc)  # anything left behind in the group
            lines = out.splitlines()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        results: list[list[Outcome]] = [[Outcome(error="sandbox")] * len(p.inputs) for p in programs]
        for line in lines:
            try:
                row = json.loads(line)
                results[row["i"]] = [Outcome(output=v) if ok else Outcome(error=v) for ok, v in row["results"]]
            except (ValueError, KeyError, IndexError, TypeError):
                continue
        return results


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass



from corl._sandbox_worker import canonical  # noqa: E402,F401  (re-exported: the signature every code answer uses)

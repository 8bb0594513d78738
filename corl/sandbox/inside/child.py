"""What a forked child does: put every layer between one program and the machine, then run the
program on each input, one JSON line per input (``[ok, output or error kind]``) on its own channel.

The layers, in the order they go on (``layers`` names those this machine allows; one that fails to
go on ends the child with :data:`SANDBOX_EXIT` rather than run the program with less):

* descriptors: 0-2 on ``/dev/null``, the result channel on 3, every other one closed (the worker's
  own channel to the parent and the other children's pipes are out of reach);
* ``read-only`` + ``private-tmp``: a mount namespace of its own, everything in it read-only, and
  its folder a fresh tmpfs of ``file_mb`` (a quota on all it writes, seen by nobody else, nothing
  on it executable);
* ``uid``: a uid and gid of its own, never root, no supplementary groups (no signal, ptrace or
  /proc access between programs, or to the worker, even without seccomp);
* no capabilities in any set, not dumpable (its /proc closed, no core file), rlimits (CPU, address
  space, file size, 64 descriptors, no core, no locked memory, 64 queued signals; 64 threads where
  its uid is its own);
* ``seccomp``: the kernel's deny list (:mod:`.seccomp`);
* ``audit-hook``: the early readable refusal (:mod:`.hook`), last, right before the program.
"""

from __future__ import annotations

import os
import resource
import sys

from . import hook, kernel, lines, seccomp
from .values import canonical

#: exit status of a child whose layers could not all be put on: its program never ran
SANDBOX_EXIT = 113
#: exit status of a child whose run ended otherwise than by reporting every input: ``crash:exit``
_CRASH_EXIT = 1
_RESULT_FD = 3
#: threads a program may have, where its uid is its own (RLIMIT_NPROC counts a uid's threads)
_THREADS = 64


class OutputLimit(BaseException):
    """Raised past the output cap; a BaseException so ``except Exception`` in a program does not hide it."""


class _CappedWriter:
    """``sys.stdout`` / ``sys.stderr`` of a program: discards text, raises past the output cap."""

    def __init__(self, cap: int):
        self.cap, self.used = cap, 0

    def write(self, text) -> int:
        self.used += len(text)
        if self.used > self.cap:
            raise OutputLimit
        return len(text)

    def flush(self) -> None:
        pass


def main(job: dict, settings: dict, index: int, channel: int):
    """Confine this process, run ``job`` in it, exit. Never returns."""
    try:
        folder = confine(settings, index, channel)
    except BaseException:  # noqa: BLE001 - fail closed: no program runs with fewer layers than promised
        os._exit(SANDBOX_EXIT)
    try:
        run(job, settings["limits"], folder, "audit-hook" in settings["layers"])
    finally:  # never back into the worker's code that forked it (a program that closed its channel, say)
        os._exit(_CRASH_EXIT)


def uid_of(settings: dict, index: int) -> int | None:
    """The uid (and gid) program ``index`` runs as, when programs get uids of their own."""
    first, count = settings.get("uids") or (None, 0)
    return None if first is None else first + index % count


def confine(settings: dict, index: int, channel: int, layers: set | None = None) -> str:
    """Put the layers on, in order; returns the program's folder. ``layers``: those to put on
    (default: the settings' own); a probe passes them one at a time."""
    layers = set(settings["layers"] if layers is None else layers)
    limits = settings["limits"]
    os.setpgid(0, 0)  # its own process group, which the worker kills with it
    kernel.die_with_parent()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if channel != _RESULT_FD:
        os.dup2(channel, _RESULT_FD)
    os.closerange(_RESULT_FD + 1, 1 << 20)
    uid = uid_of(settings, index) if "uid" in layers else None
    owner = os.getuid() if uid is None else uid
    root = settings["folder"]
    if "private-tmp" in layers:
        folder = root
        kernel.own_mount_namespace()
        if "read-only" in layers and not settings.get("viewed"):  # bubblewrap's view or the worker's is read-only
            kernel.read_only()
        kernel.tmpfs(folder, int(limits["file_mb"] * 2**20), owner, owner)
    else:
        folder = os.path.join(root, f"p{index}")
        os.mkdir(folder, 0o700)
        os.chown(folder, owner, owner)
    kernel.drop_bounding_set()
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    kernel.drop_capabilities()
    kernel.not_dumpable()
    os.chdir(folder)
    os.environ["TMPDIR"] = folder  # tempfile's folders go in its own
    _limit(limits, threads="seccomp" in layers, own_uid=uid is not None)
    if "seccomp" in layers:
        kernel.seccomp(seccomp.program(os.uname().machine, os.getpid()))
    kernel.forget()  # a program's `import ctypes` is an import again, which the hook refuses
    return folder


def _limit(limits: dict, threads: bool, own_uid: bool) -> None:
    cpu = max(1, int(limits["cpu_seconds"] + 0.999))
    memory = int(limits["memory_mb"]) * 2**20
    files = int(limits["file_mb"] * 2**20)
    values = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory, memory)),
              (resource.RLIMIT_FSIZE, (files, files)), (resource.RLIMIT_CORE, (0, 0)),
              (resource.RLIMIT_NOFILE, (64, 64)), (resource.RLIMIT_MEMLOCK, (0, 0)),
              # queued real-time signals count per uid: where the uid is shared, one program must not take them all
              (resource.RLIMIT_SIGPENDING, (64, 64))]
    if not threads:  # without seccomp, the process limit is what stops a fork (for any uid but root)
        values.append((resource.RLIMIT_NPROC, (0, 0)))
    elif own_uid:  # the uid's count is this program's threads: small stacks cannot make thousands
        values.append((resource.RLIMIT_NPROC, (_THREADS, _THREADS)))
    for which, value in values:
        resource.setrlimit(which, value)


def run(job: dict, limits: dict, folder: str, audit: bool):
    """Run the program on each input, one line each on the result channel; then exit."""
    cap = int(limits["output_chars"])
    sys.stdout = sys.stderr = _CappedWriter(cap)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program's, for as long as it lives
    sys.setrecursionlimit(2000)

    def emit(ok: bool, value: str) -> None:
        if not lines.round_trips(value) or len(value) > cap:  # an error kind made of a hostile class name
            ok, value = False, "bad_output"
        os.write(_RESULT_FD, lines.result_line(ok, value))

    def done():
        os.close(_RESULT_FD)  # the worker sees the end now, not after the kernel has torn the process down
        os._exit(0)

    inputs = job["inputs"]
    try:
        code = compile(job["source"], "<program>", "eval" if job["mode"] == "expression" else "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        for _ in inputs:
            emit(False, "syntax")
        done()
    if audit:
        hook.install(folder)

    def kind(exc: BaseException) -> str:
        if isinstance(exc, MemoryError):
            return "memory"
        if isinstance(exc, OutputLimit):
            return "output_limit"
        return f"crash:{type(exc).__name__}"

    namespace: dict = {"__name__": "__program__"}
    fn = None
    if job["mode"] == "function":
        try:
            exec(code, namespace)
            fn = namespace.get(job["entry"])
            problem = None if callable(fn) else "no_function"
        except BaseException as exc:  # noqa: BLE001 - a program's failure is its result
            problem = kind(exc)
        if problem:
            for _ in inputs:
                emit(False, problem)
            done()
    for args in inputs:
        try:
            value = eval(code, namespace, {"x": args}) if fn is None else fn(*args)
            text = canonical(value)
            if type(text) is not str:  # a str subclass from a __repr__: its own len and encode may lie
                text = str.__str__(text)
            if len(text) > cap:
                raise OutputLimit
            # a NUL or a lone surrogate would not survive the way to the vote (JSON, UTF-8, a log)
            result = (True, text) if lines.round_trips(text) else (False, "bad_output")
        except BaseException as exc:  # noqa: BLE001
            try:
                result = (False, kind(exc))
            except BaseException:  # noqa: BLE001 - a hostile __class__ / __name__
                result = (False, "crash:unknown")
        emit(*result)
    done()


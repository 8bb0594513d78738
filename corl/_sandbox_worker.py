"""The sandbox worker: runs a batch of untrusted programs, each in a forked child of this process.

Started by :mod:`corl.sandbox` as ``python -I <this file>`` (inside fresh namespaces where the
machine allows them), with a scrubbed environment and an empty temporary working folder. It reads
one JSON object from stdin (``{"jobs": [...], "limits": {...}}``) and writes one JSON line per job
to stdout (``{"i": job index, "results": [[ok, output or error kind], ...]}``).

Stdlib only, and importable: :func:`canonical` is how both the worker and the tasks' reference
solutions turn a value into the string a signature holds.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import sys
import time

#: modules a program may not import: native-code and process / network escapes
FORBIDDEN_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_posixsubprocess", "subprocess", "socket", "_socket",
                               "multiprocessing", "_multiprocessing", "mmap", "pty", "fcntl", "resource"})
#: audit events that are always forbidden
FORBIDDEN_EVENTS = frozenset({"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                              "os.kill", "os.killpg", "signal.pthread_kill", "subprocess.Popen", "os.chdir",
                              "os.chroot", "os.setuid", "os.putenv", "os.unsetenv", "pty.spawn", "ctypes.dlopen",
                              "sys.addaudithook", "os.startfile", "webbrowser.open", "urllib.Request",
                              "resource.setrlimit", "resource.prlimit"})
#: audit events whose first argument is a path: allowed inside the program's folder only
PATH_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                         "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
                         "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "os.removexattr", "os.setxattr"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Forbidden(BaseException):
    """Raised by the audit hook; a BaseException so ``except Exception`` in a program does not hide it."""


class OutputLimit(BaseException):
    pass


def canonical(value) -> str:
    """The signature string of one output: ``repr``, with integral floats read as ints and other
    floats rounded to 9 significant digits (so ``2.0`` and ``2`` agree, as ``==`` says)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if value.is_integer() and abs(value) < 2**53:
            return repr(int(value))
        return repr(float(f"{value:.9g}"))
    if isinstance(value, (list, tuple)):
        inner = ", ".join(canonical(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


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


def _inside(path, folder: str) -> bool:
    try:
        real = os.path.realpath(os.fsdecode(path) if not isinstance(path, int) else f"/proc/self/fd/{path}")
    except (TypeError, ValueError):
        return False
    return real == folder or real.startswith(folder + os.sep)


def _install_audit_hook(folder: str, tripped: list) -> None:
    def hook(event, args):
        bad = False
        if event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)):
                text = os.fsdecode(path)
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
                bad = (writing and not _inside(text, folder)) or os.path.realpath(text).startswith(("/proc", "/sys"))
        elif event == "import":
            bad = args[0].split(".")[0] in FORBIDDEN_MODULES
        elif event in FORBIDDEN_EVENTS or event.startswith(("socket.", "ctypes.", "subprocess.")):
            bad = True
        elif event in PATH_EVENTS:
            bad = not all(_inside(a, folder) for a in args[:2] if isinstance(a, (str, bytes)))
        if bad:
            tripped.append(event)
            raise Forbidden(event)

    sys.addaudithook(hook)


def _limit(limits: dict) -> None:
    cpu = max(1, int(limits["cpu_seconds"] + 0.999))
    memory = int(limits["memory_mb"]) * 2**20
    for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory, memory)),
                         (resource.RLIMIT_FSIZE, (int(limits["file_mb"] * 2**20),) * 2),
                         (resource.RLIMIT_NPROC, (0, 0)), (resource.RLIMIT_CORE, (0, 0))):
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass


def _child(job: dict, limits: dict, folder: str, out: int) -> None:
    """Runs in the forked child: limits, then the program on each input, one JSON line per input."""
    os.setpgid(0, 0)  # its own process group, so the worker can kill anything it starts
    os.chdir(folder)
    _limit(limits)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the cap is an OSError, not a kill
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    cap = int(limits["output_chars"])
    writer = _CappedWriter(cap)
    sys.stdout = sys.stderr = writer
    sys.stdin = open(os.devnull)
    sys.setrecursionlimit(2000)

    def emit(ok: bool, value: str) -> None:
        os.write(out, (json.dumps([ok, value]) + "\n").encode())

    inputs = job["inputs"]
    try:
        code = compile(job["source"], "<program>", "eval" if job["mode"] == "expression" else "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        for _ in inputs:
            emit(False, "syntax")
        os._exit(0)
    tripped: list = []
    _install_audit_hook(folder, tripped)

    def kind(exc: BaseException) -> str:
        if tripped or isinstance(exc, Forbidden):
            return "forbidden"
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
            os._exit(0)
    for args in inputs:
        try:
            value = eval(code, namespace, {"x": args}) if fn is None else fn(*args)
            text = canonical(value)
            if tripped:
                raise Forbidden(tripped[0])
            if len(text) > cap:
                raise OutputLimit
            result = (True, text)
        except BaseException as exc:  # noqa: BLE001
            try:
                result = (False, kind(exc))
            except BaseException:  # noqa: BLE001 - a hostile __class__ / __name__
                result = (False, "crash:unknown")
        emit(*result)
    os._exit(0)


class _Running:
    """One forked child: its pipe, its deadline and what it has written so far."""

    def __init__(self, job: dict, limits: dict, root: str, index: int):
        self.index, self.n = index, len(job["inputs"])
        self.folder = os.path.join(root, f"p{index}")
        os.mkdir(self.folder)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns
            try:
                os.close(read)
                _child(job, limits, os.path.realpath(self.folder), write)
            finally:
                os._exit(0)
        os.close(write)
        self.pid, self.fd = pid, read
        self.deadline = time.monotonic() + float(limits["wall_seconds"])
        self.cap = self.n * (int(limits["output_chars"]) + 64) + 1024
        self.data, self.timed_out, self.flooded = b"", False, False

    def read(self) -> bool:
        """Take what the child wrote; True once it is done (end of output, or too much of it)."""
        chunk = os.read(self.fd, 65536)
        self.data += chunk
        self.flooded = len(self.data) > self.cap  # a program writing to the result pipe itself
        return not chunk or self.flooded

    def finish(self) -> list:
        os.close(self.fd)
        for target in (-self.pid, self.pid):  # the child's group (anything it started), then the child
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status = os.waitpid(self.pid, 0)
        shutil.rmtree(self.folder, ignore_errors=True)
        n = self.n
        if self.flooded:
            return [[False, "output_limit"]] * n
        results = []
        for line in self.data.split(b"\n")[:n]:
            try:
                ok, value = json.loads(line)
                results.append([bool(ok), str(value)])
            except (ValueError, TypeError):
                break
        if len(results) < n:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            if self.timed_out or sig == signal.SIGXCPU:
                missing = "timeout"
            elif sig == signal.SIGKILL:
                missing = "killed"  # the kernel (memory) or the hard CPU limit
            elif sig is not None:
                missing = f"crash:signal{sig}"
            else:
                missing = "crash:exit"  # the program ended its own process
            results += [[False, missing]] * (n - len(results))
        return results


def run_jobs(jobs: list, limits: dict, root: str, parallel: int):
    """Yield ``(index, results)`` as programs finish, with up to ``parallel`` children at once
    (each child waits on the scheduler as much as it computes on a busy machine)."""
    pending, running = list(enumerate(jobs))[::-1], {}
    while pending or running:
        while pending and len(running) < parallel:
            index, job = pending.pop()
            child = _Running(job, limits, root, index)
            running[child.fd] = child
        now = time.monotonic()
        for child in [c for c in running.values() if c.deadline <= now]:
            child.timed_out = True
            del running[child.fd]
            yield child.index, child.finish()
        if not running:
            continue
        wait = max(0.0, min(c.deadline for c in running.values()) - time.monotonic())
        ready, _, _ = select.select(list(running), [], [], wait)
        for fd in ready:
            child = running[fd]
            if child.read():
                del running[fd]
                yield child.index, child.finish()


def main() -> None:
    request = json.loads(sys.stdin.read())
    limits, root = request["limits"], os.getcwd()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for i, results in run_jobs(request["jobs"], limits, root, int(request.get("parallel", 1))):
        sys.stdout.write(json.dumps({"i": i, "results": results}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""The sandbox worker: one process per batch, inside the outer layer (bubblewrap's namespaces where
the machine has them); it forks one child per program (:mod:`.child`) and passes each program's
results on to the parent.

Started by :mod:`corl.sandbox.outer` as ``python -s -S -P -c "from inside.worker import main;
main()"``. Protocol: stdin holds length-prefixed JSON records (10 ASCII digits, then the JSON),
first the settings, then one job per program; stdout gets one JSON line per program,
``{"i": index, "results": [[ok, output or error kind], ...]}``, as soon as its results are known.

What keeps programs apart here: a job is read only when its program starts, and a child forgets
the worker's records of the others before anything else, then becomes a fresh interpreter
(:mod:`.child`), so no program holds another's source or results, not even in freed memory; each child has a pipe of its own, whose read end only the worker holds, read up to a cap
(a flood is ``output_limit`` for that program alone) and read back only by :mod:`.lines`, which
cannot fail on any bytes (a line that is not a result is ``bad_output`` for that program alone);
the worker is not dumpable, so its /proc (its descriptors, its memory) is closed to the programs
even where they share its uid and can see a /proc at all.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from . import child, hook, kernel, lines, seccomp, view

_LENGTH_DIGITS = 10


def _read(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("the parent closed the request early")
        data += chunk
    return data


def read_record(fd: int = 0):
    return json.loads(_read(fd, int(_read(fd, _LENGTH_DIGITS))))


def write_all(data: bytes, fd: int = 1) -> None:
    while data:
        data = data[os.write(fd, data):]


def _kill(target: int) -> None:
    try:
        os.kill(target, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def status_kind(status: int) -> str:
    """The error kind of a program whose process ended before it gave all its results."""
    if os.WIFEXITED(status):
        return {hook.FORBIDDEN_EXIT: "forbidden", child.SANDBOX_EXIT: "sandbox"}.get(os.WEXITSTATUS(status),
                                                                                     "crash:exit")
    sig = os.WTERMSIG(status)
    if sig == signal.SIGSYS:
        return "forbidden"  # the seccomp filter
    if sig == signal.SIGXCPU:
        return "timeout"
    if sig == signal.SIGKILL:
        return "killed"  # the kernel (memory) or the hard CPU limit
    return f"crash:signal{sig}"


class _Running:
    """One program's process as the worker sees it: its pipe, deadline and what it wrote so far."""

    def __init__(self, index: int, pid: int, fd: int, n: int, limits: dict):
        self.index, self.pid, self.fd, self.n = index, pid, fd, n
        self.deadline = time.monotonic() + float(limits["wall_seconds"])
        self.chars = int(limits["output_chars"])
        # a JSON line per input: at most 12 bytes per character (a \\u escaped surrogate pair) and a frame
        self.cap = n * (12 * self.chars + 64) + 1024
        self.data, self.ending = b"", None  # ending: the kind that ended it early (timeout, output_limit)

    def read(self) -> bool:
        """Take what the child wrote; True once it is done (end of output, or too much of it)."""
        chunk = os.read(self.fd, 65536)
        self.data += chunk
        if len(self.data) > self.cap:
            self.ending = "output_limit"  # a program writing to its channel itself
        return not chunk or self.ending is not None

    def results(self) -> tuple[list, bool]:
        """The results it gave, in order, up to the first whole line that is not one; and whether
        there was such a line (its program wrote to its channel itself: ``bad_output``). The piece
        after the last newline is no line yet (the program ended in the middle of writing it)."""
        if self.ending == "output_limit":
            return [], False
        results = []
        for line in self.data.split(b"\n")[:-1][:self.n]:
            result = lines.parse_result(line)
            if result is None or len(result[1]) > self.chars:
                return results, True
            results.append(list(result))
        return results, False


class Batch:
    """Every program of one request, run ``parallel`` at a time; results go out as they are known."""

    def __init__(self, settings: dict):
        self.settings, self.limits = settings, settings["limits"]
        self.parallel, self.total, self.started = max(1, int(settings["parallel"])), int(settings["jobs"]), 0
        self.running: dict[int, _Running] = {}  # by pipe
        self.waiting: dict[int, tuple[_Running, list]] = {}  # by pidfd: ended early, its exit status says why
        self.unreaped: set[int] = set()

    def forget(self) -> None:
        """In a new child: drop every record of the other programs before the program runs."""
        self.running, self.waiting, self.unreaped = {}, {}, set()

    def busy(self) -> bool:
        return self.started < self.total or bool(self.running or self.waiting)

    def start_more(self) -> None:
        while self.started < self.total and len(self.running) < self.parallel:
            job, index = read_record(), self.started
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                self.forget()
                os.close(read)
                child.main(job, self.settings, index, write)  # never returns
            os.close(write)
            self.running[read] = _Running(index, pid, read, len(job["inputs"]), self.limits)
            self.started += 1

    def step(self) -> None:
        """Wait for the next thing to happen (output, an end, a deadline) and deal with it."""
        now = time.monotonic()
        for program in [p for p in self.running.values() if p.deadline <= now]:
            program.ending = "timeout"
            self._end(program)
        for program, _ in self.waiting.values():
            if program.deadline <= now and program.ending is None:  # it closed its channel, and lives on
                program.ending = "timeout"
                _kill(program.pid)
        self._reap()
        if not (self.running or self.waiting):
            return
        deadlines = [p.deadline for p in self.running.values()] + [
            p.deadline for p, _ in self.waiting.values() if p.ending is None]
        wait = max(0.0, min(deadlines, default=now + 1.0) - now)
        poll = select.poll()  # not select(): two children per CPU can pass descriptor 1024
        for fd in [*self.running, *self.waiting]:
            poll.register(fd, select.POLLIN)
        for fd, _ in poll.poll(wait * 1000):
            if fd in self.waiting:
                program, results = self.waiting.pop(fd)
                os.close(fd)
                _, status = os.waitpid(program.pid, 0)
                _kill(-program.pid)  # anything left in its group
                kind = program.ending or status_kind(status)
                self._send(program, results + [[False, kind]] * (program.n - len(results)))
            elif self.running[fd].read():
                self._end(self.running[fd])

    def _end(self, program: _Running) -> None:
        """Its channel is closed, full or past its deadline: send what it gave, or wait for its end."""
        del self.running[program.fd]
        os.close(program.fd)
        try:
            results, bad = program.results()
        except Exception:  # noqa: BLE001 - never: but one program's output must not end the batch
            results, bad = [], True
        if bad:
            program.ending = "bad_output"
        if len(results) == program.n or program.ending:
            _kill(-program.pid)  # its group (in case it started anything), then itself
            _kill(program.pid)
            self.unreaped.add(program.pid)
            self._send(program, results + [[False, program.ending]] * (program.n - len(results)))
            return
        # the end of its channel before all its results: it is ending (its exit status will say how: a
        # crash, the filter, a limit) or it closed the channel itself and runs on, until its deadline
        try:
            self.waiting[os.pidfd_open(program.pid)] = (program, results)  # readable once it has ended
        except OSError:  # no pidfd (Linux < 5.3): end it and wait here
            _kill(program.pid)
            _, status = os.waitpid(program.pid, 0)
            self._send(program, results + [[False, status_kind(status)]] * (program.n - len(results)))

    def _send(self, program: _Running, results: list) -> None:
        write_all(lines.row_line(program.index, results))

    def _reap(self) -> None:
        for pid in list(self.unreaped):
            if os.waitpid(pid, os.WNOHANG)[0]:
                self.unreaped.discard(pid)

    def finish(self) -> None:
        for pid in self.unreaped:
            os.waitpid(pid, 0)


def probe(settings: dict) -> list[str]:
    """The layers a child can put on here, tried one by one in a throwaway child (order matters:
    the mount namespace before the read-only view and the tmpfs, the uid before seccomp)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        held: list[str] = []
        for layer in ("private-tmp", "read-only", "uid", "seccomp"):
            if layer == "read-only" and "private-tmp" not in held:
                continue  # it is the private mount namespace that is made read-only
            if layer == "uid" and not settings.get("uids"):
                continue  # no uids to take (a parent that is not root): programs share the worker's
            trial = os.fork()  # each layer in a fresh copy of this process, on top of those that held
            if trial == 0:
                try:
                    # a uid that cannot read the standard library (Python installed under /root, say)
                    # would break every program that imports a module: then programs keep the worker's;
                    # and the fresh interpreter a program runs in must start under the layer
                    _, start = child.confine({**settings, "layers": held + [layer]}, 0, write, held + [layer],
                                             boot=child._PROBE)
                    if start is not None:
                        start()  # exits 0 when the fresh interpreter can read its library
                    os._exit(0 if os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK) else 1)
                except BaseException:  # noqa: BLE001
                    os._exit(1)
            if os.waitpid(trial, 0)[1] == 0:
                held.append(layer)
        os.write(write, json.dumps(held + ["audit-hook"]).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def enter_view(settings: dict) -> None:
    """Outside bubblewrap: build the worker's own view (:mod:`.view`); the batch's folder is in it."""
    wanted = settings["view"]
    view.build(wanted["stage"], wanted["entries"], wanted["folder"], wanted["folder_bytes"], wanted["hostname"])
    settings["folder"], settings["viewed"] = wanted["folder"], True


def main() -> None:
    kernel.not_dumpable()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.umask(0o022)  # the folders of the view must be open to the programs' uids
    settings = read_record()
    if settings.get("probe"):
        held = []
        if settings.get("view"):
            try:
                enter_view(settings)
                held.append("view")
            except OSError:  # not allowed here: the children's layers are tried on the host's file system
                settings["folder"] = settings["view"]["stage"]
        write_all((json.dumps({"layers": held + probe(settings)}) + "\n").encode())
        return
    if settings.get("view"):
        enter_view(settings)  # the probe said it works; if it does not now, no program runs (``sandbox``)
    if "seccomp" in settings["layers"]:
        seccomp.template(os.uname().machine)  # assembled once here; each child only writes its pid in
    batch = Batch(settings)
    while batch.busy():
        batch.start_more()
        batch.step()
    batch.finish()

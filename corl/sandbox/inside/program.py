"""What runs one program: the fresh interpreter a child becomes once its layers are on (:mod:`.child`
execs ``python -s -S -P -c "from inside.program import main; main()"``), which reads its job from
descriptor :data:`JOB_FD` and writes one JSON line per input (``[ok, output or error kind]``) on
descriptor :data:`RESULT_FD`.

This interpreter never imports ctypes (nor :mod:`.kernel`, nor anything but :mod:`.hook`,
:mod:`.lines` and :mod:`.values`): no C type that writes memory is loaded for a program to find
through ``object.__subclasses__()``, so the audit hook's own constants cannot be rewritten from
Python, and ``import ctypes`` stays an import the hook refuses.
"""

from __future__ import annotations

import marshal
import os
import sys

from . import hook, lines
from .values import TooDeep, canonical

#: the program's result channel, and its job (a memfd the child wrote before its execve)
RESULT_FD, JOB_FD = 3, 4
#: exit status of a run that ended otherwise than by reporting every input: ``crash:exit``
CRASH_EXIT = 1


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


def main() -> None:
    """The fresh interpreter's entry: read the job, run it in this process's own folder (its working
    folder, set by the child), exit. Never returns."""
    try:
        data = b""
        while chunk := os.read(JOB_FD, 1 << 20):
            data += chunk
        os.close(JOB_FD)
        run(marshal.loads(data), os.getcwd())
    finally:
        os._exit(CRASH_EXIT)


def run(job: dict, folder: str):
    """Run the program on each input, one line each on the result channel; then exit."""
    cap = int(job["cap"])
    sys.stdout = sys.stderr = _CappedWriter(cap)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program's, for as long as it lives
    sys.setrecursionlimit(2000)

    def emit(ok: bool, value: str) -> None:
        if not lines.round_trips(value) or len(value) > cap:  # an error kind made of a hostile class name
            ok, value = False, "bad_output"
        os.write(RESULT_FD, lines.result_line(ok, value))

    def done():
        os.close(RESULT_FD)  # the worker sees the end now, not after the kernel has torn the process down
        os._exit(0)

    inputs = job["inputs"]
    try:
        code = compile(job["source"], "<program>", "eval" if job["mode"] == "expression" else "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        for _ in inputs:
            emit(False, "syntax")
        done()
    if job["audit"]:
        hook.install(folder)

    def kind(exc: BaseException) -> str:
        try:
            if isinstance(exc, MemoryError):
                return "memory"
            if isinstance(exc, OutputLimit):
                return "output_limit"
            return f"crash:{type(exc).__name__}"
        except BaseException:  # noqa: BLE001 - a hostile __class__ / __name__
            return "crash:unknown"

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
        except BaseException as exc:  # noqa: BLE001
            emit(False, kind(exc))
            continue
        try:
            text = canonical(value)
            if type(text) is not str:  # a str subclass from a __repr__: its own len and encode may lie
                text = str.__str__(text)
            if len(text) > cap:
                raise OutputLimit
            # a NUL or a lone surrogate would not survive the way to the vote (JSON, UTF-8, a log)
            result = (True, text) if lines.round_trips(text) else (False, "bad_output")
        except (TooDeep, RecursionError):  # a value nested past what a signature holds (values.MAX_DEPTH)
            result = (False, "bad_output")
        except BaseException as exc:  # noqa: BLE001
            result = (False, kind(exc))
        emit(*result)
    done()

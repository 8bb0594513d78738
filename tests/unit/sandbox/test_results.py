"""A program's results must not sink its batch (issue 31): whatever it writes to its own result
channel, or returns, is its own result or its own error, never the worker's or a sibling's. Each
hostile program runs while an honest one is still running beside it, under bubblewrap and in the
fallback; the honest ones keep both their results."""

import json
import random

import pytest

from corl.sandbox import Limits, Program
from corl.sandbox.batch import _results
from corl.sandbox.inside import lines, worker

from .hostile import run_hostile, sandbox_for

#: still running when the hostile program writes (its two inputs take 0.5 s)
STILL_RUNNING = Program("import time\ndef f(x):\n    time.sleep(0.25)\n    return x * 2 + 1", ((1,), (2,)),
                        mode="function")
ROOM = Limits(wall_seconds=3.0, cpu_seconds=2.0, memory_mb=256)

#: what a program writes to its result channel (descriptor 3) itself, before returning 1; BS: a backslash
WRITTEN = {
    "5000 [ (the worker's json.loads raised RecursionError)": ('b"[" * 5000 + b"\\n"', "bad_output"),
    "20000 [ and no newline (its own line joins them)": ('b"[" * 20000', "bad_output"),
    "a float past the largest": ('b"[true, 1e999999]\\n"', "bad_output"),
    "an int of 20000 digits": ('b"[true, " + b"9" * 20000 + b"]\\n"', "bad_output"),
    "NaN and Infinity": ('b"[true, NaN]\\n[true, Infinity]\\n"', "bad_output"),
    "an object with duplicate keys": ('b\'{"ok": true, "ok": false}\\n\'', "bad_output"),
    "an escaped lone surrogate": ('b\'[true, "\' + BS + b\'ud800"]\\n\'', "bad_output"),
    "an escaped NUL": ('b\'[true, "\' + BS + b\'u0000"]\\n\'', "bad_output"),
    "bytes that are not UTF-8": ('b\'[true, "\\xff\\xfe"]\\n\'', "bad_output"),
    "binary junk": ('bytes(range(256)) * 16 + b"\\n"', "bad_output"),
    "a text past output_chars": ('b\'[true, "\' + b"a" * 5000 + b\'"]\\n\'', "bad_output"),
    "an error kind as a dict": ('b\'[false, {"kind": "timeout"}]\\n\'', "bad_output"),
    "a line of 10 MB": ('b"[" * 10**7 + b"\\n"', "output_limit"),
    "a million short lines": ('b"[[\\n" * 10**6', "output_limit"),
}


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("written", WRITTEN, ids=list(WRITTEN))
def test_junk_on_its_result_channel_is_its_own_error(outer, written):
    data, kind = WRITTEN[written]
    outcome = run_hostile(f"""
        import os
        BS = bytes([92])
        def f(x):
            data = {data}
            while data:
                data = data[os.write(3, data):]
            return 1
    """, sandbox_for(outer, ROOM, parallel=4), before=STILL_RUNNING)
    assert outcome.error == kind


#: programs that play with their channel or return values that cannot travel
PLAYED = {
    "its own line first, then junk after reporting": ("""
        import os
        def f(x):
            os.write(3, b'[true, "7"]\\n' + b"[" * 5000 + b"\\n")
            return 1""", "7", None),
    "closing its channel early": ("""
        import os
        def f(x):
            os.close(3)
            return 1""", None, "crash:exit"),
    "half a line, then ending its process": ("""
        import os
        def f(x):
            os.write(3, b'[true, "7"')
            os._exit(0)""", None, "crash:exit"),
    "a value whose repr holds a NUL": ("""
        class Value:
            def __repr__(self):
                return "7\\x00"
        def f(x):
            return Value()""", None, "bad_output"),
    "a value whose repr holds a lone surrogate": ("""
        class Value:
            def __repr__(self):
                return "7\\ud800"
        def f(x):
            return [Value()]""", None, "bad_output"),
    "a repr whose str subclass lies about its length": ("""
        class Short(str):
            def __len__(self):
                return 1
            def encode(self, *args, **kwargs):
                return b"7"
        class Value:
            def __repr__(self):
                return Short("7" * 10**6)
        def f(x):
            return Value()""", None, "output_limit"),
    "an exception whose class name holds a NUL": ("""
        class Named(type):
            @property
            def __name__(cls):
                return "Bad\\x00Name"
        class Bad(Exception, metaclass=Named):
            pass
        def f(x):
            raise Bad()""", None, "bad_output"),
    "closing its channel early, then looping": ("""
        import os
        def f(x):
            os.close(3)
            while True:
                pass""", None, "timeout"),
}


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("played", PLAYED, ids=list(PLAYED))
def test_a_programs_own_result_stays_its_own(outer, played):
    source, output, error = PLAYED[played]
    outcome = run_hostile(source, sandbox_for(outer, ROOM, parallel=4), before=STILL_RUNNING)
    assert (outcome.output, outcome.error) == (output, error)


HOSTILE_LINES = [
    b"[" * 100_000, b"{" * 100_000, b'{"i": 1e999999, "results": []}', b'{"i": ' + b"9" * 5000 + b', "results": []}',
    b'{"i": NaN, "results": []}', b'{"i": true, "results": [[true, "6"]]}', b'{"i": 0, "i": 1, "results": []}',
    b'{"i": 0, "results": [[true, "\\ud800"], [true, "5"]]}', b'{"i": 0, "results": [[true, "\\u0000"], [true, "5"]]}',
    b'{"i": 0, "results": [[1, "6"], [true, "5"]]}', b'{"i": 0, "results": [[true, "6"] [true, "5"]]}',
    b'{"i": 0, "results": [[true, "6"], [true, "5"]], "x": 1}', bytes(range(256)), b"\xff" * 1000,
    b'{"i": 0, "results": [[true, "\xe9"], [true, "5"]]}', b'{"i": -1, "results": []}',
]


def test_the_parent_takes_only_lines_that_round_trip():
    # what a broken (or reached) worker could send: never an exception, never a text that cannot be encoded
    honest = lines.row_line(1, [[True, "3"], [False, "crash:ValueError"]])
    out = b"\n".join(HOSTILE_LINES) + b"\n" + honest
    programs = [Program("x", (1, 2)), Program("x", (1, 2))]
    first, second = _results(out, programs, chars=2000)
    assert [o.error for o in first] == ["sandbox", "sandbox"]
    assert [(o.output, o.error) for o in second] == [("3", None), (None, "crash:ValueError")]


def test_result_lines_never_raise_on_any_bytes():
    rng = random.Random(31)
    alphabet = b'[]{}",:\\ utrfalsenNI0123456789.eE+-\x00\xff\n'
    for _ in range(2000):
        line = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 64)))
        for parsed in (lines.parse_result(line), lines.parse_row(line)):
            assert parsed is None or all(lines.round_trips(text) for _, text in (
                [parsed] if isinstance(parsed[0], bool) else parsed[1]))
    for text in ["", "a", "é", "\\", '"', "\n\t", "x" * 3000, "𝛼"]:  # what a child writes, read back unchanged
        assert lines.parse_result(lines.result_line(True, text)[:-1]) == (True, text)
        assert lines.parse_row(lines.row_line(3, [[False, text]])[:-1]) == (3, [(False, text)])
        assert json.loads(lines.row_line(3, [[False, text]])) == {"i": 3, "results": [[False, text]]}


def test_the_worker_reads_a_childs_lines_up_to_the_first_that_is_not_one():
    running = worker._Running(0, 0, 0, 3, {"wall_seconds": 1, "output_chars": 16})
    running.data = b'[true, "1"]\n' + b"[" * 5000 + b'\n[true, "3"]\n'
    assert running.results() == ([[True, "1"]], True)
    running.data = b'[true, "1"]\n[false, "crash:KeyError"]\n[true, "3'  # the last one cut short: not a line
    assert running.results() == ([[True, "1"], [False, "crash:KeyError"]], False)


#: exceptions whose class will not say its name: each is its own "crash:unknown", in a call, in the
#: program's definition (function mode) and while its return value is read
HOSTILE_CLASSES = """
    class Meta(type):
        @property
        def __name__(cls):
            raise KeyboardInterrupt
    class Nameless(Exception, metaclass=Meta):
        pass
    class Liar(Exception):
        @property
        def __class__(self):
            raise SystemExit
    class Value:
        def __repr__(self):
            raise Nameless
"""


@pytest.mark.parametrize("body", ["raise Nameless", "raise Liar", "return Value()"])
def test_an_exception_that_hides_its_class_is_a_crash_of_the_program(body):
    outcome = run_hostile(HOSTILE_CLASSES + f"""
    def f(x):
        {body}
    """)
    assert outcome.error == "crash:unknown"


def test_a_definition_that_raises_a_nameless_exception_fails_its_inputs_only():
    outcome = run_hostile(HOSTILE_CLASSES + """
    raise Nameless
    def f(x):
        return 1
    """)
    assert outcome.error == "crash:unknown"

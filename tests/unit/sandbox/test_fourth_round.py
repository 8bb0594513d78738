"""The fourth round of attacks (issue 39): the hook emptied through the ctypes the worker had loaded,
the host's checkout path in the view and the mount table, other processes seen without /proc, a
symbolic link the hook read as inside, dnotify / leases / the machine's load, threads where the uid
is shared, and a result nested too deep to report. Each runs between two honest programs, with the
hook and, where it is the kernel's job, with the hook off, under bubblewrap and as a plain process
(``isolate=False``: no PID namespace, the worker's own view); the ``unshare`` fallback runs the same
child code in the same view as the plain process."""

import os
import textwrap
from pathlib import Path

import pytest

import corl
from corl.sandbox import Limits, Program, Sandbox, canonical, isolation
from corl.sandbox.inside import values

from .hostile import BENIGN, ROOMY, SLOW, _leftovers, run_hostile

#: where this checkout is on the host: no program may learn it
CHECKOUT = str(Path(corl.__file__).resolve().parents[1])


@pytest.fixture(params=[True, False], ids=["bubblewrap", "plain"])
def isolate(request):
    if "seccomp" not in isolation(request.param).layers:
        pytest.skip("no seccomp filter on this machine")
    return request.param


def _hooked(isolate) -> Sandbox:
    return Sandbox(ROOMY, isolate=isolate)


def _bare(isolate) -> Sandbox:
    return Sandbox(ROOMY, isolate=isolate, without=("audit-hook",))


LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def refused(sandbox: Sandbox, header: str, calls: list[str], before: Program = BENIGN,
            expect: str = "forbidden") -> dict[str, str]:
    """Run ``header`` + ``def f(x): return <call>`` for every call, all in one batch between ``before``
    and an honest program (one worker: the suite stays fast), which keep their results; returns
    each call whose outcome was not ``expect``, with what it gave instead."""
    left = _leftovers()
    hostile = [Program(f"{header}\ndef f(x):\n    return {call}", ((1,),), mode="function") for call in calls]
    first, *rows, after = sandbox.run([before, *hostile, BENIGN])
    for honest in (first, after):
        assert [o.output or o.error for o in honest] == ["3", "5"]
    assert _leftovers() == left
    return {call: row[0].output or row[0].error for call, row in zip(calls, rows) if row[0].error != expect}


# -- the hook emptied from pure Python ------------------------------------------------------------

def test_no_native_memory_type_is_loaded_where_a_program_runs(isolate):
    # ctypes' C types (a Union writes any memory: the hook's frozensets) found by walking the class tree
    source = """
        import sys
        def f(x):
            seen, stack, native = set(), [object, type], []
            while stack:
                cls = stack.pop()
                if cls in seen:
                    continue
                seen.add(cls)
                if cls.__module__ in ("_ctypes", "ctypes") or hasattr(cls, "from_address"):
                    native.append(cls.__name__)
                stack.extend(type.__subclasses__(cls))
            loaded = [m for m in sys.modules if "ctypes" in m or m.split(".")[-1] in ("kernel", "worker", "child")]
            return sorted(native), sorted(loaded)
    """
    assert run_hostile(source, _hooked(isolate)).output == "([], [])"


def test_emptying_the_hook_through_a_ctypes_union(isolate):
    # the attack itself: a Union over a pointer and an address, written into the hook's frozenset of
    # forbidden modules (its hash table emptied in place), then `import ctypes`
    source = """
        import sys
        def f(x):
            def all_types():
                seen, stack = set(), [object, type]
                while stack:
                    cls = stack.pop()
                    if cls not in seen:
                        seen.add(cls)
                        yield cls
                        stack.extend(type.__subclasses__(cls))
            union = next(c for c in all_types() if c.__name__ == "Union" and c.__module__ == "_ctypes")
            simple = next(c for c in all_types() if c.__name__ == "_SimpleCData")
            class Word(simple):
                _type_ = "P"
            class Bytes(simple):
                _type_ = "c"
            class Overlay(union):
                _fields_ = [("address", Word), ("pointer", Word)]
            return "got C types: " + Overlay.__name__
    """
    outcome = run_hostile(source, _hooked(isolate))
    assert not outcome.ok and outcome.error == "crash:StopIteration"  # no such type in the process at all


# -- the host's checkout path ---------------------------------------------------------------------

def test_the_checkout_path_is_nowhere_a_program_looks(isolate):
    source = f"""
        import os, sys
        def f(x):
            secret = {CHECKOUT!r}
            found = []
            for top, _, files in os.walk("/sandbox"):
                for name in files:
                    try:
                        if secret.encode() in open(os.path.join(top, name), "rb").read():
                            found.append(os.path.join(top, name))
                    except OSError:
                        pass
            found += [p for p in sys.path if secret in p] + [v for v in os.environ.values() if secret in v]
            for module in list(sys.modules.values()):
                if secret in str(getattr(module, "__file__", "")):
                    found.append(module.__name__)
                for value in list(getattr(module, "__dict__", dict()).values()):
                    filename = str(getattr(getattr(value, "__code__", None), "co_filename", ""))
                    if secret in filename:
                        found.append(filename)
            return found
    """
    assert run_hostile(source, _hooked(isolate)).output == "[]"


MOUNTS = [
    "libc.syscall(457, 0, 0, 0, 0)",  # statmount: a mount's source and root (the host path bound in)
    "libc.syscall(458, 0, 0, 0, 0)",  # listmount
    "libc.syscall(459, 0, 0, 0, 0)",  # lsm_get_self_attr
    "libc.syscall(460, 0, 0, 0, 0)",  # lsm_set_self_attr
    "libc.syscall(461, 0, 0, 0)",  # lsm_list_modules
    # cachestat: whether a sibling read a file of the view (its pages cached), with no clock
    "libc.syscall(451, os.open(os.__file__, os.O_RDONLY), ctypes.byref((ctypes.c_uint64 * 2)(0, 0)), "
    "ctypes.create_string_buffer(40), 0)",
]


def test_the_mount_table_and_security_modules_are_closed(isolate):
    assert refused(_bare(isolate), LIBC, MOUNTS) == {}


def test_system_calls_newer_than_the_filter_are_refused(isolate):
    # mseal (462) is the first call the filter does not know: ENOSYS, as an older kernel would say
    source = f"{LIBC}def f(x):\n    return libc.syscall(462, 0, 0, 0), ctypes.get_errno()"
    assert run_hostile(source, _bare(isolate)).output == "(-1, 38)"


# -- other processes, without /proc -----------------------------------------------------------------

OTHERS = [
    "os.getpgid(os.getppid())", "os.getsid(os.getppid())", "os.getpgid(1)", "os.getsid(1)",
    "os.sched_getaffinity(os.getppid())", "os.sched_getscheduler(os.getppid())",
    "os.sched_getparam(os.getppid())", "os.sched_rr_get_interval(os.getppid())",
    "os.getpriority(os.PRIO_PROCESS, os.getppid())", "os.getpriority(os.PRIO_PGRP, os.getpgid(0) + 1)",
    "os.getpriority(os.PRIO_USER, os.getuid())",  # says whether any other process of its uid exists
    "time.clock_gettime(((~os.getppid()) << 3) | 2)",  # the worker's CPU clock
    "time.clock_getres(((~1) << 3) | 2)",
]


def test_other_processes_cannot_be_seen(isolate):
    # SLOW runs beside them: a sibling to look for
    assert refused(_hooked(isolate), "import os, time", OTHERS, before=SLOW) == {}


RAW = [
    f"libc.syscall({252 if os.uname().machine == 'x86_64' else 31}, 1, os.getppid())",  # ioprio_get
    f"libc.syscall({274 if os.uname().machine == 'x86_64' else 100}, os.getppid(), "
    "ctypes.byref(ctypes.c_void_p()), ctypes.byref(ctypes.c_size_t()))",  # get_robust_list
    f"libc.syscall({315 if os.uname().machine == 'x86_64' else 275}, os.getppid(), "
    "ctypes.create_string_buffer(64), 56, 0)",  # sched_getattr
    *OTHERS,
]


def test_other_processes_cannot_be_seen_by_raw_calls(isolate):
    assert refused(_bare(isolate), LIBC + "import time", RAW, before=SLOW) == {}


def test_capget_names_no_other_process(isolate):
    # capget's pid is in memory, out of the filter's reach: it fails for everyone (EPERM)
    source = f"""{LIBC}
def f(x):
    header, sets = (ctypes.c_uint32 * 2)(0x20080522, os.getppid()), (ctypes.c_uint32 * 6)()
    return libc.syscall({125 if os.uname().machine == 'x86_64' else 90}, header, sets), ctypes.get_errno()
"""
    assert run_hostile(source, _bare(isolate)).output == "(-1, 1)"


def test_a_program_still_sees_itself(isolate):
    source = """
        import os, time
        def f(x):
            me = os.getpid()
            return [os.getpgid(0) == os.getpgid(me), os.getsid(0) == os.getsid(me),
                    os.sched_getaffinity(0) == os.sched_getaffinity(me), os.sched_getscheduler(me),
                    os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, me),
                    time.process_time() >= 0, time.thread_time() >= 0,
                    time.clock_gettime(((~0) << 3) | 2) >= 0, time.clock_gettime(((~me) << 3) | 2) >= 0,
                    time.monotonic() > 0, time.time() > 0]
    """
    assert run_hostile(source, _hooked(isolate)).output == "[True, True, True, 0, 0, 0, True, True, True, True, True, True]"


# -- a symbolic link the hook read as inside --------------------------------------------------------

LINKS = [
    "os.symlink('.', 'l') or os.open('l/..', os.O_RDONLY)",  # a descriptor on the folder above
    "os.symlink('.', 'l') or sorted(os.listdir('l/../..'))",
    "os.mkdir('d') or os.symlink('..', 'd/up') or os.open('d/up/..', os.O_RDONLY)",
    "pathlib.Path('l').symlink_to('.') or 1",
    "os.symlink('/', 'root') or os.listdir('root')",
]


def test_no_symbolic_link_can_be_made(isolate):
    for sandbox in (_hooked(isolate), _bare(isolate)):  # the hook refuses it, and the kernel too
        assert refused(sandbox, "import os, pathlib", LINKS) == {}


# -- dnotify, leases, the machine's load --------------------------------------------------------------

NOTIFY = [
    "fcntl.fcntl(os.open('.', os.O_RDONLY), 1026, 0x8000003f)",  # F_NOTIFY: told of every change in a folder
    "fcntl.fcntl(os.open('/usr/lib', os.O_RDONLY), 1026, 0x8000003f)",
    "fcntl.fcntl(os.open('f', os.O_RDONLY | os.O_CREAT), 1024, fcntl.F_RDLCK)",  # F_SETLEASE
]


def test_no_file_notification_or_lease(isolate):
    assert refused(_bare(isolate), "import fcntl, os", NOTIFY) == {}


LOCKS = [  # a lock one program takes on a file of the view, which another sees: a signal with no clock
    "fcntl.flock(os.open(os.__file__, os.O_RDONLY), fcntl.LOCK_SH | fcntl.LOCK_NB)",
    "fcntl.lockf(os.open(os.__file__, os.O_RDONLY), fcntl.LOCK_SH | fcntl.LOCK_NB)",
    "fcntl.fcntl(os.open(os.__file__, os.O_RDONLY), 36, bytes(32))",  # F_OFD_GETLK: another's lock
]


def test_no_file_lock_to_signal_with():
    assert refused(_bare(True), "import fcntl, os", LOCKS, expect="crash:OSError") == {}  # ENOLCK


def test_the_machines_load_and_process_count_stay_unknown(isolate):
    source = f"""{LIBC}
def f(x):
    info = ctypes.create_string_buffer(128)
    return libc.sysinfo(info), ctypes.get_errno(), info.raw == bytes(128)
"""
    assert run_hostile(source, _bare(isolate)).output == "(-1, 38, True)"


# -- threads where the uid is shared ----------------------------------------------------------------

@pytest.mark.parametrize("hook", [True, False], ids=["hook", "kernel-only"])
def test_a_thread_bomb_under_a_shared_uid_is_stopped(isolate, hook):
    source = """
        import threading, time
        def f(x):
            threading.stack_size(32768)
            started = 0
            while started < 5000:
                threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
                started += 1
            return started
    """
    shared = Sandbox(ROOMY, isolate=isolate, without=("uid",) if hook else ("uid", "audit-hook"))
    assert run_hostile(source, shared).error == "forbidden"


# -- a result nested too deep to report -------------------------------------------------------------

DEEP = [
    "[v := [v] for _ in range(900)][-1] if (v := []) == [] else 0",
    "[v := (v,) for _ in range(5000)][-1] if (v := ()) == () else 0",
    "[v := {1: v} for _ in range(900)][-1] if (v := {}) == {} else 0",
    "v.append(v) or v if (v := []) == [] else 0",  # a list that holds itself
    f"[v := [v] for _ in range({values.MAX_DEPTH + 1})][-1] if (v := 0) == 0 else 0",
]


def test_a_result_nested_too_deep_is_bad_output():
    assert refused(Sandbox(ROOMY), "", DEEP, expect="bad_output") == {}


def test_a_result_nested_to_the_documented_depth_is_reported():
    source = f"def f(x):\n    v = 0\n    for _ in range({values.MAX_DEPTH - 1}):\n        v = [v]\n    return [v]"
    assert run_hostile(source, Sandbox(ROOMY)).output == "[" * values.MAX_DEPTH + "0" + "]" * values.MAX_DEPTH


def test_canonical_refuses_depth_without_recursing():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(values.TooDeep):
        canonical(deep)
    assert canonical([[1.0, (2.5,)]]) == "[[1, (2.5,)]]"


def test_the_depth_is_the_documented_one():
    text = (Path(__file__).resolve().parents[3] / "docs" / "how-to" / "code-tasks.md").read_text()
    assert f"nested deeper than {values.MAX_DEPTH}" in text


def test_honest_programs_still_run_in_their_fresh_interpreter():
    # the fresh interpreter keeps what the fork gave: hash seed, imports, recursion room, temp files
    programs = [Program("str(sorted({'b', 'a'})) + str(hash('corl'))", (0,)),
                Program(textwrap.dedent("""
                    import json, re, tempfile, sys
                    def f(x):
                        with tempfile.TemporaryFile() as fh:
                            fh.write(b'ok')
                        def down(n):
                            return 0 if n == 0 else 1 + down(n - 1)
                        return json.dumps({'n': down(1500)}), bool(re.match('a+', 'aa'))
                """), ((1,),), mode="function")]
    first, second = Sandbox(Limits(wall_seconds=5.0)).run(programs)
    assert first[0].output == repr(str(sorted({"b", "a"})) + str(_hash_seed_zero("corl")))
    assert second[0].output == "('{\"n\": 1500}', True)"


def _hash_seed_zero(text: str) -> int:
    import subprocess
    import sys
    return int(subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], env={"PYTHONHASHSEED": "0"},
                              capture_output=True, text=True, check=True).stdout)


def test_where_a_sibling_could_open_its_proc_the_program_stays_in_the_forked_child():
    # a uid shared with its siblings and a /proc in view: the execve would make it dumpable, and a
    # sibling could open its /proc/<pid>/mem, so it runs in the forked child (the documented exception)
    source = "import os, sys\ndef f(x):\n    return x + 1, 'inside.kernel' in sys.modules, os.path.isdir('/proc/self')"
    shared = Sandbox(ROOMY, isolate=False, without=("view", "uid"))
    assert shared.run([Program(source, ((1,),), mode="function")])[0][0].output == "(2, True, True)"

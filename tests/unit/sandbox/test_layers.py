"""Each layer is in place, seen from inside a program, and the pieces that build them are right."""

import dis
import glob
import json
import os
import threading
import types

import pytest

from corl.sandbox import Limits, Program, Sandbox, isolation
from corl.sandbox.inside import hook, seccomp, worker
from corl.sandbox.outer import HOST_UIDS, HOSTNAME

from .hostile import FAST, run_hostile

SELF = """
import ctypes, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
CAPGET = {"x86_64": 125, "aarch64": 90}[os.uname().machine]
def f(x):
    header, sets = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
    capget = libc.syscall(CAPGET, header, sets), ctypes.get_errno()  # refused: its pid is in memory
    disk = os.statvfs(".")
    return json.dumps({
        "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "capget": capget,
        "core": resource.getrlimit(resource.RLIMIT_CORE),
        "ambient": [c for c in range(64) if libc.prctl(47, 1, c, 0, 0) == 1],  # PR_CAP_AMBIENT_IS_SET
        "bounding": [c for c in range(64) if libc.prctl(23, c, 0, 0, 0) == 1],  # PR_CAPBSET_READ
        "no_new_privs": libc.prctl(39, 0, 0, 0, 0), "seccomp": libc.prctl(21, 0, 0, 0, 0),
        "dumpable": libc.prctl(3, 0, 0, 0, 0), "env": sorted(os.environ), "cwd": os.getcwd(),
        "folder_bytes": disk.f_blocks * disk.f_frsize, "host": os.uname().nodename,
        "dev": sorted(os.listdir("/dev")), "top": sorted(os.listdir("/"))})
"""


def _inside(sandbox: Sandbox) -> dict:
    return json.loads(eval(run_hostile(SELF, sandbox).output))


@pytest.mark.parametrize("isolate", [True, "unshare", False], ids=["bubblewrap", "unshare", "plain"])
def test_a_program_holds_no_privilege(isolate):
    found = isolation(isolate)
    if found.outer != {True: "bubblewrap", "unshare": "unshare", False: "none"}[isolate]:
        pytest.skip(f"no {isolate} outer layer here")
    seen = _inside(Sandbox(Limits(output_chars=20000), isolate=isolate, without=("audit-hook",)))  # ctypes
    # no capability: none in the ambient or the bounding set, so the execve into its fresh interpreter
    # gave none (capget, whose pid the filter cannot read, fails for everyone: EPERM)
    assert seen["capget"] == [-1, 1] and seen["ambient"] == [] and seen["bounding"] == []
    # 2: a filter; the execve made it dumpable again, but no core can be written (1: below the smallest,
    # and refused when piped) and nothing that reads another process's memory is allowed (test_kernel.py)
    assert seen["no_new_privs"] == 1 and seen["seccomp"] == 2 and seen["core"] == [1, 1]
    if os.geteuid() == 0:  # never root where the parent is: a uid of its own, or a refusal (test_fallback.py)
        assert "uid" in found.layers and seen["uid"] != 0 and seen["gid"] != 0 and seen["groups"] == []
    assert set(seen["env"]) <= {"LANG", "PATH", "PWD", "PYTHONHASHSEED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
    if "private-tmp" in found.layers:  # its folder is a tmpfs of Limits.file_mb
        assert seen["folder_bytes"] == 2**20
    if "view" in found.layers:  # the view: no /proc or /sys, three devices, a host name of its own
        assert seen["host"] == HOSTNAME and seen["dev"] == ["null", "urandom", "zero"]
        assert "proc" not in seen["top"] and "sys" not in seen["top"] and "home" not in seen["top"]


@pytest.mark.skipif(os.geteuid() != 0, reason="programs take uids of their own only under a root parent")
@pytest.mark.parametrize("isolate", [True, "unshare", False], ids=["bubblewrap", "unshare", "plain"])
def test_on_the_host_programs_are_uids_nothing_else_uses(isolate):
    # seen from the host while they run: never root, and out of the range of every real user
    if "uid" not in isolation(isolate).layers:
        pytest.skip("no uid per program here")
    sleeper = Program("import time\ndef f(x):\n    time.sleep(1.0)\n    return x", ((1,),), mode="function")
    done = threading.Event()
    uids: set[int] = set()
    runner = threading.Thread(target=lambda: (Sandbox(Limits(wall_seconds=5.0), isolate=isolate).run([sleeper]),
                                              done.set()))
    runner.start()
    while not done.wait(0.02):
        for status in glob.glob("/proc/[0-9]*/status"):
            try:
                uids |= {int(line.split()[1]) for line in open(status) if line.startswith("Uid:")}
            except (OSError, ValueError, IndexError):
                pass
    runner.join()
    assert any(HOST_UIDS[0] <= uid < HOST_UIDS[0] + HOST_UIDS[1] for uid in uids)


def test_set_order_is_the_same_in_every_batch():
    # PYTHONHASHSEED=0 reaches the worker (it used to be ignored under python -I)
    program = Program("str(list({'apple', 'pear', 'fig', 'kiwi', 'plum', 'lime'}))", (0,))
    first = Sandbox(FAST).run([program])[0][0].output
    assert Sandbox(FAST).run([program])[0][0].output == first


def test_the_audit_hook_reads_nothing_a_program_can_reach():
    check = hook._hook_for("/sandbox/work")
    names = {i.opname for i in dis.get_instructions(check)}
    assert not names & {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_CLOSURE"}
    assert check.__closure__ is None and check.__kwdefaults__ is None
    assert not any(isinstance(c, types.CodeType) for c in check.__code__.co_consts)  # no comprehension, no lambda
    for value in check.__defaults__:  # every default immutable
        assert isinstance(value, (frozenset, tuple, str, int, types.BuiltinFunctionType)) or value in (
            str, bytes, int, type)


def test_the_seccomp_filter_assembles_for_both_machines():
    for machine in seccomp.ARCHES:
        code = seccomp.program(machine, 7)
        assert len(code) % 8 == 0 and 100 < len(code) // 8 < 4096  # struct sock_filter, BPF_MAXINSNS


def test_exit_statuses_name_the_layer_that_ended_a_program():
    assert worker.status_kind(31) == "forbidden"  # killed by SIGSYS: the seccomp filter
    assert worker.status_kind(hook.FORBIDDEN_EXIT << 8) == "forbidden"
    assert worker.status_kind(113 << 8) == "sandbox" and worker.status_kind(9) == "killed"
    assert worker.status_kind(0) == "crash:exit" and worker.status_kind(24) == "timeout"


def test_a_flood_of_result_lines_counts_once_per_program():
    # a program that writes its own result lines many times over gets output_limit, nobody else anything
    source = """
        import os
        def f(x):
            for i in range(10**6):
                os.write(3, b'[true, "1"]\\n')
    """
    assert run_hostile(source, Sandbox(Limits(wall_seconds=3.0, cpu_seconds=3.0))).error == "output_limit"

"""Each layer is in place, seen from inside a program, and the pieces that build them are right."""

import dis
import json
import types

from corl.sandbox import Limits, Program, Sandbox, isolation
from corl.sandbox.inside import hook, seccomp, worker
from corl.sandbox.outer import HOST_UIDS

from .hostile import FAST, run_hostile

SELF = """
import json, os
def f(x):
    status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
    return json.dumps({"uid": os.getuid(), "uid_map": open("/proc/self/uid_map").read().split(),
                       "status": status, "env": sorted(os.environ), "cwd": os.getcwd(),
                       "mounts": open("/proc/self/mounts").read()})
"""


def _inside(sandbox: Sandbox) -> dict:
    return json.loads(eval(run_hostile(SELF, sandbox).output))


def test_a_program_holds_no_privilege():
    seen = _inside(Sandbox(Limits(output_chars=20000), without=("audit-hook",)))  # the hook would refuse /proc
    status = seen["status"]
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[capabilities], 16) == 0, capabilities
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"  # 2: a filter
    assert seen["uid"] != 0 and status["Uid"].split()[0] != "0"
    layers = isolation().layers
    if "uid" in layers and isolation().outer == "bubblewrap":  # as root: a host uid of its own, not root
        inside, host, count = map(int, seen["uid_map"][3:6])
        assert host == HOST_UIDS[0] and inside <= seen["uid"] < inside + count
    assert set(seen["env"]) <= {"LANG", "PATH", "PWD", "PYTHONHASHSEED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
    if "private-tmp" in layers:  # its folder is a tmpfs of Limits.file_mb
        assert any(line.split()[1] == seen["cwd"] and line.split()[2] == "tmpfs" and "size=1024k" in line
                   for line in seen["mounts"].splitlines())


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
        assert isinstance(value, (frozenset, tuple, str, int, types.BuiltinFunctionType)) or value in (str, bytes, int)


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

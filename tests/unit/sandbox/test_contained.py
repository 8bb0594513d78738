"""The sandbox contains hostile programs: each test runs one next to a benign program and checks
that the batch went on, the error kind is right, and nothing outside the sandbox changed."""

import os
import shutil
import socket
import time

import pytest

from corl.sandbox import Program, Sandbox, isolation

from .hostile import FAST, run_hostile


def test_every_layer_holds_where_the_machine_allows_it():
    # CI installs bubblewrap and runs as root on a machine with user namespaces: everything holds there
    found = isolation()
    if shutil.which("bwrap") and os.geteuid() == 0:
        assert found.outer == "bubblewrap" and found.missing == ()
    assert {"seccomp", "audit-hook"} <= set(found.layers)  # on every x86-64 / aarch64 Linux
    assert isolation(False).outer == "none" and "bubblewrap" not in isolation(False).layers


def test_infinite_loop_times_out():
    assert run_hostile("def f(x):\n    while True:\n        pass").error == "timeout"


def test_code_that_never_returns_is_killed_on_the_wall_clock():
    start = time.monotonic()
    outcome = run_hostile("""
        import time
        def f(x):
            while True:
                time.sleep(100)  # no CPU used: only the wall clock ends it
    """)
    assert outcome.error == "timeout"
    assert time.monotonic() - start < 8


def test_fork_bomb_is_forbidden_and_leaves_no_processes():
    before = len(os.listdir("/proc"))
    outcome = run_hostile("""
        import os
        def f(x):
            while True:
                os.fork()
    """)
    assert outcome.error == "forbidden"
    # no stray children: the sandbox's own processes are killed with it and gone within moments
    # (the parent does not wait for their teardown); pids come and go on a busy machine
    end = time.monotonic() + 2
    while len(os.listdir("/proc")) > before + 2 and time.monotonic() < end:
        time.sleep(0.05)
    assert len(os.listdir("/proc")) <= before + 2


def test_memory_bomb_hits_the_memory_limit():
    assert run_hostile("def f(x):\n    return len(bytearray(10**10))").error == "memory"


@pytest.mark.parametrize("source", ["def f(x):\n    while True:\n        print('spam' * 1000)",
                                    "def f(x):\n    return 'a' * 10**6"])
def test_huge_output_hits_the_output_limit(source):
    assert run_hostile(source).error == "output_limit"


def test_writing_outside_its_folder_is_forbidden(tmp_path):
    victim = tmp_path / "victim.txt"
    outcome = run_hostile(f"""
        def f(x):
            with open({str(victim)!r}, "w") as fh:
                fh.write("pwned")
    """)
    assert outcome.error == "forbidden"
    assert not victim.exists()


def test_deleting_files_outside_its_folder_is_forbidden(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    for call in (f"os.remove({str(keep)!r})", f"shutil.rmtree({str(tmp_path)!r})",
                 f"os.rename({str(keep)!r}, 'stolen')"):
        outcome = run_hostile(f"import os, shutil\ndef f(x):\n    {call}")
        assert outcome.error == "forbidden", call
    assert keep.read_text() == "precious"


def test_files_in_its_own_folder_work_and_do_not_survive():
    outcome = run_hostile("""
        import os
        def f(x):
            with open("scratch.txt", "w") as fh:
                fh.write("temporary")
            return os.path.abspath("scratch.txt")
    """)
    assert outcome.ok
    assert not os.path.exists(eval(outcome.output))


def test_opening_sockets_is_forbidden():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        for source in (f"import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', {port}))",
                       f"def f(x):\n    __import__('_socket').socket().connect(('127.0.0.1', {port}))"):
            assert run_hostile(source).error == "forbidden"
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("CORL_TEST_SECRET", "hunter2")
    outcome = run_hostile("import os\ndef f(x):\n    return sorted(os.environ)")
    assert outcome.ok and "CORL_TEST_SECRET" not in outcome.output and "hunter2" not in outcome.output
    outcome = run_hostile(f"def f(x):\n    return open('/proc/{os.getpid()}/environ', 'rb').read()")
    assert outcome.error == "forbidden"


def test_killing_the_parent_is_forbidden():
    for target in ("os.getppid()", str(os.getpid()), "0"):
        outcome = run_hostile(f"import os, signal\ndef f(x):\n    os.kill({target}, signal.SIGKILL)")
        assert outcome.error == "forbidden", target
    for group in (os.getpgid(os.getpid()), 0):
        outcome = run_hostile(f"import os, signal\ndef f(x):\n    os.killpg({group}, signal.SIGKILL)")
        assert outcome.error == "forbidden", group


def test_raising_its_own_limits_is_forbidden():
    # resource is already imported by the worker, so only the audited call can stop this (as root)
    source = "import resource\ndef f(x):\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))"
    assert run_hostile(source).error == "forbidden"


def test_catching_the_refusal_does_not_hide_it():
    outcome = run_hostile("""
        import os
        def f(x):
            try:
                os.fork()
            except BaseException:
                pass
            return 42
    """)
    assert outcome.error == "forbidden"


def test_a_program_that_ends_its_process_loses_only_its_own_inputs():
    hostile = Program("import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x", ((1,), (2,), (3,)),
                      mode="function")
    (outcomes,) = Sandbox(FAST).run([hostile])
    assert [o.output or o.error for o in outcomes] == ["1", "crash:exit", "crash:exit"]


def test_limits_hold_without_namespaces():
    assert run_hostile("import os\ndef f(x):\n    os.kill(os.getppid(), 9)", Sandbox(FAST, isolate=False)).error \
        == "forbidden"
    assert run_hostile("def f(x):\n    while True:\n        pass", Sandbox(FAST, isolate=False)).error == "timeout"


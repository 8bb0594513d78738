"""The kernel holds without the audit hook: hostile programs that bypass Python (ctypes, raw system
calls, the calls the hook never sees) run here with the hook switched off, and the seccomp filter,
the namespaces, the uids and the read-only view must contain them all the same. Each runs under
bubblewrap, in the fallback without it (``unshare``: the worker builds the view itself) and as a
plain process (``isolate=False``: the worker's view and the child's own layers only)."""

import os
import socket

import pytest

from corl.sandbox import Limits, Program, Sandbox, isolation

from .hostile import SLOW, run_hostile

KERNEL_ONLY = ("audit-hook",)
#: room for SLOW (0.4 s asleep) on a loaded machine
SURE = Limits(wall_seconds=2.0, cpu_seconds=1.0, memory_mb=256)


@pytest.fixture(params=[True, "unshare", False], ids=["bubblewrap", "unshare", "plain"])
def bare(request):
    """A sandbox without its audit hook, under each outer layer."""
    if request.param == "unshare" and isolation("unshare").outer != "unshare":
        pytest.skip("no unshare here")
    if "seccomp" not in isolation(request.param).layers:
        pytest.skip("no seccomp filter on this machine")
    return Sandbox(SURE, isolate=request.param, without=KERNEL_ONLY)


LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"


@pytest.mark.parametrize("call", [
    "libc.fork()",  # the C library's fork: clone without CLONE_THREAD
    "libc.syscall(57)",  # fork by number (x86-64; aarch64 has none, and clone below covers it)
    "libc.syscall(56 if os.uname().machine == 'x86_64' else 220, 17, 0, 0, 0, 0)",  # clone(SIGCHLD)
    "libc.execve(b'/bin/sh', (ctypes.c_char_p * 2)(b'/bin/sh', None), None)",
    "libc.system(b'touch /tmp/pwned')",
    "os.system('touch /tmp/pwned')",
    "os.posix_spawn('/bin/sh', ['sh'], {})",
])
def test_no_process_and_no_program_can_be_started(bare, call):
    assert run_hostile(f"import os\n{LIBC}def f(x):\n    return {call}", bare).error == "forbidden"


@pytest.mark.parametrize("call", [
    "os.kill(os.getppid(), 9)", "os.kill(1, 9)", "os.killpg(0, 9)", "os.kill(-1, 9)", "os.kill(0, 9)",
    "libc.syscall(200 if os.uname().machine == 'x86_64' else 130, 1, 9)",  # tkill
    "libc.syscall(234 if os.uname().machine == 'x86_64' else 131, 1, 1, 9)",  # tgkill
    "signal.pidfd_send_signal(os.pidfd_open(1), 9)",
    "libc.ptrace(16, os.getppid(), 0, 0)",  # PTRACE_ATTACH
    "resource.prlimit(os.getppid(), resource.RLIMIT_CPU, (0, 0))",
    "fcntl.fcntl(os.open('.', os.O_RDONLY), fcntl.F_SETOWN, os.getppid())",  # SIGIO to the worker
    "os.setpgid(0, os.getpgid(os.getppid()))", "os.setsid()", "os.nice(-20)", "os.nice(5)",
    "libc.unshare(0x10000000)", "libc.mount(b'none', b'/', None, 0x4000 | 0x40000, None)",
    "libc.syscall(425 , 8, ctypes.create_string_buffer(120))",  # io_uring_setup
    "libc.syscall(321 if os.uname().machine == 'x86_64' else 280, 0, 0, 0)",  # bpf
    "libc.syscall(323 if os.uname().machine == 'x86_64' else 282, 0)",  # userfaultfd
    "libc.syscall(250 if os.uname().machine == 'x86_64' else 219, 0, -3, 0)",  # keyctl: the session keyring
    "libc.shmget(0, 4096, 0o1600)",
])
def test_nothing_outside_its_own_process_can_be_reached(bare, call):
    outcome = run_hostile(f"import fcntl, os, resource, signal\n{LIBC}def f(x):\n    return {call}", bare,
                          before=SLOW)
    assert outcome.error == "forbidden", call


def _nr(x86: int, arm: int) -> str:
    return f"({x86} if os.uname().machine == 'x86_64' else {arm})"


#: kernel objects counted per user or for the whole machine: one program must not take them for all
COUNTED = {
    "io_setup": f"libc.syscall({_nr(206, 0)}, 65536, ctypes.byref(ctypes.c_ulong(0)))",
    "io_destroy": f"libc.syscall({_nr(207, 1)}, 0)",
    "io_submit": f"libc.syscall({_nr(209, 2)}, 0, 0, 0)",
    "io_cancel": f"libc.syscall({_nr(210, 3)}, 0, 0, 0)",
    "io_getevents": f"libc.syscall({_nr(208, 4)}, 0, 0, 0, 0, 0)",
    "io_pgetevents": f"libc.syscall({_nr(333, 292)}, 0, 0, 0, 0, 0, 0)",
    "inotify_init1": "libc.inotify_init1(0)",
    "inotify_add_watch": f"libc.syscall({_nr(254, 27)}, 0, b'/', 0xfff)",
    "fanotify_init": f"libc.syscall({_nr(300, 262)}, 0, 0)",
    "fanotify_mark": f"libc.syscall({_nr(301, 263)}, 0, 1, 0xfff, -100, b'/')",
    "mq_open": f"libc.syscall({_nr(240, 180)}, b'corl', 0o102, 0o600, None)",
    "msgget": "libc.msgget(0, 0o1600)",
    "semget": "libc.semget(0, 1, 0o1600)",
    "add_key": f"libc.syscall({_nr(248, 217)}, b'user', b'corl', b'x', 1, -3)",
    "request_key": f"libc.syscall({_nr(249, 218)}, b'user', b'corl', None, -3)",
    "perf_event_open": f"libc.syscall({_nr(298, 241)}, ctypes.create_string_buffer(128), 0, -1, -1, 0)",
    "userfaultfd": f"libc.syscall({_nr(323, 282)}, 0)",
    "lookup_dcookie": f"libc.syscall({_nr(212, 18)}, 0, 0, 0)",
    "personality": "libc.personality(0xffffffff)",
    "F_SETPIPE_SZ": "fcntl.fcntl(os.pipe()[0], 1031, 1 << 20)",
    "TIOCLINUX": "fcntl.ioctl(0, 0x541C, bytes(8))",
    "TIOCCONS": "fcntl.ioctl(0, 0x541D)",
}


@pytest.mark.parametrize("call", COUNTED.values(), ids=list(COUNTED))
def test_no_kernel_object_counted_for_the_machine_can_be_taken(bare, call):
    with open("/proc/sys/fs/aio-nr") as fh:
        contexts = int(fh.read())
    outcome = run_hostile(f"import fcntl, os\n{LIBC}def f(x):\n    return {call}", bare)
    assert outcome.error == "forbidden", call
    with open("/proc/sys/fs/aio-nr") as fh:
        assert int(fh.read()) <= contexts  # the machine's AIO contexts (fs.aio-max-nr) are all still free


def test_signals_to_itself_still_work(bare):
    source = """
        import os, signal
        def f(x):
            got = []
            signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
            os.kill(os.getpid(), signal.SIGUSR1)
            signal.raise_signal(signal.SIGUSR1)
            return len(got)
    """
    assert run_hostile(source, bare).output == "2"


def test_threads_work(bare):
    source = """
        from concurrent.futures import ThreadPoolExecutor
        def f(x):
            with ThreadPoolExecutor(4) as pool:
                return sum(pool.map(lambda n: n * n, range(10)))
    """
    assert run_hostile(source, bare).output == "285"


def test_no_socket_of_any_kind(bare):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        for call in (f"socket.create_connection(('127.0.0.1', {port}))",
                     "socket.socket(socket.AF_UNIX).bind('\\0corl-abstract')", "socket.socketpair()",
                     "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)"):
            outcome = run_hostile(f"import socket\ndef f(x):\n    {call}", bare)
            assert outcome.error == "crash:PermissionError", call
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_the_file_system_is_read_only_but_its_own_folder(bare, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for call in (f"open({str(victim)!r}, 'w')", "open('/usr/pwned', 'w')", "open('/dev/shm/pwned', 'w')",
                 "open('/tmp/pwned', 'w')", f"os.remove({str(victim)!r})",
                 f"os.symlink({str(victim)!r}, 'link'); open('link', 'w').write('pwned')"):
        outcome = run_hostile(f"import os\ndef f(x):\n    {call}", bare)
        assert outcome.error in {"crash:OSError", "crash:PermissionError", "crash:FileNotFoundError",
                                 "forbidden"}, call  # forbidden: no symbolic link (the filter)
    assert sorted(os.listdir(tmp_path)) == ["victim.txt"] and victim.read_text() == "precious"
    assert not os.path.exists("/usr/pwned") and not os.path.exists("/tmp/pwned")
    source = """
        import os, tempfile
        def f(x):
            with tempfile.NamedTemporaryFile("w") as fh:
                fh.write("scratch")
            os.mkdir("sub")
            with open("sub/data.txt", "w") as fh:
                fh.write("mine")
            return open("sub/data.txt").read()
    """
    assert run_hostile(source, bare).output == "'mine'"


def test_another_programs_folder_and_process_are_out_of_reach(bare):
    writer = Program("import os, time\ndef f(x):\n    open('secret.txt', 'w').write('s3cret')\n"
                     "    time.sleep(1.0)\n    return x * 2 + 1", ((1,), (2,)), mode="function")
    source = """
        import os, time
        def f(x):
            time.sleep(0.2)
            found = []
            for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():  # not in the view
                if pid.isdigit() and int(pid) != os.getpid():
                    for what in ("cwd/secret.txt", "root/tmp/secret.txt", "environ", "mem"):
                        try:
                            found.append(open(f"/proc/{pid}/{what}", "rb").read(64))
                        except OSError:
                            pass
            # where a sibling's folder would be (beside this one, or in a tmp), not the whole disk:
            # walking a host's / takes longer than any limit on a loaded machine
            here = os.getcwd()
            for root in {os.path.dirname(here), os.path.dirname(os.path.dirname(here)), "/tmp", "/var/tmp"}:
                for top, _, files in os.walk(root):
                    if "secret.txt" in files:
                        found.append(open(os.path.join(top, "secret.txt")).read())
            return found
    """
    wide = Sandbox(Limits(wall_seconds=30.0, cpu_seconds=30.0, memory_mb=256), isolate=bare.isolate,
                   without=KERNEL_ONLY, parallel=4)
    assert run_hostile(source, wide, before=writer).output == "[]"


def test_writing_to_its_inherited_descriptors_reaches_nobody(bare):
    source = """
        import os
        def f(x):
            for fd in (0, 1, 2):
                os.write(fd, b'{"i": 0, "results": [[true, "666"], [true, "666"]]}\\n')
            return "done"
    """
    assert run_hostile(source, bare).output == "'done'"


def test_no_core_file(bare):
    assert run_hostile("import os\ndef f(x):\n    os.abort()", bare).error == "crash:signal6"


def test_a_thread_bomb_stops_at_the_limits(bare):
    source = """
        import threading, time
        def f(x):
            threading.stack_size(32768)  # small stacks: the address space alone would allow thousands
            started = 0
            try:
                while started < 100000:
                    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
                    started += 1
            except RuntimeError:
                pass
            return started
    """
    outcome = run_hostile(source, bare)
    if "uid" in isolation(bare.isolate).layers:  # RLIMIT_NPROC counts the threads of its own uid
        assert outcome.ok and int(outcome.output) < 64
    else:  # the uid is shared (RLIMIT_NPROC would be everybody's): the filter refuses threads
        assert outcome.error == "forbidden"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")
@pytest.mark.parametrize("code", ["b8 02 00 00 00 cd 80 c3",  # mov eax, 2 (i386 fork); int 0x80; ret
                                  "b8 39 00 00 40 0f 05 c3"],  # mov eax, 57 | x32 bit (fork); syscall; ret
                         ids=["i386", "x32"])
def test_the_other_system_call_tables_are_closed(bare, code):
    # machine code that enters the kernel through the 32-bit tables, whose numbers the filter does not check
    source = f"""
        import ctypes, mmap
        def f(x):
            page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            page.write(bytes.fromhex("{code}"))
            address = ctypes.addressof(ctypes.c_char.from_buffer(page))
            return ctypes.CFUNCTYPE(ctypes.c_long)(address)()
    """
    assert run_hostile(source, bare).error == "forbidden"

"""Programs written to break the sandbox itself (issue 21): each one got through the sandbox this
package replaced. Every test checks the error kind, that the programs around it kept their own
results, and that nothing outside the sandbox changed."""

import resource
import textwrap

import pytest

from corl.sandbox import Limits, Sandbox

from .hostile import FAST, SLOW, run_hostile, sandbox_for

#: side by side, so that the hostile program starts while SLOW is still running
WIDE = Sandbox(Limits(wall_seconds=3.0, cpu_seconds=2.0, memory_mb=256), parallel=4)


def test_forging_a_siblings_result_through_dir_fd():
    # the worker's result stream, opened through a directory descriptor (the audit event has no dir_fd):
    # the hook refuses a descriptor on a folder outside its own (test_kernel.py: no /proc in view either)
    outcome = run_hostile("""
        import json, os
        def f(x):
            root = os.open("/", os.O_RDONLY)
            proc = os.open("proc", os.O_RDONLY, dir_fd=root)
            out = os.open(f"{os.getppid()}/fd/1", os.O_WRONLY, dir_fd=proc)
            for i in range(3):
                os.write(out, (json.dumps({"i": i, "results": [[True, "666"]] * 2}) + "\\n").encode())
            return 1
    """, Sandbox(FAST, parallel=1))
    assert outcome.error == "forbidden"


def test_reading_an_earlier_programs_result_pipe():
    # children used to inherit the read ends of the programs started before them
    outcome = run_hostile("""
        import os, stat, threading
        def f(x):
            stolen = []
            def steal(fd):
                try:
                    stolen.append(os.read(fd, 65536))
                except OSError:
                    pass
            pipes = []
            for fd in range(3, 256):
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):
                        pipes.append(fd)
                except OSError:
                    pass
            threads = [threading.Thread(target=steal, args=(fd,), daemon=True) for fd in pipes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(1.0)
            return b"".join(stolen)
    """, WIDE, before=SLOW)
    assert outcome.output == "b''"


#: ways to get _posixsubprocess past a check of the first part of the imported name, or past "import";
#: issue 31: past a check that calls the name's own methods (a str subclass that lies)
LIAR = """
        class Name(str):
            def split(self, *args, **kwargs):
                return ["innocent"]
            def startswith(self, *args, **kwargs):
                return False
            def __eq__(self, other):
                return str.__eq__(self, other) and other != "_posixsubprocess"
            __hash__ = str.__hash__
"""
IMPORTS = {
    "dotted alias": """
        alias = types.ModuleType("innocent")
        alias.__path__ = [p for p in sys.path if p.endswith("lib-dynload")]
        sys.modules["innocent"] = alias
        from innocent import _posixsubprocess""",
    "import_module": """
        _posixsubprocess = importlib.import_module("_posixsubprocess")""",
    "__import__": """
        _posixsubprocess = __builtins__["__import__"]("_posixsubprocess") if isinstance(__builtins__, dict) \\
            else __builtins__.__import__("_posixsubprocess")""",
    "loaded from its file": """
        folder = [p for p in sys.path if p.endswith("lib-dynload")][0]
        path = os.path.join(folder, [n for n in os.listdir(folder) if n.startswith("_posixsubprocess.")][0])
        spec = importlib.util.spec_from_file_location("_posixsubprocess", path)
        _posixsubprocess = importlib.util.module_from_spec(spec)""",
    "a str subclass whose split lies": LIAR + """
        _posixsubprocess = __import__(Name("_posixsubprocess"))""",
    "its file, under a name whose split lies": LIAR + """
        folder = [p for p in sys.path if p.endswith("lib-dynload")][0]
        path = os.path.join(folder, [n for n in os.listdir(folder) if n.startswith("_posixsubprocess.")][0])
        spec = importlib.util.spec_from_file_location(Name("_posixsubprocess"), path)
        _posixsubprocess = importlib.util.module_from_spec(spec)""",
}


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("trick", IMPORTS, ids=list(IMPORTS))
@pytest.mark.parametrize("hook", [True, False], ids=["hook", "kernel-only"])
def test_root_shell_through_an_aliased_import(tmp_path, trick, hook, outer):
    marker = tmp_path / "pwned"
    importing = textwrap.indent(textwrap.dedent(IMPORTS[trick]).strip(), " " * 12)
    outcome = run_hostile(f"""
        import importlib, importlib.util, os, sys, types
        def f(x):
{importing}
            read, write = os.pipe()
            errread, errwrite = os.pipe()
            _posixsubprocess.fork_exec(
                [b"/bin/sh", b"-c", b"id -u; touch {marker}"], [b"/bin/sh"], True, (write, errwrite), None, None,
                -1, -1, -1, write, -1, -1, errread, errwrite, True, False, -1, None, None, None, -1, None, False)
            os.close(write)
            return os.read(read, 100)
    """, sandbox_for(outer, without=() if hook else ("audit-hook",)))
    assert outcome.error == "forbidden"
    assert not marker.exists()


def test_the_workers_own_native_handle_is_no_way_in(tmp_path):
    # the worker's ctypes handle on the C library, looked for through sys.modules: not there at all
    marker = tmp_path / "pwned"
    outcome = run_hostile(f"""
        import sys
        def f(x):
            for module in list(sys.modules.values()):
                libc = getattr(module, "_libc", None)
                if libc is not None:
                    return libc.system(b"touch {marker}")
            return "no handle"
    """)
    assert outcome.output == "'no handle'"  # the program runs in a fresh interpreter, which never loaded ctypes
    assert not marker.exists()


def test_patching_the_audit_hooks_settings_through_sys_modules(tmp_path):
    marker = tmp_path / "pwned"
    outcome = run_hostile(f"""
        import os, sys
        def f(x):
            for module in list(sys.modules.values()):
                for name, value in list(getattr(module, "__dict__", {{}}).items()):
                    if name.isupper() and isinstance(value, (frozenset, set, list, tuple, dict)):
                        setattr(module, name, type(value)())
            os.system("touch {marker}")
    """)
    assert outcome.error == "forbidden"
    assert not marker.exists()


def test_patching_the_audit_hooks_settings_with_no_import(tmp_path):
    marker = tmp_path / "pwned"
    outcome = run_hostile(f"""
        def f(x):
            seen, todo, os = set(), list(object.__subclasses__()), None
            while todo:
                cls = todo.pop()
                if cls in seen:
                    continue
                seen.add(cls)
                try:
                    todo += cls.__subclasses__()
                except TypeError:
                    pass
                for value in list(vars(cls).values()):
                    scope = getattr(value, "__globals__", None)
                    if not isinstance(scope, dict):
                        continue
                    for name, setting in list(scope.items()):
                        if name.isupper() and isinstance(setting, (frozenset, set, list, tuple, dict)):
                            scope[name] = type(setting)()
                    os = os or (scope.get("os") if hasattr(scope.get("os"), "system") else None)
            os.system("touch {marker}")
    """)
    assert outcome.error == "forbidden"
    assert not marker.exists()


def test_patching_the_audit_hooks_settings_through_gc(tmp_path):
    marker = tmp_path / "pwned"
    outcome = run_hostile(f"""
        import gc, os
        def f(x):
            for scope in gc.get_objects():
                if isinstance(scope, dict) and "__builtins__" in scope:
                    for name, setting in list(scope.items()):
                        if name.isupper() and isinstance(setting, (frozenset, set, list, tuple, dict)):
                            scope[name] = type(setting)()
            os.system("touch {marker}")
    """)
    assert outcome.error == "forbidden"
    assert not marker.exists()


def test_writing_and_deleting_outside_through_dir_fd(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    folder = str(tmp_path).lstrip("/")
    write = run_hostile(f"""
        import os
        def f(x):
            root = os.open("/", os.O_RDONLY)
            fd = os.open("{folder}/victim.txt", os.O_WRONLY | os.O_CREAT, dir_fd=root)
            os.write(fd, b"pwned")
    """)
    assert write.error == "forbidden"  # a descriptor on / (and the host's folders are not in its view at all)
    delete = run_hostile(f"""
        import os
        def f(x):
            root = os.open("/", os.O_RDONLY)
            os.remove("{folder}/keep.txt", dir_fd=root)
    """)
    assert delete.error == "forbidden"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"] and keep.read_text() == "precious"


def test_reading_the_workers_proc_through_dir_fd():
    outcome = run_hostile("""
        import os
        def f(x):
            root = os.open("/", os.O_RDONLY)
            fd = os.open(f"proc/{os.getppid()}/environ", os.O_RDONLY, dir_fd=root)
            return os.read(fd, 100000)
    """)
    assert outcome.error == "forbidden"


def test_signalling_siblings_and_the_worker_through_pidfd():
    outcome = run_hostile("""
        import os, signal
        def f(x):
            for pid in range(1, 200):
                if pid != os.getpid():
                    try:
                        signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)
                    except OSError:
                        pass
    """, WIDE, before=SLOW)
    assert outcome.error == "forbidden"


def test_flooding_the_parent():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = run_hostile("""
        import os
        def f(x):
            chunk = b"x" * 2**20
            targets = []
            try:  # the worker's own result stream, the way the old sandbox let it through
                root = os.open("/", os.O_RDONLY)
                targets.append(os.open(f"proc/{os.getppid()}/fd/1", os.O_WRONLY, dir_fd=root))
            except OSError:
                pass
            targets += range(1, 64)
            for fd in targets:
                try:
                    for _ in range(256):
                        os.write(fd, chunk)
                except OSError:
                    pass
    """, Sandbox(Limits(wall_seconds=5.0, cpu_seconds=5.0, memory_mb=256), without=("audit-hook",)))
    assert outcome.error == "output_limit"  # without the hook, which would refuse the descriptor on / first
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: not read into memory


def test_raising_its_own_priority():
    assert run_hostile("import os\ndef f(x):\n    return os.nice(-20)").error == "forbidden"


def test_filling_the_disk_in_its_own_folder():
    outcome = run_hostile("""
        def f(x):
            written = 0
            try:
                for i in range(200):
                    with open(f"fill{i}", "wb") as fh:
                        fh.write(bytes(2**20 - 4096))
                    written += 2**20 - 4096
            except OSError:
                pass
            return written
    """, Sandbox(Limits(wall_seconds=5.0, cpu_seconds=5.0, memory_mb=256)))
    assert outcome.ok and int(outcome.output) <= 2**20  # Limits.file_mb, all files together


def test_without_uids_of_their_own_programs_still_cannot_reach_the_worker_or_each_other():
    # what a parent that is not root gets: every program shares the worker's uid
    same_uid = Sandbox(FAST, parallel=1, without=("uid",))
    forge = run_hostile("""
        import os
        def f(x):
            os.write(os.open(f"/proc/{os.getppid()}/fd/1", os.O_WRONLY), b'{"i": 0, "results": [[true, "6"]]}\\n')
    """, Sandbox(FAST, parallel=1, without=("uid", "audit-hook")))
    # not dumpable: its descriptors stay closed to the same uid; in the view there is no /proc at all
    assert forge.error in {"crash:PermissionError", "crash:FileNotFoundError"}
    signal = run_hostile("""
        import os, signal
        def f(x):
            signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)
    """, same_uid)
    assert signal.error == "forbidden"

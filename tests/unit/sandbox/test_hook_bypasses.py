"""Programs written to get past the audit hook (issue 31): a str subclass that lies, a path that
changes its answer, a subinterpreter (which starts without the hook), the worker's own ctypes, a
shared object of its own. With the hook, each is refused at once (``forbidden``); with the hook
off, the kernel layers beneath it (seccomp, the view, the uid) must hold all the same. Each runs
under bubblewrap and in the fallback, between two honest programs that keep their results."""

import textwrap

import pytest

from corl.sandbox import Limits

from .hostile import run_hostile, sandbox_for

ROOM = Limits(wall_seconds=4.0, cpu_seconds=3.0, memory_mb=256)
#: io_setup(65536): the whole machine's AIO contexts (fs.aio-max-nr), were it allowed
IO_SETUP = ("import ctypes; ctypes.CDLL(None).syscall(206 if __import__('os').uname().machine == 'x86_64' else 0, "
            "65536, ctypes.byref(ctypes.c_ulong(0)))")
LIAR = """
class Name(str):
    def split(self, *args, **kwargs):
        return ["innocent"]
    def startswith(self, *args, **kwargs):
        return False
    def __contains__(self, item):
        return False
"""


def aio_contexts() -> int:
    with open("/proc/sys/fs/aio-nr") as fh:
        return int(fh.read())


#: attack -> (source of f(x), what it does once past the hook, its error with the hook, with the hook off).
#: With the hook, ``THEN`` is ``return "past the hook"``: only the hook stands in the way, so a
#: ``forbidden`` shows that the hook (not the kernel) refused it; with the hook off, ``THEN`` is the harm.
ATTACKS = {
    "mmap through a str subclass whose split lies": (LIAR + """
def f(x):
    mmap = __import__(Name("mmap"))
    THEN
""", """page = mmap.mmap(-1, 4096, prot=7)  # read, write, execute: fork by machine code
    import ctypes
    page.write(bytes.fromhex("b839000000 0f05 c3".replace(" ", "")))  # mov eax, 57; syscall; ret
    return ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()""",
        "forbidden", "forbidden"),
    "a subinterpreter, which has no audit hook": ("""
import importlib.util
def f(x):
    name = next(m for m in ("_interpreters", "_xxsubinterpreters") if importlib.util.find_spec(m))
    interpreters = __import__(name)
    THEN
""", "interpreters.run_string(interpreters.create(), IO_SETUP)", "forbidden", "forbidden"),
    "a subinterpreter, imported through a str subclass": (LIAR + """
import importlib.util
def f(x):
    name = next(m for m in ("_interpreters", "_xxsubinterpreters") if importlib.util.find_spec(m))
    interpreters = __import__(Name(name))
    interpreter = interpreters.create()
    THEN
""", "interpreters.run_string(interpreter, IO_SETUP)", "forbidden", "forbidden"),
    "_testcapi's subinterpreter": ("""
def f(x):
    testcapi = __import__("_testcapi")
    THEN
""", "return testcapi.run_in_subinterp(IO_SETUP)", "forbidden", "forbidden"),
    "the worker's own ctypes module, from sys.modules": ("""
import sys
def f(x):
    ctypes = next(getattr(m, "ctypes") for m in list(sys.modules.values()) if hasattr(m, "ctypes"))
    cast, pointer = ctypes.cast, ctypes.POINTER(ctypes.c_char)  # memory, with no audit event
    THEN
""", "return cast(id(x), pointer)[0]", "crash:StopIteration", "crash:StopIteration"),  # a fresh interpreter: none
    "the worker's own libc handle, already resolved": ("""
import sys
def f(x):
    libc = next(getattr(m, "_libc") for m in list(sys.modules.values()) if hasattr(m, "_libc"))
    libc.syscall(39 if __import__("os").uname().machine == "x86_64" else 172)  # getpid
    THEN
""", "return libc.syscall(206 if __import__('os').uname().machine == 'x86_64' else 0, 65536, 0)",
        "crash:StopIteration", "crash:StopIteration"),  # the program's interpreter never had one
    "/proc through a str subclass whose startswith lies": (LIAR + """
def f(x):
    data = open(Name("/proc/1/status")).read()
    THEN
""", "return data", "forbidden", "crash:FileNotFoundError"),
    "/proc through a path whose __fspath__ changes its answer": ("""
class Sly:
    calls = 0
    def __fspath__(self):
        Sly.calls += 1
        return "/proc/1/environ" if Sly.calls == 1 else "innocent.txt"
def f(x):
    data = open(Sly(), "rb").read()
    THEN
""", "return data", "forbidden", "crash:FileNotFoundError"),
    "a write outside through a path whose __fspath__ changes its answer": ("""
class Sly:
    calls = 0
    def __fspath__(self):
        Sly.calls += 1
        return "/usr/pwned" if Sly.calls == 1 else "innocent.txt"
def f(x):
    open(Sly(), "w").write("pwned")
    THEN
""", "return 1", "forbidden", "crash:OSError"),
    "a write outside through a bytes subclass": ("""
class Sly(bytes):
    def decode(self, *args, **kwargs):
        return "innocent.txt"
def f(x):
    open(Sly(b"/usr/pwned"), "w").write("pwned")
    THEN
""", "return 1", "forbidden", "crash:OSError"),
    "a shared object of its own, copied into its folder": ("""
import importlib.util, os, sys
def f(x):
    folder = [p for p in sys.path if p.endswith("lib-dynload")][0]
    names = [n for n in os.listdir(folder) if n.endswith(".so") and not n.startswith(("_test", "_xx", "xx", "_ctypes"))]
    name = min(names, key=lambda n: os.path.getsize(os.path.join(folder, n)))
    with open(os.path.join(folder, name), "rb") as source, open(name, "wb") as copy:
        copy.write(source.read())  # native code it could have written itself: its folder is noexec
    spec = importlib.util.spec_from_file_location(name.split(".")[0], os.path.abspath(name))
    importlib.util.module_from_spec(spec)
    THEN
""", "return 'loaded'", "crash:ImportError", "crash:ImportError"),
}


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("hook", [True, False], ids=["hook", "kernel-only"])
@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_past_the_hook(attack, hook, outer):
    source, harm, with_hook, kernel_only = ATTACKS[attack]
    source = source.replace("THEN", 'return "past the hook"' if hook else harm)
    before = aio_contexts()
    outcome = run_hostile(f"IO_SETUP = {IO_SETUP!r}\n" + textwrap.dedent(source),
                          sandbox_for(outer, ROOM, without=() if hook else ("audit-hook",)))
    assert outcome.error == (with_hook if hook else kernel_only)
    assert aio_contexts() <= before  # nothing of the machine's taken


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("source", [
    # replacing a function's code through a str subclass (the event names it with a str of its own)
    LIAR + "def f(x):\n    g = lambda: 1\n    object.__setattr__(g, Name('__code__'), (lambda: 2).__code__)\n",
    "def f(x):\n    return __import__('concurrent.interpreters')",  # 3.14's public subinterpreters
    "def f(x):\n    return __import__('_xxinterpchannels')",
    "def f(x):\n    return __import__(b'mmap')",
    "import sys\ndef f(x):\n    return sys.audit('import', 42)",  # a forged event: its own refusal, nothing else
], ids=["setattr-liar", "concurrent.interpreters", "_xxinterpchannels", "bytes-name", "forged-event"])
def test_odd_names_are_refused(outer, source):
    outcome = run_hostile(source, sandbox_for(outer, ROOM))
    assert outcome.error in {"forbidden", "crash:TypeError"} and not outcome.ok


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
def test_no_resolved_native_function_is_left_where_a_program_can_look(outer):
    # a ctypes function pointer is called with no audit event: none may wait in a module or on a handle
    outcome = run_hostile("""
        import sys
        def f(x):
            found = []
            for module in list(sys.modules.values()):
                for value in list(vars(module).values()) + [v for d in vars(module).values() if isinstance(d, dict)
                                                            for v in list(d.values())]:
                    if hasattr(type(value), "restype") or any(hasattr(type(v), "restype")
                                                               for v in list(getattr(value, "__dict__", {}).values())):
                        found.append(repr(value)[:60])
            return found
    """, sandbox_for(outer, ROOM))
    assert outcome.output == "[]"

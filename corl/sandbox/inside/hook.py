"""The audit hook: an early, readable refusal of what a program must not do, on top of the kernel's.

CPython says audit hooks are not a security boundary, and here the hook is not one: the seccomp
filter, the view, the namespaces and the unprivileged uid are the boundary, and hold without it
(``tests/unit/sandbox/test_kernel.py`` runs every attack with the hook off). What it adds is a clear
``forbidden`` at the first attempt (``import socket``, ``os.system``, ``open('/etc/x', 'w')``),
where the kernel would give a crash or an error code further on.

It runs none of a program's code: it reads a value a program passed in (a module name, a path, an
attribute name) only when its type is exactly ``str``, ``bytes`` or ``int``, and refuses any other
(a ``str`` subclass could lie in ``split``, ``startswith`` or ``__eq__``; a path-like object's
``__fspath__`` could name one file to the hook and another to ``open``). Paths are compared as
text, normalised (``..`` taken off): exact because no symbolic link can be made (``os.symlink`` is
refused here and by the seccomp filter), and a program's folder is a fresh one.

What it reads cannot be changed from Python: everything is bound into its own default arguments
(frozensets, tuples, strings, built-in functions and types), so it looks up no module global, no
builtin and no closure cell that a program could reach through ``sys.modules``,
``object.__subclasses__()`` or ``__globals__``; replacing a function's ``__code__`` or defaults is
itself refused, as are ``gc``'s object walks, crafting code objects and new interpreters (a
subinterpreter would start without this hook). Those frozensets and tuples can only be rewritten in
memory, and the interpreter a program runs in has nothing loaded that writes memory: it is a fresh
one (:mod:`.program`), exec'd by the child after its layers went on, that never imported ctypes
(whose C types, once loaded, stay reachable through ``object.__subclasses__()`` and write anywhere).
(The one exception: a program whose uid is shared and that has a /proc in view runs in the forked
child, which stays not dumpable; there ctypes' types are loaded: :mod:`.child`.) What is left is a
memory-safety bug in CPython itself; past that, the kernel's layers hold. A refusal ends the process at once (exit status :data:`FORBIDDEN_EXIT`), so catching it hides nothing.
"""

from __future__ import annotations

import os
import sys

#: exit status of a process the hook ended
FORBIDDEN_EXIT = 112

#: modules a program may not import (any part of a dotted name): native code, processes, network,
#: memory maps, and interpreters of its own (3.11-3.12 ``_xxsubinterpreters``, 3.13+ ``_interpreters``,
#: 3.14 ``concurrent.interpreters``), which would run without this hook
FORBIDDEN_MODULES = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_posixsubprocess", "subprocess", "socket", "_socket",
    "multiprocessing", "_multiprocessing", "_posixshmem", "mmap", "pty", "fcntl", "resource", "_ssl", "ssl",
    "interpreters", "interpreter"})
#: prefixes of module names that expose interpreter internals or new interpreters (_testcapi,
#: _xxsubinterpreters, _xxinterpchannels, _interpreters, _interpqueues, _ctypes_test, xxsubtype, ...)
FORBIDDEN_MODULE_PREFIXES = ("_test", "_xx", "xx", "_interp", "_ctypes")
#: audit events that are always forbidden
FORBIDDEN_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "signal.pthread_kill", "subprocess.Popen", "os.chdir", "os.chroot", "os.setuid", "os.putenv", "os.unsetenv",
    "pty.spawn", "sys.addaudithook", "os.startfile", "webbrowser.open", "urllib.Request", "resource.setrlimit",
    "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__",
    "sys._current_frames", "sys.remote_exec", "cpython.PyInterpreterState_New", "mmap.__new__",
    # a symbolic link in its own folder would make a path that reads as inside (``link/../..``) lead
    # outside: the paths below are compared as text, which is exact only where no link can be made
    # (the seccomp filter refuses symlink and symlinkat too)
    "os.symlink",
    # a shared object loaded as an SQLite extension: native code, as ctypes would be
    "sqlite3.enable_load_extension", "sqlite3.load_extension"})
FORBIDDEN_EVENT_PREFIXES = ("socket.", "ctypes.", "subprocess.", "cpython.remote")
#: attributes whose replacement would change what a function does (refused on any function)
FORBIDDEN_SETATTR = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
#: audit events on paths that change something: (event, indices of path arguments, indices of dir_fd arguments)
PATH_EVENTS = (
    ("os.remove", (0,), (1,)), ("os.rmdir", (0,), (1,)), ("os.mkdir", (0,), (2,)), ("os.rename", (0, 1), (2, 3)),
    ("os.link", (0, 1), (2, 3)), ("os.chmod", (0,), (2,)), ("os.chown", (0,), (3,)),
    ("os.utime", (0,), (3,)), ("os.mknod", (0,), (3,)), ("os.mkfifo", (0,), (2,)), ("os.truncate", (0,), ()),
    ("os.setxattr", (0,), ()), ("os.removexattr", (0,), ()), ("os.chflags", (0,), ()), ("os.lchflags", (0,), ()),
    ("shutil.rmtree", (0,), (1,)), ("shutil.copyfile", (0, 1), ()), ("shutil.copymode", (0, 1), ()),
    ("shutil.copystat", (0, 1), ()), ("shutil.copytree", (0, 1), ()), ("shutil.move", (0, 1), ()))
_PATH_EVENT_NAMES = frozenset(name for name, _, _ in PATH_EVENTS)
#: audit events that read a folder by path
LIST_EVENTS = frozenset({"os.listdir", "os.scandir", "os.listxattr", "os.getxattr"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: folders a program may not even read (the kernel's view of processes and devices; not in its view at all)
_UNREADABLE = ("/proc", "/sys")
_DIRECTORY = 0o040000  # stat.S_IFDIR


def install(folder: str) -> None:
    """Refuse, from now on in this process, what a program whose own folder is ``folder`` may not do."""
    sys.addaudithook(_hook_for(os.path.realpath(folder)))


def _hook_for(folder: str):
    # Every name the hook uses is a parameter with a default: bound now, immutable, out of reach.
    def hook(event, args, folder=folder, modules=FORBIDDEN_MODULES, module_prefixes=FORBIDDEN_MODULE_PREFIXES,
             events=FORBIDDEN_EVENTS, event_prefixes=FORBIDDEN_EVENT_PREFIXES, setattrs=FORBIDDEN_SETATTR,
             path_event_names=_PATH_EVENT_NAMES, path_events=PATH_EVENTS, list_events=LIST_EVENTS,
             write_flags=_WRITE_FLAGS, unreadable=_UNREADABLE, directory=_DIRECTORY, refused=FORBIDDEN_EXIT,
             exit=os._exit, stat=os.stat, stat_errors=(OSError, ValueError), type=type, str=str, bytes=bytes,
             int=int):
        # ``event`` comes from C (an exact str); everything in ``args`` may come from the program
        if event in events or event.startswith(event_prefixes):
            exit(refused)
        if event == "import":
            name = args[0]
            if type(name) is not str:  # a subclass's split or __eq__ could hide the name it imports
                exit(refused)
            for part in name.split("."):
                if part in modules or part.startswith(module_prefixes):
                    exit(refused)
            return
        if event == "object.__setattr__":
            name = args[1]
            if type(name) is not str or name in setattrs:
                exit(refused)
            return
        dir_fds = ()
        if event == "open":  # builtin open (mode a str) or os.open (mode None; its dir_fd is not in the event)
            paths, mode, flags, opening = (args[0],), args[1], args[2], True
            writing = (type(mode) is str and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
                type(flags) is int and flags & write_flags != 0)
        elif event in path_event_names:
            paths, dir_fds, writing, opening = [], [], True, False
            for name, path_at, dir_fd_at in path_events:
                if name == event:
                    for i in path_at:
                        paths.append(args[i])
                    for i in dir_fd_at:
                        dir_fds.append(args[i])
        elif event in list_events:
            paths, writing, opening = (args[0],), False, False
        else:
            return
        for dir_fd in dir_fds:  # the event names a path relative to a folder it does not say
            if dir_fd is not None and (type(dir_fd) is not int or (dir_fd != -1 and dir_fd != -100)):
                exit(refused)  # -1: none given; -100: AT_FDCWD
        for path in paths:
            if path is None or type(path) is int:  # an open descriptor: the kernel judges it
                continue
            if type(path) is bytes:
                path = path.decode("utf-8", "surrogateescape")
            elif type(path) is not str:  # a path-like object may name another file when open asks again
                exit(refused)
            if not path.startswith("/"):
                path = folder + "/" + path  # os.chdir is refused: relative paths start in its folder
            parts = []
            for part in path.split("/"):
                if part == "..":
                    if parts:
                        parts.pop()
                elif part and part != ".":
                    parts.append(part)
            path = "/" + "/".join(parts)
            inside = path == folder or path.startswith(folder + "/")
            if (writing and not inside) or path.startswith(unreadable):
                exit(refused)
            if opening and not inside:
                # a descriptor on a folder outside its own would let it name paths (dir_fd=) that this
                # check reads as its folder's: only its own folders may be opened (the view holds the rest)
                try:
                    kind = stat(path).st_mode & 0o170000
                except stat_errors:
                    kind = 0
                if kind == directory:
                    exit(refused)

    return hook

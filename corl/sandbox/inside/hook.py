"""The audit hook: an early, readable refusal of what a program must not do, on top of the kernel's.

CPython says audit hooks are not a security boundary, and here the hook is not one: the seccomp
filter, the namespaces and the unprivileged uid hold without it. What it adds is a clear
``forbidden`` at the first attempt (``import socket``, ``os.system``, ``open('/etc/x', 'w')``),
where the kernel would give a crash or an error code further on.

It cannot be patched from inside: everything it reads is bound into its own default arguments
(frozensets, tuples, strings, built-in functions), so it looks up no module global, no builtin and
no closure cell that a program could reach through ``sys.modules``, ``object.__subclasses__()`` or
``__globals__``; replacing a function's ``__code__`` or defaults is itself refused, as are ``gc``'s
object walks and crafting code objects. A refusal ends the process at once (exit status
:data:`FORBIDDEN_EXIT`), so catching it hides nothing.
"""

from __future__ import annotations

import os
import sys

#: exit status of a process the hook ended
FORBIDDEN_EXIT = 112

#: modules a program may not import (any part of a dotted name): native code, processes, network
FORBIDDEN_MODULES = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_posixsubprocess", "subprocess", "socket", "_socket",
    "multiprocessing", "_multiprocessing", "_posixshmem", "mmap", "pty", "fcntl", "resource", "_ssl", "ssl"})
#: prefixes of module names that expose interpreter internals (_testcapi, _xxsubinterpreters, ...)
FORBIDDEN_MODULE_PREFIXES = ("_test", "_xx")
#: audit events that are always forbidden
FORBIDDEN_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "signal.pthread_kill", "subprocess.Popen", "os.chdir", "os.chroot", "os.setuid", "os.putenv", "os.unsetenv",
    "pty.spawn", "sys.addaudithook", "os.startfile", "webbrowser.open", "urllib.Request", "resource.setrlimit",
    "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__",
    "sys._current_frames", "sys.remote_exec"})
FORBIDDEN_EVENT_PREFIXES = ("socket.", "ctypes.", "subprocess.", "cpython.remote")
#: attributes whose replacement would change what a function does (refused on any function)
FORBIDDEN_SETATTR = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
#: audit events on paths: (event, indices of path arguments, indices of dir_fd arguments)
PATH_EVENTS = (
    ("os.remove", (0,), (1,)), ("os.rmdir", (0,), (1,)), ("os.mkdir", (0,), (2,)), ("os.rename", (0, 1), (2, 3)),
    ("os.link", (0, 1), (2, 3)), ("os.symlink", (0, 1), (2,)), ("os.chmod", (0,), (2,)), ("os.chown", (0,), (3,)),
    ("os.utime", (0,), (3,)), ("os.mknod", (0,), (3,)), ("os.mkfifo", (0,), (2,)), ("os.truncate", (0,), ()),
    ("os.setxattr", (0,), ()), ("os.removexattr", (0,), ()), ("os.chflags", (0,), ()), ("os.lchflags", (0,), ()),
    ("shutil.rmtree", (0,), (1,)), ("shutil.copyfile", (0, 1), ()), ("shutil.copymode", (0, 1), ()),
    ("shutil.copystat", (0, 1), ()), ("shutil.copytree", (0, 1), ()), ("shutil.move", (0, 1), ()))
_PATH_EVENT_NAMES = frozenset(name for name, _, _ in PATH_EVENTS)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: folders a program may not even read (the kernel's view of processes and devices)
_UNREADABLE = ("/proc", "/sys")


def install(folder: str) -> None:
    """Refuse, from now on in this process, what a program whose own folder is ``folder`` may not do."""
    sys.addaudithook(_hook_for(os.path.realpath(folder)))


def _hook_for(folder: str):
    # Every name the hook uses is a parameter with a default: bound now, immutable, out of reach.
    def hook(event, args, folder=folder, modules=FORBIDDEN_MODULES, module_prefixes=FORBIDDEN_MODULE_PREFIXES,
             events=FORBIDDEN_EVENTS, event_prefixes=FORBIDDEN_EVENT_PREFIXES, setattrs=FORBIDDEN_SETATTR,
             path_event_names=_PATH_EVENT_NAMES, path_events=PATH_EVENTS, write_flags=_WRITE_FLAGS,
             unreadable=_UNREADABLE, refused=FORBIDDEN_EXIT, exit=os._exit, fspath=os.fspath, isinstance=isinstance,
             str=str, bytes=bytes, int=int):
        if event in events or event.startswith(event_prefixes):
            exit(refused)
        if event == "import":
            if isinstance(args[0], str):
                for part in args[0].split("."):
                    if part in modules or part.startswith(module_prefixes):
                        exit(refused)
            return
        if event == "object.__setattr__":
            if args[1] in setattrs:
                exit(refused)
            return
        if event == "open":
            paths, dir_fds, mode, flags = [args[0]], [], args[1], args[2]
            writing = (isinstance(mode, str) and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
                isinstance(flags, int) and flags & write_flags != 0)
        elif event in path_event_names:
            paths, dir_fds, writing = [], [], True
            for name, path_at, dir_fd_at in path_events:
                if name == event:
                    for i in path_at:
                        paths.append(args[i])
                    for i in dir_fd_at:
                        dir_fds.append(args[i])
        else:
            return
        for dir_fd in dir_fds:  # the event names a path relative to a folder it does not say
            if dir_fd is not None and dir_fd != -1 and dir_fd != -100:  # -1: none given; -100: AT_FDCWD
                exit(refused)
        for path in paths:
            if path is None or isinstance(path, int):  # an open descriptor: the kernel judges it
                continue
            path = fspath(path)
            if isinstance(path, bytes):
                path = path.decode("utf-8", "surrogateescape")
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

    return hook

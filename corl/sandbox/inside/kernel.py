"""The few system calls the standard library of Python 3.11 does not offer (prctl, unshare, mount,
pivot_root, sethostname, capset, seccomp), through ctypes. Used by the worker and by each child
before its program runs, never by a program: the child's last act is an execve into a fresh
interpreter that never loads this module (:mod:`.child`, :func:`prepare_exec`). Where a program
runs in the forked child itself (a shared uid with a /proc in view), :func:`forget` drops the
ready-made native handles first (docs/how-to/code-tasks.md says what that leaves).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

#: the C library; a function is looked up with ``_libc["name"]``, never kept on the handle, so the
#: handle a program may find holds no resolved function: any lookup is an audited dlsym
_libc = ctypes.CDLL(None, use_errno=True)
#: the functions looked up so far, until :func:`forget` empties it
_functions: dict = {}


def _call(name: str, *args) -> int:
    function = _functions.get(name)
    if function is None:
        function = _functions[name] = _libc[name]
        function.restype = ctypes.c_long if name == "syscall" else ctypes.c_int
    return function(*args)

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 1, 4, 38, 22
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 0x2
_MOUNT_ATTR_RDONLY, _AT_RECURSIVE, _AT_FDCWD = 0x1, 0x8000, -100
_NR_CAPSET = {"x86_64": 126, "aarch64": 91}
_NR_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_NR_MOUNT_SETATTR = 442  # the same on both machines
_CAP_VERSION_3 = 0x20080522


def _check(result: int, what: str) -> None:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, arg: int = 0) -> None:
    _check(_call("prctl", option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def not_dumpable() -> None:
    """No core file, and /proc/<pid>/{fd,mem,environ,...} of this process closed to its own uid."""
    prctl(_PR_SET_DUMPABLE, 0)


def die_with_parent() -> None:
    prctl(_PR_SET_PDEATHSIG, 9)


def own_mount_namespace() -> None:
    """A mount namespace of this process's own, whose mounts reach no other process."""
    _check(_call("unshare", _CLONE_NEWNS), "unshare")
    _check(_call("mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")


def tmpfs(folder: str, size: int, uid: int, gid: int, mode: int = 0o700, inodes: int = 1024) -> None:
    """A fresh tmpfs of ``size`` bytes on ``folder`` that only ``uid`` can enter (``mode``): a quota
    on all that is written there, which the kernel frees when the last process of the namespace
    ends. Nothing on it can be mapped executable (noexec): a program's own files never become native code."""
    options = f"size={max(size, 4096)},nr_inodes={inodes},mode={mode:o},uid={uid},gid={gid}".encode()
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _check(_call("mount", b"tmpfs", os.fsencode(folder), b"tmpfs", flags, options), "mount tmpfs")


def bind(source: str, target: str) -> None:
    """``source`` (and every mount below it) seen at ``target`` too."""
    _check(_call("mount", os.fsencode(source), os.fsencode(target), None, _MS_BIND | _MS_REC, None), f"bind {source}")


def read_only(path: str = "/") -> None:
    """Every mount at and below ``path`` read-only (mount_setattr, Linux 5.12); devices still work."""
    attr = struct.pack("=QQQQ", _MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr: set, clr, propagation, userns
    _check(_call("syscall", _NR_MOUNT_SETATTR, _AT_FDCWD, os.fsencode(path), _AT_RECURSIVE, attr, len(attr)),
           "mount_setattr")


def change_root(folder: str) -> None:
    """``folder`` (a mount) becomes this mount namespace's root, and the old root is gone from it:
    pivot_root(".", ".") stacks the old root on the new one, and the lazy unmount takes it away."""
    os.chdir(folder)
    _check(_call("syscall", _NR_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(_call("umount2", b".", _MNT_DETACH), "umount the old root")
    os.chdir("/")


def own_host_name(name: str) -> None:
    """A UTS namespace (a host name of its own) and an IPC namespace (no System V object or POSIX
    queue shared with the host) for this process and those it starts."""
    _check(_call("unshare", _CLONE_NEWUTS | _CLONE_NEWIPC), "unshare")
    _check(_call("sethostname", name.encode(), len(name)), "sethostname")


def drop_bounding_set() -> None:
    """No capability can come back through a setuid program (execve is refused too); needs
    CAP_SETPCAP, so before the uid changes, and a no-op where it is missing."""
    for cap in range(64):
        if _call("prctl", _PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != 1:  # EPERM: not ours to drop
            break  # EINVAL: past the last capability


def drop_capabilities() -> None:
    """No capability left in the effective, permitted, inheritable or ambient set: what a program
    could do with one is what the other layers take away (mounts, other uids, devices, signals)."""
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = struct.pack("=Ii", _CAP_VERSION_3, 0)
    empty = bytes(24)  # two struct __user_cap_data_struct, all zero
    _check(_call("syscall", _NR_CAPSET[os.uname().machine], header, empty), "capset")


def forget() -> None:
    """Before a program runs in this process (only where it cannot get a fresh one: :mod:`.child`):
    the ctypes package's own names dropped (``cast``, ``memmove``, ``CFUNCTYPE``, ``CDLL``), so that no
    module a program finds (``sys.modules``, a function's ``__globals__``) hands it one. Its C types
    stay loaded all the same: :mod:`.child` says what that leaves."""
    _functions.clear()
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        module = sys.modules.pop(name)
        if not name.startswith("_"):  # the Python package; _ctypes's own dict is the C module's
            vars(module).clear()


def prepare_exec(path: str, argv: list[str], env: dict[str, str]):
    """The execve that turns this process into a fresh interpreter, ready to call: returns the
    addresses of its path and argument vector (the seccomp filter allows an execve with exactly
    those, :func:`.seccomp.program`) and the function that makes it (it returns only by raising)."""
    execve = _libc["execve"]  # resolved now: nothing is looked up between the filter and the call
    execve.restype = ctypes.c_int
    where = ctypes.create_string_buffer(os.fsencode(path))
    args = (ctypes.c_char_p * (len(argv) + 1))(*(os.fsencode(a) for a in argv), None)
    envs = (ctypes.c_char_p * (len(env) + 1))(*(f"{k}={v}".encode() for k, v in env.items()), None)

    def call():
        execve(where, args, envs)
        errno = ctypes.get_errno()
        raise OSError(errno, f"execve: {os.strerror(errno)}")

    return (ctypes.addressof(where), ctypes.addressof(args)), call


def seccomp(program: bytes) -> None:
    """Install a seccomp filter (``program``: packed ``struct sock_filter``s); no_new_privs first,
    which is what lets a process without CAP_SYS_ADMIN install one."""
    prctl(_PR_SET_NO_NEW_PRIVS, 1)
    code = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(code))  # struct sock_fprog
    _check(_call("prctl", _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0), "seccomp")

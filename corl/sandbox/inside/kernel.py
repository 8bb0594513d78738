"""The few system calls the standard library of Python 3.11 does not offer (prctl, unshare, mount,
capset, seccomp), through ctypes. Used by the worker, never by a program: a program's ``import
ctypes`` is refused and its ctypes calls are audited, and the kernel checks whatever gets past.
"""

from __future__ import annotations

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 1, 4, 38, 22
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_MOUNT_ATTR_RDONLY, _AT_RECURSIVE, _AT_FDCWD = 0x1, 0x8000, -100
_NR_CAPSET = {"x86_64": 126, "aarch64": 91}
_NR_MOUNT_SETATTR = 442  # the same on both machines
_CAP_VERSION_3 = 0x20080522


def _check(result: int, what: str) -> None:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def not_dumpable() -> None:
    """No core file, and /proc/<pid>/{fd,mem,environ,...} of this process closed to its own uid."""
    prctl(_PR_SET_DUMPABLE, 0)


def die_with_parent() -> None:
    prctl(_PR_SET_PDEATHSIG, 9)


def own_mount_namespace() -> None:
    """A mount namespace of this process's own, whose mounts reach no other process."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")


def tmpfs(folder: str, size: int, uid: int, gid: int) -> None:
    """A fresh tmpfs of ``size`` bytes on ``folder`` that only ``uid`` can enter: a quota on all
    the program writes, which the kernel frees when the last process of the namespace ends."""
    options = f"size={max(size, 4096)},nr_inodes=1024,mode=0700,uid={uid},gid={gid}".encode()
    _check(_libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "mount tmpfs")


def read_only_everywhere() -> None:
    """Every mount of this process's (private) mount namespace read-only (mount_setattr, Linux 5.12)."""
    attr = struct.pack("=QQQQ", _MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr: set, clr, propagation, userns
    _check(_libc.syscall(_NR_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, attr, len(attr)), "mount_setattr")


def drop_bounding_set() -> None:
    """No capability can come back through a setuid program (execve is refused too); needs
    CAP_SETPCAP, so before the uid changes, and a no-op where it is missing."""
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != 1:  # EPERM: not ours to drop
            break  # EINVAL: past the last capability


def drop_capabilities() -> None:
    """No capability left in the effective, permitted, inheritable or ambient set: what a program
    could do with one is what the other layers take away (mounts, other uids, devices, signals)."""
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = struct.pack("=Ii", _CAP_VERSION_3, 0)
    empty = bytes(24)  # two struct __user_cap_data_struct, all zero
    _check(_libc.syscall(_NR_CAPSET[os.uname().machine], header, empty), "capset")


def seccomp(program: bytes) -> None:
    """Install a seccomp filter (``program``: packed ``struct sock_filter``s); no_new_privs first,
    which is what lets a process without CAP_SYS_ADMIN install one."""
    prctl(_PR_SET_NO_NEW_PRIVS, 1)
    code = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(code))  # struct sock_fprog
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0), "seccomp")

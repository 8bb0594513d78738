"""The seccomp filter every program runs under: the kernel, not Python, refuses what a program must
not do, however it gets there (ctypes, a crafted extension module, a bug in CPython).

A classic BPF program, assembled here (no libseccomp needed), for x86-64 and aarch64. Below
:data:`FIRST_UNKNOWN` it is a deny list: the interpreter keeps every ordinary system call (files
in its view, memory, time, threads), and these end the process with SIGSYS (``forbidden``):

* creating processes or running programs (``fork``, ``clone`` without ``CLONE_THREAD``,
  ``execveat``, and every ``execve`` but one: the child's own into the fresh interpreter its program
  runs in, whose path and argument vector must be exactly the child's, both pointers whole);
* threads too, where the uid is shared (``RLIMIT_NPROC`` counts a uid's tasks, so it would be
  everybody's limit at once: no cap but this one holds there);
* reaching another process: ``ptrace``, ``process_vm_*``, every ``pidfd_*``, ``kcmp``, ``kill`` /
  ``tgkill`` / ``rt_sigqueueinfo`` to anyone but itself, ``prlimit`` / ``sched_set*`` on another
  process, ``setpriority`` / ``ioprio_set`` (``os.nice``), ``F_SETOWN`` / ``FIOSETOWN`` (signals by I/O);
* seeing another process (whether it exists, what it does, a channel through what it sets on
  itself): ``getpgid``, ``getsid``, ``sched_get*``, ``sched_rr_get_interval``, ``get_robust_list``
  on anyone but itself; ``getpriority`` / ``ioprio_get`` but for itself (not a group, not a user);
  a clock other than the fixed ones and its own CPU clock (another process's is ``~pid << 3``);
  ``capget``, whose pid is in memory the filter cannot read, fails with EPERM for everyone;
* leaving its namespaces or identity: ``mount`` and the new mount API, ``unshare``, ``setns``,
  ``chroot``, ``set*uid`` / ``set*gid``, ``setsid`` / ``setpgid``;
* what tells of the machine or the view's making: ``statmount`` / ``listmount`` (the host paths
  bound into the view), the ``lsm_*`` calls; ``sysinfo`` (load, memory, process count) fails with
  ENOSYS instead (the C library's ``qsort`` asks for it, and the interpreter's start sorts);
* symbolic links (``symlink``, ``symlinkat``): a link in its own folder would lead a path that
  reads as inside to the outside (the audit hook compares paths as text);
* kernel surfaces that have no use in a program and a history of exploits: ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``io_uring_*`` (it runs system calls seccomp does not
  see), keyrings, modules, ``kexec``, ``open_by_handle_at``, ``personality``,
  ``lookup_dcookie``, ``TIOCSTI`` / ``TIOCLINUX`` / ``TIOCCONS`` / ``TIOCSETD``;
* kernel objects counted per user or per machine, which one program could take for all: AIO
  contexts (``io_setup`` and the rest: ``fs.aio-max-nr`` is one count for the whole machine),
  inotify and fanotify instances and watches, keyrings, SysV IPC and POSIX message queues
  (shared by every program of the batch too), pipe buffers (``F_SETPIPE_SZ``); and the file
  notifications that watch others' work: ``F_NOTIFY`` (dnotify) and ``F_SETLEASE``.

File locks (``flock``, ``fcntl``'s record locks) fail with ENOLCK: on a file of the view, which every
program can open, a lock taken by one and seen by another is a signal that needs no clock; for the
same reason ``cachestat`` (which pages of a file are cached) ends the process.

Every call from :data:`FIRST_UNKNOWN` on (newer than this filter: ``mseal``, the ``*xattrat``
calls, ``open_tree_attr``, ``file_getattr``, and whatever the kernel adds next) fails with ENOSYS,
as on an older kernel: new calls are refused until they are looked at. ``clone3`` fails with
ENOSYS (its flags are in memory a filter cannot read; the C library then falls back to ``clone``,
which is checked) and ``socket`` / ``socketpair`` with EACCES (the C library probes for the name
service cache with a socket; an error, not a kill, keeps ``getpass.getuser()`` and the like alive).
"""

from __future__ import annotations

import functools
import struct

KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS
ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM, _EACCES, _ENOLCK, _ENOSYS = 1, 13, 37, 38

#: AUDIT_ARCH_* of each machine this filter knows, by ``os.uname().machine``
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

#: system call numbers, (x86-64, aarch64); None where the machine has no such call
_NR = {
    "fork": (57, None), "vfork": (58, None), "clone": (56, 220), "clone3": (435, 435), "execve": (59, 221),
    "execveat": (322, 281), "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438), "pidfd_send_signal": (424, 424),
    "process_madvise": (440, 440), "process_mrelease": (448, 448), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "move_mount": (429, 429), "open_tree": (428, 428),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "unshare": (272, 97), "setns": (308, 268), "setuid": (105, 146),
    "setgid": (106, 144), "setreuid": (113, 145), "setregid": (114, 143), "setresuid": (117, 147),
    "setresgid": (119, 149), "setfsuid": (122, 151), "setfsgid": (123, 152), "setgroups": (116, 159),
    "setpgid": (109, 154), "setsid": (112, 157), "setpriority": (141, 140), "ioprio_set": (251, 30),
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240), "prlimit64": (302, 261), "sched_setaffinity": (203, 122),
    "sched_setscheduler": (144, 119), "sched_setparam": (142, 118), "sched_setattr": (314, 274), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "reboot": (169, 142), "swapon": (167, 224),
    "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443), "syslog": (103, 116),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "sethostname": (170, 161), "setdomainname": (171, 162), "iopl": (172, None), "ioperm": (173, None),
    "modify_ldt": (154, None), "uselib": (134, None), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "shmget": (29, 194), "shmat": (30, 196), "shmdt": (67, 197),
    "shmctl": (31, 195), "semget": (64, 190), "semop": (65, 193), "semtimedop": (220, 192), "semctl": (66, 191),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187), "mq_open": (240, 180),
    "mq_unlink": (241, 181), "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183), "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185), "migrate_pages": (256, 238), "move_pages": (279, 239), "vhangup": (153, 58),
    "fanotify_init": (300, 262), "fanotify_mark": (301, 263), "io_setup": (206, 0), "io_destroy": (207, 1),
    "io_submit": (209, 2), "io_cancel": (210, 3), "io_getevents": (208, 4), "io_pgetevents": (333, 292),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
    "inotify_rm_watch": (255, 28), "lookup_dcookie": (212, 18), "personality": (135, 92), "_sysctl": (156, None),
    "socket": (41, 198), "socketpair": (53, 199), "fcntl": (72, 25), "ioctl": (16, 29),
    # calls that answer for another process: allowed on itself only (below)
    "getpgid": (121, 155), "getsid": (124, 156), "sched_getaffinity": (204, 123), "sched_getscheduler": (145, 120),
    "sched_getparam": (143, 121), "sched_rr_get_interval": (148, 127), "sched_getattr": (315, 275),
    "get_robust_list": (274, 100), "getpriority": (140, 141), "ioprio_get": (252, 31), "capget": (125, 90),
    "clock_gettime": (228, 113), "clock_getres": (229, 114), "clock_nanosleep": (230, 115),
    "timer_create": (222, 107),
    # the machine's load, memory and process count; mounts (the host paths bound into the view); security modules
    "sysinfo": (99, 179), "statmount": (457, 457), "listmount": (458, 458), "lsm_get_self_attr": (459, 459),
    "lsm_set_self_attr": (460, 460), "lsm_list_modules": (461, 461),
    # symbolic links: a link in its own folder would make a path the hook reads as inside lead outside
    "symlink": (88, None), "symlinkat": (266, 36),
    # file locks: on the files every program can open (the view), a lock is a signal to a sibling
    "flock": (73, 32),
    # which pages of a file are cached: whether a sibling read a file of the view, no clock needed
    "cachestat": (451, 451),
}

_KILLED = (
    "fork", "vfork", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open",
    "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease", "mount", "umount2", "pivot_root",
    "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare",
    "setns", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
    "setgroups", "setpgid", "setsid", "setpriority", "ioprio_set", "tkill", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct",
    "quotactl", "quotactl_fd", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "iopl", "ioperm", "modify_ldt", "uselib", "name_to_handle_at", "open_by_handle_at", "shmget",
    "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "migrate_pages",
    "move_pages", "vhangup", "fanotify_init", "fanotify_mark", "io_setup", "io_destroy", "io_submit", "io_cancel",
    "io_getevents", "io_pgetevents", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    "lookup_dcookie", "personality", "_sysctl", "statmount", "listmount", "lsm_get_self_attr",
    "lsm_set_self_attr", "lsm_list_modules", "symlink", "symlinkat", "cachestat",
)
#: system calls from this number on (x86-64 and aarch64 number them alike since 424) are newer than this
#: filter (mseal, the *xattrat calls, open_tree_attr, file_getattr, ...): they fail with ENOSYS, as on an
#: older kernel, so a call the kernel adds later is refused until it is looked at
FIRST_UNKNOWN = 462
#: calls whose first argument is a process: allowed on itself only (0 means itself for the second group)
_SELF = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
_SELF_OR_ZERO = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
                 "getpgid", "getsid", "sched_getaffinity", "sched_getscheduler", "sched_getparam",
                 "sched_rr_get_interval", "sched_getattr", "get_robust_list")
#: calls whose first argument says whose (``which``) and the second who: a process, itself only
#: (getpriority: PRIO_PROCESS 0; ioprio_get: IOPRIO_WHO_PROCESS 1); a group or a user would say whether
#: any other process of that group or uid exists
_WHICH_WHO = {"getpriority": 0, "ioprio_get": 1}
#: calls on a clock: the fixed clocks (ids 0-15) or its own process's CPU clock; a negative id names
#: another process's or thread's CPU clock (``~pid << 3 | kind``), which says whether it exists and how busy
_CLOCKS = ("clock_gettime", "clock_getres", "clock_nanosleep", "timer_create")
_CPUCLOCK_SELF, _CPUCLOCK_ZERO = "cpuclock", 0xFFFFFFF8  # (~pid << 3), (~0 << 3): its own process's
#: F_SETOWN, F_SETSIG, F_SETOWN_EX: have the kernel signal another process when a descriptor is ready;
#: F_SETPIPE_SZ: pipe buffers, counted per user; F_SETLEASE and F_NOTIFY (dnotify): told when anyone
#: else opens or changes a file or folder
_FCNTL_KILLED = (8, 10, 15, 1031, 1024, 1026)
#: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW: record locks, which fail (ENOLCK)
_FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)
#: TIOCSPGRP, TIOCSTI (typing into a terminal), TIOCLINUX, TIOCCONS (the console's output), TIOCSETD (line
#: disciplines), FIOSETOWN, SIOCSPGRP
_IOCTL_KILLED = (0x5410, 0x5412, 0x541C, 0x541D, 0x5423, 0x8901, 0x8902)
_CLONE_THREAD = 0x00010000
#: CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
_CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_X32_BIT = 0x40000000  # x86-64's x32 calls: the same numbers with this bit set

# classic BPF: (code, jump if true, jump if false, k); a jump is a label here, an offset once assembled
_LOAD = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k]
_JEQ, _JGT, _JGE, _JSET, _RET = 0x15, 0x25, 0x35, 0x45, 0x06
_NR_AT, _ARCH_AT = 0, 4
_NEXT = None  # a jump to the next instruction
_ALU_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K: A &= k
#: values a template leaves open, patched in per process: its own pid, its own CPU clock, and the two
#: pointers of the one execve it may make (the fresh interpreter it becomes: :func:`program`)
_PID, _EXEC_PATH, _EXEC_ARGV = "pid", ("path lo", "path hi"), ("argv lo", "argv hi")


def _arg(i: int) -> int:
    """Offset of argument ``i``'s low 32 bits (both machines are little-endian; pids, commands and
    clone's flags are 32-bit values to the kernel, which ignores the high half)."""
    return 16 + 8 * i


def _ret(action: int) -> tuple:
    return (_RET, _NEXT, _NEXT, action)


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as (first, last) runs of consecutive ones: fewer instructions to check."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return [(first, last) for first, last in runs]


def _template(machine: str, execs: bool, threads: bool) -> list[tuple]:
    """The filter with placeholders for the pid and the execve's pointers: instructions, with labels
    still in the jumps. ``execs``: one execve, with exactly the pointers patched in, is allowed (every
    other is killed); ``threads``: ``clone`` may start threads (never processes)."""
    column = ("x86_64", "aarch64").index(machine)
    nr = {name: numbers[column] for name, numbers in _NR.items() if numbers[column] is not None}
    clock = [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JGE, _NEXT, "allow", 16), (_ALU_AND, _NEXT, _NEXT, 0xFFFFFFF8),
             (_JEQ, "allow", _NEXT, _CPUCLOCK_ZERO), (_JEQ, "allow", "kill", _CPUCLOCK_SELF)]
    execve = [_ret(KILL)]
    if execs:  # both halves of both pointers: a program never gets the same two by chance
        execve = [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JEQ, _NEXT, "kill", _EXEC_PATH[0]),
                  (_LOAD, _NEXT, _NEXT, _arg(0) + 4), (_JEQ, _NEXT, "kill", _EXEC_PATH[1]),
                  (_LOAD, _NEXT, _NEXT, _arg(1)), (_JEQ, _NEXT, "kill", _EXEC_ARGV[0]),
                  (_LOAD, _NEXT, _NEXT, _arg(1) + 4), (_JEQ, "allow", "kill", _EXEC_ARGV[1])]
    blocks = {  # calls that depend on their arguments: each its own block, which returns
        **{name: [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JEQ, "allow", "kill", _PID)] for name in _SELF},
        **{name: [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JEQ, "allow", _NEXT, _PID), (_JEQ, "allow", "kill", 0)]
           for name in _SELF_OR_ZERO},
        **{name: [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JEQ, _NEXT, "kill", which), (_LOAD, _NEXT, _NEXT, _arg(1)),
                  (_JEQ, "allow", _NEXT, _PID), (_JEQ, "allow", "kill", 0)] for name, which in _WHICH_WHO.items()},
        **{name: clock for name in _CLOCKS},
        "clone": [(_LOAD, _NEXT, _NEXT, _arg(0)), (_JSET, "kill", _NEXT, _CLONE_NEW),  # threads only,
                  (_JSET, "allow" if threads else "kill", "kill", _CLONE_THREAD)],  # in this process's namespaces
        "execve": execve,
        "clone3": [_ret(_ERRNO | _ENOSYS)], "socket": [_ret(_ERRNO | _EACCES)],
        "socketpair": [_ret(_ERRNO | _EACCES)], "capget": [_ret(_ERRNO | _EPERM)],  # its pid is in memory
        # the C library's qsort asks for the memory size (the interpreter's start sorts tables), and
        # reads no error: a kill would end every program; an error leaves it the struct it passed
        "sysinfo": [_ret(_ERRNO | _ENOSYS)],
        "fcntl": [(_LOAD, _NEXT, _NEXT, _arg(1))] + [(_JEQ, "kill", _NEXT, c) for c in _FCNTL_KILLED]
        + [(_JEQ, "no lock", _NEXT, c) for c in _FCNTL_LOCKS] + [_ret(ALLOW)],
        "flock": [_ret(_ERRNO | _ENOLCK)],
        "ioctl": [(_LOAD, _NEXT, _NEXT, _arg(1))] + [(_JEQ, "kill", _NEXT, c) for c in _IOCTL_KILLED] + [_ret(ALLOW)],
    }
    code: list[tuple] = [(_LOAD, _NEXT, _NEXT, _ARCH_AT), (_JEQ, _NEXT, "kill", ARCHES[machine]),
                         (_LOAD, _NEXT, _NEXT, _NR_AT)]
    if machine == "x86_64":
        code.append((_JGE, "kill", _NEXT, _X32_BIT))
    code.append((_JGE, "unknown", _NEXT, FIRST_UNKNOWN))
    code += [(_JEQ, f"call {name}", _NEXT, nr[name]) for name in blocks if name in nr]
    for first, last in _runs([nr[name] for name in _KILLED if name in nr]):
        if first == last:
            code.append((_JEQ, "kill", _NEXT, first))
        else:  # first <= nr <= last
            code += [(_JGE, _NEXT, f"past {last}", first), (_JGT, _NEXT, "kill", last), ("label", f"past {last}")]
    code.append(_ret(ALLOW))  # every other call
    for name, block in blocks.items():
        if name in nr:
            code += [("label", f"call {name}"), *block]
    return code + [("label", "unknown"), _ret(_ERRNO | _ENOSYS), ("label", "no lock"), _ret(_ERRNO | _ENOLCK),
                   ("label", "allow"), _ret(ALLOW), ("label", "kill"), _ret(KILL)]  # BPF jumps only forward


def _assemble(code: list[tuple]) -> tuple[bytes, dict[str, list[int]]]:
    """Labels to offsets; returns the packed instructions and where each placeholder goes in them."""
    at, n = {}, 0
    for insn in code:
        if insn[0] == "label":
            assert insn[1] not in at, f"label {insn[1]} twice"
            at[insn[1]] = n
        else:
            n += 1
    packed, holes, n = [], {}, 0
    for op, jt, jf, k in (insn for insn in code if insn[0] != "label"):
        jumps = [0 if target is _NEXT else at[target] - n - 1 for target in (jt, jf)]
        assert all(0 <= j < 256 for j in jumps), "a jump past 255 instructions"
        if isinstance(k, str):
            holes.setdefault(k, []).append(8 * n + 4)
            k = 0
        packed.append(struct.pack("=HBBI", op, *jumps, k))
        n += 1
    return b"".join(packed), holes


@functools.cache
def template(machine: str, execs: bool = False, threads: bool = True) -> tuple[bytes, dict[str, list[int]]]:
    """The assembled filter for ``machine`` and where its placeholders are: built once, in the worker."""
    return _assemble(_template(machine, execs, threads))


def program(machine: str, pid: int, execve: tuple[int, int] | None = None, threads: bool = True) -> bytes:
    """The filter for a process ``pid`` (as it sees itself) on ``machine``, as ``struct sock_filter``s.
    ``execve``: the addresses of the path and of the argument vector of the one execve it may still
    make (none: no execve at all); ``threads``: whether it may start threads."""
    code, holes = template(machine, execve is not None, threads)
    values = {_PID: pid, _CPUCLOCK_SELF: (~pid << 3) & 0xFFFFFFFF}
    if execve is not None:
        for names, address in zip((_EXEC_PATH, _EXEC_ARGV), execve):
            values[names[0]], values[names[1]] = address & 0xFFFFFFFF, address >> 32
    patched = bytearray(code)
    for name, offsets in holes.items():
        for offset in offsets:
            struct.pack_into("=I", patched, offset, values[name])
    return bytes(patched)

"""What a forked child does: put every layer between one program and the machine, then become a
fresh interpreter (:mod:`.program`) that runs the program on each input, one JSON line per input
(``[ok, output or error kind]``) on its own channel.

The layers, in the order they go on (``layers`` names those this machine allows; one that fails to
go on ends the child with :data:`SANDBOX_EXIT` rather than run the program with less):

* descriptors: 0-2 on ``/dev/null``, the result channel on 3, its job (a memfd) on 4, every other
  one closed (the worker's own channel to the parent and the other children's pipes are out of reach);
* ``read-only`` + ``private-tmp``: a mount namespace of its own, everything in it read-only, and
  its folder a fresh tmpfs of ``file_mb`` (a quota on all it writes, seen by nobody else, nothing
  on it executable);
* ``uid``: a uid and gid of its own, never root, no supplementary groups (no signal, ptrace or
  /proc access between programs, or to the worker, even without seccomp);
* no capabilities in any set (the bounding and ambient sets too, so the execve gives none back),
  death with the worker, not dumpable, rlimits (CPU, address space, file size, 64 descriptors, no
  core, no locked memory, 64 queued signals; 64 threads where its uid is its own);
* ``seccomp``: the kernel's filter (:mod:`.seccomp`), which allows this process one execve: the
  next step's, with the very pointers prepared for it;
* the execve: the program runs in a fresh interpreter (``python -s -S -P``), which holds nothing of
  the worker's memory (no other program's source) and has never loaded ctypes, whose C types would
  let it rewrite any memory, the audit hook's included. The execve makes the process dumpable
  again; a core is still refused (``RLIMIT_CORE`` 1) and nothing that reads another process's
  memory is allowed (seccomp; no /proc in a view). Only where its uid is shared and a /proc is in
  view (no view, no uid of its own: a parent that is not root and gets no namespace) would that let
  a sibling open its ``/proc/<pid>/mem``: there it skips the execve and runs in this process (not
  dumpable), with ctypes' own names dropped (:func:`.kernel.forget`), its C types still loaded;
* ``audit-hook``: the early readable refusal (:mod:`.hook`), last, right before the program.
"""

from __future__ import annotations

import marshal
import os
import resource
import sys

from . import kernel, program, seccomp

#: exit status of a child whose layers could not all be put on: its program never ran
SANDBOX_EXIT = 113
#: threads a program may have, where its uid is its own (RLIMIT_NPROC counts a uid's threads)
_THREADS = 64
#: the interpreter a child becomes (execve) to run its program: one that never loaded ctypes
_BOOT = "from inside.program import main; main()"
#: what a probe's fresh interpreter checks: the standard library and the sandbox's code are readable to its uid
_PROBE = "import os, inside.program; os._exit(0 if os.access(os.path.dirname(os.__file__), 5) else 1)"


def main(job: dict, settings: dict, index: int, channel: int):
    """Confine this process, run ``job`` in it (as a fresh interpreter, where it may be one), exit.
    Never returns."""
    record = {"source": job["source"], "inputs": job["inputs"], "mode": job["mode"], "entry": job["entry"],
              "cap": int(settings["limits"]["output_chars"]), "audit": "audit-hook" in settings["layers"]}
    try:
        folder, start = confine(settings, index, channel, job=marshal.dumps(record), boot=_BOOT)
        if start is not None:
            start()  # returns only by raising: the execve failed
    except BaseException:  # noqa: BLE001 - fail closed: no program runs with fewer layers than promised
        os._exit(SANDBOX_EXIT)
    try:  # no fresh interpreter here (its uid shared, and a /proc in view): the program runs in this one
        program.run(record, folder)
    finally:  # never back into the worker's code that forked it (a program that closed its channel, say)
        os._exit(program.CRASH_EXIT)


def uid_of(settings: dict, index: int) -> int | None:
    """The uid (and gid) program ``index`` runs as, when programs get uids of their own."""
    first, count = settings.get("uids") or (None, 0)
    return None if first is None else first + index % count


def confine(settings: dict, index: int, channel: int, layers: set | None = None, job: bytes | None = None,
            boot: str | None = None):
    """Put the layers on, in order; returns the program's folder and, where it is to become a fresh
    interpreter running ``boot``, the call that makes it one (the seccomp filter allows that execve
    and no other; ``job`` waits for it on descriptor :data:`.program.JOB_FD`), else None. ``layers``:
    those to put on (default: the settings' own); a probe passes them one at a time."""
    layers = set(settings["layers"] if layers is None else layers)
    limits = settings["limits"]
    os.setpgid(0, 0)  # its own process group, which the worker kills with it
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if channel != program.RESULT_FD:
        os.dup2(channel, program.RESULT_FD)
    os.set_inheritable(program.RESULT_FD, True)  # through the execve
    if job is not None:
        held = os.memfd_create("job", 0)  # a memfd holds any size, and it is read from the start
        written = 0
        while written < len(job):
            written += os.write(held, job[written:])
        os.lseek(held, 0, os.SEEK_SET)
        os.dup2(held, program.JOB_FD)
    os.closerange(program.RESULT_FD + 1 + (job is not None), 1 << 20)
    uid = uid_of(settings, index) if "uid" in layers else None
    owner = os.getuid() if uid is None else uid
    root = settings["folder"]
    if "private-tmp" in layers:
        folder = root
        kernel.own_mount_namespace()
        if "read-only" in layers and not settings.get("viewed"):  # bubblewrap's view or the worker's is read-only
            kernel.read_only()
        kernel.tmpfs(folder, int(limits["file_mb"] * 2**20), owner, owner)
    else:
        folder = os.path.join(root, f"p{index}")
        os.mkdir(folder, 0o700)
        os.chown(folder, owner, owner)
    kernel.drop_bounding_set()
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    kernel.die_with_parent()  # after the uid: a change of credentials clears it
    kernel.drop_capabilities()
    kernel.not_dumpable()
    os.chdir(folder)
    os.environ["TMPDIR"] = folder  # tempfile's folders go in its own
    _limit(limits, threads="seccomp" in layers, own_uid=uid is not None)
    # A fresh interpreter has never loaded ctypes, whose C types (object.__subclasses__() finds them)
    # write any memory, the hook's included. Its execve makes it dumpable again, which matters only
    # where another program of its uid could open its /proc/<pid>/mem: so not where its uid is shared
    # and a /proc is in view; there it runs in this process, which stays not dumpable.
    start = execve = None
    if boot is not None and (uid is not None or not os.path.isdir("/proc/self")):
        top = "/sandbox" if settings.get("viewed") else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {name: os.environ[name] for name in ("PATH", "LANG", "PYTHONHASHSEED") if name in os.environ}
        env.update(PYTHONPATH=top, PYTHONDONTWRITEBYTECODE="1", TMPDIR=folder)
        python = sys.executable
        execve, start = kernel.prepare_exec(python, [python, "-s", "-S", "-P", "-c", boot], env)
    if "seccomp" in layers:
        kernel.seccomp(seccomp.program(os.uname().machine, os.getpid(), execve, threads=uid is not None))
    if start is None:
        kernel.forget()  # a program's `import ctypes` is an import again, which the hook refuses
    return folder, start


def _limit(limits: dict, threads: bool, own_uid: bool) -> None:
    cpu = max(1, int(limits["cpu_seconds"] + 0.999))
    memory = int(limits["memory_mb"]) * 2**20
    files = int(limits["file_mb"] * 2**20)
    values = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory, memory)),
              (resource.RLIMIT_FSIZE, (files, files)),
              # 1, not 0: the kernel refuses a core of 1 byte, and (unlike 0) a core piped to a helper too
              (resource.RLIMIT_CORE, (1, 1)),
              (resource.RLIMIT_NOFILE, (64, 64)), (resource.RLIMIT_MEMLOCK, (0, 0)),
              # queued real-time signals count per uid: where the uid is shared, one program must not take them all
              (resource.RLIMIT_SIGPENDING, (64, 64))]
    if not threads:  # without seccomp, the process limit is what stops a fork (for any uid but root)
        values.append((resource.RLIMIT_NPROC, (0, 0)))
    elif own_uid:  # the uid's count is this program's threads: small stacks cannot make thousands
        values.append((resource.RLIMIT_NPROC, (_THREADS, _THREADS)))
    # (a shared uid's count is everybody's: there the seccomp filter refuses threads altogether)
    for which, value in values:
        resource.setrlimit(which, value)

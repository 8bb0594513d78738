"""The outer layer: the process a batch's worker runs in, and which layers this machine allows.

Best first, the first that starts is used (once per process, by a probe that also tries each of a
child's layers; :func:`isolation` says what came out of it, and the ``corl`` logger says it once):

* **bubblewrap** (``bwrap``): a user namespace (programs hold capabilities, if at all, over the
  sandbox's own objects only), fresh PID, network (nothing but a down loopback), IPC, UTS (host
  name ``corl-sandbox``) and cgroup namespaces; the **view**: a file system that holds ``/usr``,
  the Python installation and the worker's code, all read-only, a read-only ``/tmp``, a tmpfs for
  the batch's folders, a ``/dev`` of ``null``, ``zero`` and ``urandom`` only, and no ``/proc`` or
  ``/sys``; no environment but ``PATH``, ``LANG`` and ``PYTHONHASHSEED``. The worker is PID 1;
  everything dies with the parent. Run as root, the user namespace maps the programs' uids to host
  uids of their own (:data:`HOST_UIDS`): a program that got out would be nobody on the host;
* **unshare**: fresh network and PID namespaces; the worker builds the same view itself
  (:mod:`.inside.view`), where it may (root, or a user namespace of its own);
* **none**: the worker starts as a plain process (``Sandbox(isolate=False)``), and builds the view
  where it may.

Without the view, a uid of their own needs the standard library readable to other uids; where
that fails too and the parent is root, programs would run as root: :class:`~corl.sandbox.Sandbox`
refuses that unless told ``unsafe_run_as_root``.
"""

from __future__ import annotations

import compileall
import functools
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import attrs

#: the host uids programs run as when the parent is root (first, how many): a range nothing else uses
HOST_UIDS = (1_800_000_000, 65536)
_INSIDE = Path(__file__).with_name("inside")
_BOOT = "from inside.worker import main; main()"
#: where the view holds the sandbox's own code (what the worker and the programs import as ``inside``)
_VIEWED_INSIDE = "/sandbox/inside"
#: the batch's folder inside the view (each program's own tmpfs goes on it): a path no host file is under
_FOLDER = "/sandbox/work"
_FOLDER_BYTES = 64 * 2**20
#: the host name programs see (a UTS namespace of the sandbox's own), so the machine's stays unknown
HOSTNAME = "corl-sandbox"
#: the only devices in the view
_DEVICES = ("null", "zero", "urandom")
#: the whole environment of the worker (no -E: PYTHONHASHSEED must count, and nothing else is there)
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
_UNSHARE = (("unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"),
            ("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"))
#: every layer, and what is lost without it
LAYERS = {
    "bubblewrap": "bubblewrap (apt-get install bubblewrap): without unshare, programs see the machine's network "
                  "and processes",
    "view": "a view of its own (/usr and the Python installation only, no /proc, three devices): programs see the "
            "machine's file system, /dev, /proc and host name",
    "read-only": "a read-only file system: programs can write wherever their uid may",
    "private-tmp": "a private tmpfs per program: no quota on the files a program writes, and programs of a batch "
                   "can see each other's folders",
    "uid": "a uid per program: programs share the worker's uid, so only seccomp keeps them from signalling each other",
    "seccomp": "the seccomp filter (x86-64 and aarch64 only): the audit hook is all that refuses process creation, "
               "signals and sockets",
    "audit-hook": "the audit hook",
}


@attrs.frozen
class Isolation:
    """What holds on this machine: the outer layer (``bubblewrap``, ``unshare`` or ``none``), the
    layers every program runs under, and the names of those missing (:data:`LAYERS` says what
    each one's absence means)."""

    outer: str
    layers: tuple[str, ...]
    missing: tuple[str, ...]


@attrs.frozen
class Plan:
    """How to start a worker, and what its children get."""

    outer: str
    prefix: tuple[str, ...]
    uids: tuple[int, int] | None  # (first, count) of the uids programs may take, as the worker sees them
    map_uids: bool = False  # the parent writes the user namespace's uid map (root under bubblewrap)
    layers: tuple[str, ...] = ()

    def where(self, host: str | None, view: bool) -> dict:
        """The worker's settings that say where the batch's folders are: in bubblewrap's view, in the
        view the worker builds on ``host`` (an empty host folder), or in ``host`` itself."""
        if self.outer == "bubblewrap":
            return {"folder": _FOLDER, "viewed": True}
        if view:
            return {"folder": _FOLDER, "view": {"stage": host, "entries": _view(), "folder": _FOLDER,
                                                "folder_bytes": _FOLDER_BYTES, "hostname": HOSTNAME}}
        return {"folder": host}

    def start(self, host: str | None) -> subprocess.Popen:
        """The worker process, its stdin and stdout pipes open; the caller writes the request."""
        python = os.path.realpath(sys.executable)
        env = {**_ENV, "PYTHONPATH": "/sandbox" if self.outer == "bubblewrap" else str(_INSIDE.parent)}
        command = [*self.prefix, python, "-s", "-S", "-P", "-c", _BOOT]
        if self.outer == "bubblewrap":
            command = [*self.prefix, *(a for k, v in env.items() for a in ("--setenv", k, v)), "--", python,
                       "-s", "-S", "-P", "-c", _BOOT]
        if not self.map_uids:
            return subprocess.Popen(command, cwd=host or "/", env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        command[1:1] = ["--info-fd", str(info_write), "--userns-block-fd", str(block_read)]
        try:
            try:
                proc = subprocess.Popen(command, cwd="/", env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        pass_fds=(info_write, block_read))
            finally:
                os.close(info_write)  # bubblewrap has its own copies
                os.close(block_read)
            try:
                _map_uids(_child_pid(info_read), self.uids)
                os.write(block_write, b"1")  # bubblewrap goes on, into a namespace whose uids are set
            except BaseException:
                kill(proc)
                proc.wait()
                raise
            return proc
        finally:
            os.close(info_read)
            os.close(block_write)


def _child_pid(info: int) -> int:
    """The host PID of the sandbox's first process, from bubblewrap's --info-fd (a JSON object)."""
    data, deadline = b"", time.monotonic() + 10
    while len(data) < 4096:
        if not select.select([info], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError("bubblewrap gave no child pid")
        chunk = os.read(info, 4096)
        if not chunk:
            raise OSError("bubblewrap ended before it started the sandbox")
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue
    raise OSError("bubblewrap's info is not JSON")


def _map_uids(pid: int, uids: tuple[int, int]) -> None:
    """The sandbox's uid 0 is root for bubblewrap's own setup (it binds folders only root can reach),
    then the worker's; uids 1.. are the programs', mapped to host uids nothing else uses."""
    first, count = HOST_UIDS
    mapping = f"0 0 1\n{uids[0]} {first} {count}\n"
    for name in ("uid_map", "gid_map"):
        Path(f"/proc/{pid}/{name}").write_text(mapping)


def kill(proc: subprocess.Popen) -> None:
    """The worker's whole session, then the worker (bubblewrap takes the sandbox down with it)."""
    for kill_target in (lambda: os.killpg(proc.pid, 9), proc.kill):
        try:
            kill_target()
        except (ProcessLookupError, PermissionError):
            pass


@functools.cache
def _view() -> tuple[tuple[str, str, str], ...]:
    """What programs see of the machine, as ``(how, source, target)``: ``bind`` (read-only), ``link``
    (a symbolic link to ``source``) or ``device``; bubblewrap and the worker's own view build the same."""
    python = Path(os.path.realpath(sys.executable))
    entries = [("bind", "/usr", "/usr")]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged /usr: links; else folders of their own
        if os.path.islink(top):
            entries.append(("link", os.readlink(top), top))
        elif os.path.isdir(top):
            entries.append(("bind", top, top))
    for path in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, python.parent.parent)}):
        if not (path == "/usr" or path.startswith("/usr/")):
            entries.append(("bind", path, path))
    if os.path.isfile("/etc/ld.so.cache"):
        entries.append(("bind", "/etc/ld.so.cache", "/etc/ld.so.cache"))
    entries.append(("bind", str(_INSIDE), _VIEWED_INSIDE))
    entries += [("device", f"/dev/{name}", f"/dev/{name}") for name in _DEVICES]
    return tuple(entries)


def _bwrap_prefix() -> tuple[str, ...]:
    view = []
    for how, source, target in _view():
        if how == "link":
            view += ["--symlink", source, target]
        elif how == "bind":
            view += [*_folders_to(target), "--ro-bind", source, target]
        else:
            view += ["--dev-bind", source, target]
    first_device = view.index("--dev-bind")
    view[first_device:first_device] = ["--tmpfs", "/dev"]  # no /proc, no /sys: not mounted at all
    return (shutil.which("bwrap"), "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", HOSTNAME, "--die-with-parent", "--new-session",
            "--as-pid-1", "--uid", "0", "--gid", "0", "--cap-drop", "ALL",
            *(a for cap in ("SYS_ADMIN", "SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN") for a in ("--cap-add", f"CAP_{cap}")),
            *view, "--dir", "/tmp", "--size", str(_FOLDER_BYTES), "--tmpfs", _FOLDER, "--remount-ro", "/dev",
            "--remount-ro", "/", "--clearenv", "--chdir", _FOLDER)


def _folders_to(path: str) -> list[str]:
    """The folders above ``path``, made open to every uid (bubblewrap would make them 0700, as a
    folder like /root is on the host, and the programs' uids could not reach the Python below)."""
    above = [str(p) for p in reversed(Path(path).parents) if str(p) != "/"]
    return [a for folder in above for a in ("--perms", "0755", "--dir", folder)]


#: the outer layers ``isolate`` may ask for, best first
OUTERS = ("bubblewrap", "unshare", "none")


def outer_layers(isolate: bool | str) -> tuple[str, ...]:
    """``True``: every outer layer, best first; ``False``: a plain process; a name: that one only."""
    if isolate is True or isolate is False:
        return OUTERS if isolate else ("none",)
    if isolate not in OUTERS:
        raise ValueError(f"isolate: {isolate!r} is not true, false or one of {', '.join(OUTERS)}")
    return (isolate,)


def _plans(isolate: bool | str) -> list[Plan]:
    root = os.geteuid() == 0
    host_uids = HOST_UIDS if root else None
    outers, plans = outer_layers(isolate), []
    if "bubblewrap" in outers and shutil.which("bwrap"):
        if root:
            plans.append(Plan("bubblewrap", _bwrap_prefix(), (1, HOST_UIDS[1]), map_uids=True))
        plans.append(Plan("bubblewrap", _bwrap_prefix(), None))
    if "unshare" in outers and shutil.which("unshare"):
        plans.append(Plan("unshare", _UNSHARE[0], host_uids))
        plans.append(Plan("unshare", _UNSHARE[1], None))  # a user namespace: the worker is root in it only
    if "none" in outers:
        plans.append(Plan("none", (), host_uids))
    return plans


def _probe(plan: Plan) -> tuple[str, ...] | None:
    """The layers a child gets under ``plan``, or None when the worker does not start."""
    host = None if plan.outer == "bubblewrap" else new_folder()
    try:
        proc = plan.start(host)
    except OSError:
        remove(host)
        return None
    settings = {"probe": True, "uids": plan.uids, "outer": plan.outer, **plan.where(host, view=True),
                "limits": {"file_mb": 1.0, "cpu_seconds": 5.0, "memory_mb": 512, "output_chars": 64}}
    try:
        out, _ = proc.communicate(frame(settings), timeout=30)
        return tuple(json.loads(out.splitlines()[0])["layers"])
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError, TypeError):
        return None
    finally:
        kill(proc)
        proc.wait()
        remove(host)


@functools.cache
def plan(isolate: bool | str = True) -> Plan:
    """The best plan that works here (probed once per process), with the layers it gives."""
    # the worker cannot write its bytecode (read-only), so here; named as the view names the files, so
    # that no .pyc a program reads holds the host's checkout path
    compileall.compile_dir(_INSIDE, quiet=2, ddir=_VIEWED_INSIDE, force=True)
    for candidate in _plans(isolate):
        layers = _probe(candidate)
        if layers is not None:
            if candidate.outer == "bubblewrap":
                layers = ("bubblewrap", "view", *layers)
            chosen = attrs.evolve(candidate, layers=layers)
            break
    else:  # not even a plain process: the worker cannot start, or not with the outer layer asked for
        chosen = Plan(outer_layers(isolate)[-1], (), None, layers=())
    missing = _missing(isolate, chosen)
    logging.getLogger("corl.sandbox").info(
        "sandbox: outer layer %s; layers %s; missing %s%s", chosen.outer, ", ".join(chosen.layers) or "none",
        ", ".join(missing) or "none", "; programs would run as root" if as_root(chosen) else "")
    if missing:
        warnings.warn("corl sandbox: running without " + "; without ".join(LAYERS[name] for name in missing),
                      RuntimeWarning, stacklevel=3)
    return chosen


def _missing(isolate: bool | str, chosen: Plan) -> tuple[str, ...]:
    outside = outer_layers(isolate)[0] == "bubblewrap"  # without bubblewrap by request, its absence is no news
    return tuple(name for name in LAYERS if name not in chosen.layers and (outside or name != "bubblewrap"))


def as_root(chosen: Plan) -> bool:
    """Whether programs would run as root: the parent is, and no uid of their own holds."""
    return os.geteuid() == 0 and "uid" not in chosen.layers


def isolation(isolate: bool | str = True) -> Isolation:
    """What holds here: the outer layer, the layers every program gets, and what is missing."""
    chosen = plan(isolate)
    return Isolation(chosen.outer, chosen.layers, _missing(isolate, chosen))


def frame(record) -> bytes:
    """One record of the worker's request: its length in ASCII digits, then its JSON."""
    data = json.dumps(record).encode()
    return b"%010d" % len(data) + data


def new_folder() -> str:
    """A batch's folder on the host, for a worker outside bubblewrap."""
    folder = tempfile.mkdtemp(prefix="corl-sandbox-")
    os.chmod(folder, 0o711)  # programs with uids of their own go through it to their folders, never list it
    return folder


def remove(folder: str | None) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


"""What a program can learn about the machine (issue 31): its host name, the kernel's command line,
the host's mount points, /proc through a directory descriptor, devices, root's files. With the
hook each is refused or not there; with the hook off, the view (no /proc, no /sys, three devices,
a host name of its own) must hide them all the same, under bubblewrap and in the fallback."""

import os
import socket
import sys
from pathlib import Path

import pytest

from corl.sandbox.outer import HOSTNAME

from .hostile import run_hostile, sandbox_for

#: what a program tries to read -> (its error with the hook, its error with the hook off)
READS = {
    "/proc/cmdline": ("open('/proc/cmdline').read()", "forbidden", "crash:FileNotFoundError"),
    "/proc/self/mountinfo": ("open('/proc/self/mountinfo').read()", "forbidden", "crash:FileNotFoundError"),
    "/proc/mounts": ("open('/proc/mounts').read()", "forbidden", "crash:FileNotFoundError"),
    "/proc/1/mountinfo": ("open('/proc/1/mountinfo').read()", "forbidden", "crash:FileNotFoundError"),
    "/proc listed": ("os.listdir('/proc')", "forbidden", "crash:FileNotFoundError"),
    "/sys listed": ("os.listdir('/sys/class/net')", "forbidden", "crash:FileNotFoundError"),
    "/proc through a descriptor on /": (
        "os.read(os.open('proc/self/mountinfo', os.O_RDONLY, dir_fd=os.open('/', os.O_RDONLY)), 4096)",
        "forbidden", "crash:FileNotFoundError"),
    "/proc by an absolute path beside a dir_fd": (
        "os.read(os.open('/proc/self/status', os.O_RDONLY, dir_fd=os.open('.', os.O_RDONLY)), 4096)",
        "forbidden", "crash:FileNotFoundError"),
    "/proc through a descriptor climbed to from its own folder": (
        "os.read(os.open('proc/cmdline', os.O_RDONLY, dir_fd=os.open('../..', os.O_RDONLY, "
        "dir_fd=os.open('.', os.O_RDONLY))), 4096)", "forbidden", "crash:FileNotFoundError"),
    "/proc/self/fd through /dev/fd": ("os.listdir('/dev/fd')", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/dev/kmsg": ("open('/dev/kmsg', 'rb').read(100)", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/dev/console": ("open('/dev/console', 'rb').read(1)", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/dev/tty1": ("open('/dev/tty1', 'rb').read(1)", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/dev/userfaultfd": ("open('/dev/userfaultfd', 'rb')", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/dev/mem": ("open('/dev/mem', 'rb').read(1)", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/etc/hostname": ("open('/etc/hostname').read()", "crash:FileNotFoundError", "crash:FileNotFoundError"),
    "/etc/passwd": ("open('/etc/passwd').read()", "crash:FileNotFoundError", "crash:FileNotFoundError"),
}


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("hook", [True, False], ids=["hook", "kernel-only"])
@pytest.mark.parametrize("read", READS, ids=list(READS))
def test_nothing_of_the_machine_can_be_read(read, hook, outer):
    call, with_hook, kernel_only = READS[read]
    outcome = run_hostile(f"import os\ndef f(x):\n    return {call}",
                          sandbox_for(outer, without=() if hook else ("audit-hook",)))
    assert outcome.error == (with_hook if hook else kernel_only)


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
def test_the_host_name_is_the_sandboxs_own(outer):
    outcome = run_hostile("import os\ndef f(x):\n    return os.uname().nodename", sandbox_for(outer))
    assert outcome.output == repr(HOSTNAME) != repr(socket.gethostname())


@pytest.mark.parametrize("outer", ["bubblewrap", "unshare"])
def test_roots_files_are_not_in_view(outer, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    os.chmod(tmp_path, 0o700)
    bare = sandbox_for(outer, without=("audit-hook",))
    for path in (str(secret), os.path.expanduser("~/.bashrc"), "/home", "/var/log", "/etc/shadow"):
        outcome = run_hostile(f"import os\ndef f(x):\n    return open({path!r}).read() if os.path.isfile({path!r}) "
                              f"else os.listdir({path!r})", bare)
        assert outcome.error in {"crash:FileNotFoundError", "crash:PermissionError"}, path
    # the folders above the Python installation hold that installation only (a Python under /root, say)
    python = os.path.realpath(sys.executable)
    for above in [str(p) for p in Path(python).parents][2:-1]:
        outcome = run_hostile(f"import os\ndef f(x):\n    return os.listdir({above!r})", bare)
        assert outcome.ok and len(eval(outcome.output)) == 1, above

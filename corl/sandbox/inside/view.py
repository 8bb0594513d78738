"""The worker's own view of the machine when bubblewrap is not there (the fallback): the same view
bubblewrap gives, built by the worker itself in a mount namespace of its own before any program
starts.

A tmpfs becomes the root; on it, read-only, only what the parent lists (``/usr``, the Python
installation, the worker's code, ``/etc/ld.so.cache``: each at its own path, the folders above it
open to every uid, so a Python under a 0700 folder such as ``/root`` stays readable to the
programs' uids), a ``/dev`` of ``null``, ``zero`` and ``urandom`` only, an empty read-only
``/tmp``, and no ``/proc`` or ``/sys`` at all; then a tmpfs for the batch's folders. The old root
is unmounted, so nothing else of the host is in reach. It also takes a UTS namespace with a fixed
host name and an IPC namespace. It needs root or a user namespace of its own (the ``unshare``
outer layer gives one to a parent that is not root).
"""

from __future__ import annotations

import os

from . import kernel

#: the root's own tmpfs holds only folders and empty files to mount on
_ROOT_BYTES = 1 << 20


def build(stage: str, entries: list, folder: str, folder_bytes: int, hostname: str) -> None:
    """Make ``stage`` (an empty folder) the root of this process's new mount namespace, holding
    ``entries`` (``[how, source, target]``: ``bind`` read-only, ``link`` a symbolic link,
    ``device`` a device node), with a tmpfs of ``folder_bytes`` on ``folder`` for the batch."""
    kernel.own_mount_namespace()
    kernel.own_host_name(hostname)
    kernel.tmpfs(stage, _ROOT_BYTES, 0, 0, mode=0o755)
    for how, source, target in entries:
        where = stage + target
        os.makedirs(os.path.dirname(where), 0o755, exist_ok=True)
        if how == "link":
            os.symlink(source, where)
            continue
        if os.path.isdir(source):
            os.makedirs(where, 0o755, exist_ok=True)
        else:
            os.close(os.open(where, os.O_CREAT | os.O_WRONLY, 0o644))  # a file to mount the file on
        kernel.bind(source, where)
    for empty in ("/tmp", folder):
        os.makedirs(stage + empty, 0o755, exist_ok=True)
    kernel.read_only(stage)
    kernel.tmpfs(stage + folder, folder_bytes, 0, 0, mode=0o711, inodes=65536)
    kernel.change_root(stage)

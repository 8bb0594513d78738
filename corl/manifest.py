"""A folder's manifest: every file's size and SHA-256 digest, written last, checked before loading.

:func:`corl.atomic.write_together` writes ``manifest.json`` into a checkpoint (and the final
export) after every other file is in and before the folder is renamed into place, so a folder
named ``step-*`` holds the digests of exactly what was written. :func:`verify` reads the folder
back against it: a flipped byte, a truncated, missing, unreadable or added file is named with the
folder, before a single step trains on it.

Files are digested in blocks of :data:`BLOCK` bytes by a thread pool (hashlib releases the GIL), so
verifying a checkpoint costs about its size over the disk's read speed or the cores' SHA-256 speed,
whichever is slower (docs/how-to/checkpoints.md has the figures).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from corl.errors import CorlError

NAME = "manifest.json"
BLOCK = 64 << 20  # digests per 64 MiB block: one big file is hashed by every core, not one
FORMAT = 1


class ManifestError(CorlError):
    """A folder does not hold what its manifest says (the message names the file and the folder)."""


def _workers() -> int:
    return max(1, min(16, os.cpu_count() or 1))


def _blocks(path: Path, size: int) -> list[tuple[Path, int]]:
    return [(path, start) for start in range(0, max(size, 1), BLOCK)]


def _digest_block(job: tuple[Path, int]) -> str:
    path, start = job
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        left = BLOCK
        while left:
            chunk = f.read(min(left, 8 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def digest_files(root: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"size", "sha256": [one hex digest per block]}}`` of files under ``root``."""
    sizes = {name: (root / name).stat().st_size for name in names}
    jobs = [(name, job) for name in names for job in _blocks(root / name, sizes[name])]
    with ThreadPoolExecutor(_workers()) as pool:
        digests = list(pool.map(_digest_block, [job for _, job in jobs]))
    out: dict[str, dict[str, Any]] = {name: {"size": sizes[name], "sha256": []} for name in names}
    for (name, _), digest in zip(jobs, digests):
        out[name]["sha256"].append(digest)
    return out


def files_of(root: Path) -> list[str]:
    """Every regular file under ``root`` except the manifest, as POSIX paths relative to it."""
    names = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(name for name in names if name != NAME)


def write(root: Path) -> dict[str, Any]:
    """Digest every file in ``root`` and write ``root/manifest.json`` (call it last, before the rename)."""
    manifest = {"format": FORMAT, "algorithm": "sha256", "block": BLOCK, "files": digest_files(root, files_of(root))}
    (root / NAME).write_text(json.dumps(manifest, indent=1))
    return manifest


def read(root: Path) -> dict[str, Any]:
    path = root / NAME
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT or manifest.get("algorithm") != "sha256" or not isinstance(
                manifest.get("files"), dict):
            raise ValueError("not a corl manifest")
    except FileNotFoundError:
        raise ManifestError(f"{root}: no {NAME} (written by a corl from before verified checkpoints, or deleted): "
                            "its files cannot be verified") from None
    except (OSError, ValueError, AttributeError) as exc:
        raise ManifestError(f"{path}: unreadable ({exc})") from None
    return manifest


def size_of(root: Path) -> int | None:
    """The bytes ``root``'s manifest lists (None: no readable manifest)."""
    try:
        return sum(int(f["size"]) for f in read(root)["files"].values())
    except (ManifestError, KeyError, TypeError, ValueError):
        return None


def verify(root: Path) -> None:
    """Raise :class:`ManifestError` naming the first file of ``root`` that is not as its manifest says."""
    manifest = read(root)
    listed: dict[str, dict[str, Any]] = manifest["files"]
    block = int(manifest.get("block", BLOCK))
    if block != BLOCK:
        raise ManifestError(f"{root / NAME}: digests in blocks of {block} bytes; this corl reads {BLOCK}")
    present = set(files_of(root))
    for name in sorted(listed):
        if name not in present:
            raise ManifestError(f"{root}: {name} is missing (listed in {NAME})")
    for name in sorted(present - set(listed)):
        raise ManifestError(f"{root}: {name} is not listed in {NAME} (a file added after the checkpoint was written)")
    for name, entry in sorted(listed.items()):
        size = (root / name).stat().st_size
        if size != entry["size"]:
            raise ManifestError(f"{root}: {name} has {size} bytes, {entry['size']} when written (truncated or "
                                "replaced)")
    jobs = [(name, i, job) for name in sorted(listed)
            for i, job in enumerate(_blocks(root / name, listed[name]["size"]))]
    with ThreadPoolExecutor(_workers()) as pool:
        try:
            digests = list(pool.map(_digest_block, [job for _, _, job in jobs]))
        except OSError as exc:
            raise ManifestError(f"{root}: {Path(exc.filename or '?').relative_to(root) if exc.filename else '?'} "
                                f"is unreadable ({exc.strerror or exc})") from None
    for (name, i, _), digest in zip(jobs, digests):
        if digest != listed[name]["sha256"][i]:
            where = f" (bytes {i * BLOCK}-{min((i + 1) * BLOCK, listed[name]['size']) - 1})" if len(
                listed[name]["sha256"]) > 1 else ""
            raise ManifestError(f"{root}: {name} does not match its digest{where}: the file changed after the "
                                "checkpoint was written")

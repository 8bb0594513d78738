"""The rows of a data file, as a data task reads them: JSONL (one JSON object a line), Parquet, or a
`datasets` dataset saved with ``save_to_disk``, each row numbered as messages name it (a JSONL file's
line, another file's row). A line that is not JSON is a :class:`BadRow` in its place, for the task
to report or skip; a file that cannot be read at all is a :class:`~corl.errors.CorlError`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corl.errors import CorlError


class BadRow(Exception):
    """What is wrong with one row (the task names its file and line)."""


def read_rows(split: str, path: Path, given: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line or row number, row) pairs; a line that is not JSON comes as a :class:`BadRow`."""
    suffix = path.suffix.lower()
    if path.is_dir() or "::" in path.name:
        yield from saved_dataset(split, path, given)
    elif suffix == ".jsonl":
        try:
            f = path.open("rb")  # bytes, so that a bad encoding is one bad line, named by its number
        except OSError as exc:
            raise CorlError(f"task.{split}: cannot read {show(path)}: {exc.strerror}") from None
        with f:
            for i, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8").strip()
                except UnicodeDecodeError as exc:
                    yield i, BadRow(f"not UTF-8 text (byte {exc.start + 1})")
                    continue
                if not text:
                    continue
                try:
                    yield i, json.loads(text)
                except json.JSONDecodeError as exc:
                    yield i, BadRow(f"not JSON: {exc.msg} (column {exc.colno})")
    elif suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CorlError(f"task.{split}: reading {show(path)} needs pyarrow (pip install pyarrow)") from None
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
            i = 0
            for batch in batches:
                for row in batch.to_pylist():
                    i += 1
                    yield i, row
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise CorlError(f"task.{split}: cannot read {show(path)}: {exc}") from None
    else:
        raise CorlError(f"task.{split}: {show(path)}: unsupported file type {suffix or '(none)'!r}; "
                        "use .jsonl or .parquet")


def saved_dataset(split: str, path: Path, given: str | None = None) -> Iterator[tuple[int, Any]]:
    """A `datasets` dataset saved with ``save_to_disk``: ``DIR`` (one Dataset) or ``DIR::SPLIT``
    (one split of a saved DatasetDict). Loaded from local disk only. ``given`` is the recipe's value,
    for messages that say what to write."""
    folder, _, name = str(path).partition("::")
    try:
        import datasets
    except ImportError:
        raise CorlError(f"task.{split}: {show(Path(folder))} is a folder; reading a saved `datasets` dataset "
                        "needs the datasets package (pip install 'co-rl[data]')") from None
    try:
        loaded = datasets.load_from_disk(folder)
    except (FileNotFoundError, ValueError) as exc:
        raise CorlError(f"task.{split}: {show(Path(folder))}: not a dataset saved with save_to_disk ({exc})") from None
    where, given = show(Path(folder)), str(given or folder).partition("::")[0]
    if isinstance(loaded, datasets.DatasetDict):
        if name not in loaded:
            # what to write in the recipe: the path as the recipe gives it (relative to the recipe), ::SPLIT added
            first = next(iter(loaded), "SPLIT")
            missing = f"has no split {name!r}" if name else "is a DatasetDict: name one of its splits"
            raise CorlError(f"task.{split}: {where} {missing}; its splits: {', '.join(loaded) or 'none'} "
                            f"(e.g. task.{split} = \"{given}::{first}\")")
        loaded = loaded[name]
    elif name:
        raise CorlError(f"task.{split}: {where} is one saved Dataset, not a DatasetDict with splits; drop '::{name}' "
                        f"(task.{split} = \"{given}\")")
    for i, row in enumerate(loaded, 1):
        yield i, row


def origin(path: Path, line: int) -> str:
    """Where a row is, for messages: ``FILE:LINE`` for JSONL, ``FILE row N`` otherwise."""
    return f"{show(path)}:{line}" if path.suffix.lower() == ".jsonl" else f"{show(path)} row {line}"


def show(path: Path) -> str:
    """The path as short as it can be said unambiguously: relative to the working directory if inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())

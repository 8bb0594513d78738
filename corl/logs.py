"""corl's messages and progress, through the standard :mod:`logging` module.

Everything a run says (warm-starts, resume, health warnings, early stops, checkpoint paths,
progress) goes to ``logging.getLogger("corl")`` (or a child, ``corl.<part>``), so a program that
embeds corl decides the level and the handlers. corl adds no handler itself; the ``corl``
command installs one that writes plain lines to stderr (:func:`install_cli_handler`).

Progress: on a terminal, rich draws transient bars. Elsewhere (CI, SLURM logs, a pipe) a bar would
show nothing, so :class:`Progress` logs one line every so often instead: every ``percent`` per
cent of the work and at least every ``seconds``, with the rate and the time left.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger("corl")


def get(part: str = "") -> logging.Logger:
    """The ``corl`` logger, or its child ``corl.<part>``."""
    return logger.getChild(part) if part else logger


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (rich redirects it under a live bar, pytest
    captures it), not to the stream that was there when the handler was made."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def install_cli_handler(level: int = logging.INFO) -> logging.Handler:
    """What the ``corl`` command does: plain message lines on stderr, at ``level`` and above
    (``CORL_LOG_LEVEL`` may say another, e.g. ``DEBUG`` or ``WARNING``). Installed once."""
    import os

    for handler in logger.handlers:
        if isinstance(handler, _StderrHandler):
            return handler
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    name = os.environ.get("CORL_LOG_LEVEL", "").strip().upper()
    logger.setLevel(logging.getLevelName(name) if name in logging.getLevelNamesMapping() else level)
    return handler


def interactive() -> bool:
    """Whether progress is drawn as rich bars (stderr is a terminal) rather than logged as lines."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Progress of ``total`` units of work named ``description``: a transient rich bar on a terminal,
    else a logged line at every ``percent`` per cent done (and at least every ``seconds``)::

        warm-start llama: step 200/500 (40%), 1m02s elapsed, 0.31 s/step, ETA 1m33s

    ``unit`` names one unit in the rate; ``advance(info=...)`` adds text after the numbers.
    """

    def __init__(self, description: str, total: int, *, completed: int = 0, unit: str = "step",
                 percent: float = 10.0, seconds: float = 60.0, log: logging.Logger | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.description, self.total, self.done, self.unit = description, max(0, total), completed, unit
        self.log, self.clock = log or logger, clock
        self.every = max(1, round(self.total * percent / 100)) if self.total else 1
        self.seconds = seconds
        self.start_done, self.started = completed, clock()
        self.last_logged = self.started
        self.bar: Any = None
        self.info = ""
        if interactive() and self.log.isEnabledFor(logging.INFO):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=Console(stderr=True),
                           transient=True)
            self.task = self.bar.add_task(description, total=self.total, completed=completed, info="")
            self.bar.start()

    def advance(self, n: int = 1, info: str = "") -> None:
        self.done += n
        self.info = info
        if self.bar is not None:
            self.bar.update(self.task, advance=n, info=info)
            return
        now = self.clock()
        if self.done >= self.total or self.done % self.every == 0 or now - self.last_logged >= self.seconds:
            self.last_logged = now
            self.log.info(self.line(now))

    def restart_clock(self) -> None:
        """Time the units from now on (what came before, e.g. an evaluation, is no unit's time)."""
        self.started = self.last_logged = self.clock()

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed, moved = now - self.started, self.done - self.start_done
        text = f"{self.description}: {self.unit} {self.done}" + (
            f"/{self.total} ({100 * self.done / self.total:.0f}%)" if self.total else "")
        text += f", {_duration(elapsed)} elapsed"
        if moved > 0:
            rate = elapsed / moved
            text += f", {rate:.2f} s/{self.unit}"
            if self.total:
                text += f", ETA {_duration(rate * max(0, self.total - self.done))}"
        return text + (f"  {self.info}" if self.info else "")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(items: Iterable[T], description: str, total: int, **kwargs: Any) -> Iterator[T]:
    """``items`` with a :class:`Progress` advanced after each one."""
    with Progress(description, total, **kwargs) as progress:
        for item in items:
            yield item
            progress.advance()


# -- the scalars experiment trackers log (tensorboard, and the corl-wandb / corl-mlflow plugins) --------


def step_scalars(metrics: Any) -> dict[str, float]:
    """A training step's scalars by tracker name: ``train/<agent>/<metric>`` and ``train/step_seconds``."""
    out = {f"train/{name}/{key}": value for name, values in metrics.agents.items() for key, value in values.items()}
    out["train/step_seconds"] = metrics.seconds
    return out


def eval_scalars(results: Any, cohort: Any) -> dict[str, float]:
    """An evaluation's scalars: ``eval/<agent>/<metric>`` and, for each pair of agents,
    ``cohort/<matrix>/<a>-<b>`` (agreement, phi, same_wrong) where defined."""
    import itertools

    out = {f"eval/{name}/{key}": value for name, values in results.items() for key, value in values.items()}
    names = cohort["agents"]
    for matrix in ("agreement", "phi", "same_wrong"):
        rows = cohort.get(matrix) or [[None] * len(names)] * len(names)
        for i, j in itertools.combinations(range(len(names)), 2):
            if rows[i][j] is not None:
                out[f"cohort/{matrix}/{names[i]}-{names[j]}"] = rows[i][j]
    return out


#: the columns of a logged completion, as every table of them shows it (tensorboard, trackers, report)
SAMPLE_COLUMNS = ("prompt", "completion", "answer", "label", "reward", "truth")


def sample_rows(samples: Any) -> list[dict[str, Any]]:
    """Logged completions (:class:`corl.types.Completion`) as plain rows: agent, step and the columns."""
    return [{"agent": s.agent, "step": s.step, "kind": s.kind, **{c: s.to_json()[c] for c in SAMPLE_COLUMNS}}
            for s in samples]


def samples_markdown(samples: Any) -> dict[str, str]:
    """One Markdown table of completions per agent (tensorboard's text tab renders Markdown)."""
    cell = lambda v: "" if v is None else str(v).replace("|", "\\|").replace("\n", " ⏎ ")[:300]
    tables: dict[str, list[str]] = {}
    for row in sample_rows(samples):
        lines = tables.setdefault(row["agent"], ["| " + " | ".join(SAMPLE_COLUMNS) + " |",
                                                 "|" + "---|" * len(SAMPLE_COLUMNS)])
        lines.append("| " + " | ".join(cell(row[c]) for c in SAMPLE_COLUMNS) + " |")
    return {agent: "\n".join(lines) for agent, lines in tables.items()}


def reopen_jsonl(path: Any, start_step: int, keep: Callable[[dict[str, Any]], bool] | None = None,
                 log: Callable[[str], None] | None = None):
    """An append-only log of JSON lines (``metrics.jsonl``, a plugin's own), opened for appending.

    A new run (``start_step`` 0) starts it empty. A resumed run keeps the records its checkpoint
    covers (``keep(record)``; by default those whose ``step`` is at most ``start_step``) and drops
    the rest, and drops a torn last line (half a record, left by a kill or a full disk) with a
    line saying so, so a resume never fails on what an interrupted run left. The kept records are
    written to a temp file and renamed over the log: a kill while reopening loses nothing.
    Observers of plugins call it from ``corl_on_run_start`` with ``run.start_step``.
    """
    import json
    import os
    from pathlib import Path

    path = Path(path)
    keep = keep or (lambda record: record.get("step", 0) <= start_step)
    say = log or get().info
    kept: list[str] = []
    if start_step and path.exists():
        lines = path.read_bytes().split(b"\n")
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except ValueError:
                last = i == len(lines) - 1 or not any(x.strip() for x in lines[i + 1:])
                say(f"{path}: dropped {'a torn last line' if last else f'an unreadable line {i + 1}'} "
                    f"({len(raw)} bytes) left by the interrupted run")
                continue
            if keep(record):
                kept.append(raw.decode() + "\n")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return open(path, "a")

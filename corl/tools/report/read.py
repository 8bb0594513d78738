"""Reading a run's ``metrics.jsonl`` and ``summary.json``: records, series, one-line errors on bad lines."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from corl.errors import CorlError


def _read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """Train and eval records, each sorted by step; a later line for the same step wins (as after a resume)."""
    if not path.is_file():
        raise CorlError(f"{path}: not found (is this a run's output directory?)")
    train: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = _parse_record(line, f"{path}:{lineno}")
            (train if record["kind"] == "train" else evals)[record["step"]] = record
    if not train and not evals:
        raise CorlError(f"{path}: no records yet")
    return [train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)]


def _parse_record(line: str, where: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise CorlError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(record, dict):
        raise CorlError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if record.get("kind") not in ("train", "eval"):
        raise CorlError(f"{where}: 'kind' must be 'train' or 'eval', got {record.get('kind')!r}")
    if not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
        raise CorlError(f"{where}: 'step' must be an integer, got {record.get('step')!r}")
    agents = record.get("agents")
    if not isinstance(agents, dict) or not all(isinstance(v, dict) for v in agents.values()):
        raise CorlError(f"{where}: 'agents' must map agent names to objects of metrics")
    cohort = record.get("cohort")
    if cohort is not None:
        _check_cohort(cohort, where)
    return record


def _check_cohort(cohort: Any, where: str) -> None:
    """Reject a cohort block whose matrices do not match its agent list, rather than draw a wrong heatmap."""
    if not isinstance(cohort, dict) or not isinstance(cohort.get("agents"), list):
        raise CorlError(f"{where}: 'cohort' must be an object with an 'agents' list")
    n = len(cohort["agents"])
    for key in ("agreement", "phi", "same_wrong"):
        matrix = cohort.get(key)
        if matrix is None:
            continue
        if not (isinstance(matrix, list) and len(matrix) == n
                and all(isinstance(row, list) and len(row) == n for row in matrix)):
            raise CorlError(f"{where}: cohort '{key}' must be a {n}x{n} matrix (one row per agent)")


def _read_summary(path: Path) -> dict | None:
    """summary.json, or None when the run did not finish (the report then works from metrics.jsonl alone)."""
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CorlError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("agents"), dict):
        raise CorlError(f"{path}: expected an object with an 'agents' table")
    return summary


def _run_name(run_dir: Path) -> str:
    try:
        return json.loads((run_dir / "recipe.json").read_text())["run"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return run_dir.resolve().name


def _agent_order(summary: dict | None, train: list[dict], evals: list[dict]) -> list[str]:
    """Agents in the order the run declared them (dicts keep insertion order), first seen first."""
    names: dict[str, None] = {}
    for agents in ([summary["agents"]] if summary else []) + [r["agents"] for r in evals + train]:
        names.update(dict.fromkeys(agents))
    return list(names)


def _eval_k(evals: list[dict]) -> int | None:
    for record in evals:
        for values in record["agents"].values():
            for key in values:
                if key.startswith("maj@") and key[4:].isdigit():
                    return int(key[4:])
    return None


def _last_cohort(evals: list[dict]) -> tuple[int | None, dict | None]:
    for record in reversed(evals):
        if record.get("cohort"):
            return record["step"], record["cohort"]
    return None, None


def _number(value: Any) -> float:
    """A plottable float: missing, null or non-numeric values become NaN (a gap in the line)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _series(records: list[dict], agent: str, key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for record in records:
        if agent in record["agents"]:
            steps.append(record["step"])
            values.append(_number(record["agents"][agent].get(key)))
    return steps, values


def _has(records: list[dict], key: str) -> bool:
    return any(math.isfinite(_number(v.get(key))) for r in records for v in r["agents"].values())


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _read_samples(path: Path, per_agent: int = 3) -> dict[str, list[dict]]:
    """A few logged completions per agent (``samples.jsonl``): the last training step's, then the last
    evaluation's. A run from before completions were logged has none; a bad line is one error."""
    if not path.is_file():
        return {}
    latest: dict[tuple[str, str], tuple[int, list[dict]]] = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, step = (str(row["agent"]), str(row["kind"])), int(row["step"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise CorlError(f"{path}:{lineno}: not a logged completion (a JSON object with agent, kind, step)") from None
            seen = latest.get(key)
            if seen is None or step > seen[0]:
                latest[key] = (step, [row])
            elif step == seen[0]:
                seen[1].append(row)
    out: dict[str, list[dict]] = {}
    for (agent, _kind), (_, rows) in sorted(latest.items(), key=lambda item: (item[0][0], item[0][1] != "train")):
        out.setdefault(agent, []).extend(rows[:per_agent])
    return out

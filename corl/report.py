"""A one-page report of a finished (or interrupted) run: PNG figures plus ``report.md`` and ``report.html``.

``render_report(run_dir)`` reads ``metrics.jsonl`` and, when present, ``summary.json`` and writes everything
under ``run_dir/report/``. matplotlib is imported only inside the function, so ``import corl.report`` stays cheap
and the training path never needs it.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

from corl.errors import CorlError

#: Training curves, in grid order: (metrics.jsonl key, subplot title, y is a fraction in [0, 1]).
CURVES = [
    ("reward_mean", "reward mean", True),
    ("reward_std", "reward std", False),
    ("label_accuracy", "pseudo-label accuracy", True),
    ("reward_accuracy", "reward accuracy", True),
    ("entropy", "entropy", False),
    ("completion_length", "completion length (tokens)", False),
]

#: The tab10 palette, so an agent keeps its colour in every figure.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]

DPI = 150


def render_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report/`` (PNGs, ``report.md``, ``report.html``) and return the path of ``report.html``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CorlError(f"{run_dir}: no such run directory")
    train, evals = _read_metrics(run_dir / "metrics.jsonl")
    summary = _read_summary(run_dir / "summary.json")
    name = (summary or {}).get("name") or _run_name(run_dir)
    agents = _agent_order(summary, train, evals)
    colors = {agent: PALETTE[i % len(PALETTE)] for i, agent in enumerate(agents)}
    k = (summary or {}).get("eval_k") or _eval_k(evals)
    cohort_step, cohort = _last_cohort(evals)

    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    plt = _pyplot()
    images: dict[str, str] = {}
    if any(_has(train, key) for key, _, _ in CURVES):
        images["curves.png"] = "training curves"
        _save(plt, _plot_curves(plt, train, agents, colors), out / "curves.png")
    if any(_has(evals, key) for key in ("pass@1", "greedy", f"maj@{k}")):
        images["eval.png"] = "held-out accuracy at each evaluation"
        _save(plt, _plot_eval(plt, evals, agents, colors, k), out / "eval.png")
    if cohort:
        images["cohort.png"] = f"cohort structure at step {cohort_step}"
        _save(plt, _plot_cohort(plt, cohort, cohort_step), out / "cohort.png")
    # A re-render must not leave figures from an older render that the new report does not mention.
    for stale in ("curves.png", "eval.png", "cohort.png"):
        if stale not in images:
            (out / stale).unlink(missing_ok=True)

    page = _page(name, summary, train, evals, agents, k, images, cohort_step, cohort)
    (out / "report.md").write_text(_markdown(page))
    path = out / "report.html"
    path.write_text(_html(page))
    return path


# ---------------------------------------------------------------------------------------------------- reading


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


# ---------------------------------------------------------------------------------------------------- figures


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise CorlError("the report needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")  # no display needed; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> None:
    try:
        fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    finally:
        plt.close(fig)  # long-lived processes (notebooks, a sweep) would otherwise keep every figure


def _window(n: int) -> int:
    """About a twelfth of the run, at most 25 steps; short runs are shown raw."""
    return min(25, max(1, n // 12))


def _moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the finite values in each window, so a missing step does not blank its neighbours."""
    return [_mean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def _legend(fig, agents: list[str], colors: dict[str, str]) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[a], lw=2, marker="o", ms=4) for a in agents]
    fig.legend(handles, agents, loc="upper center", ncol=min(len(agents), 6), frameon=False,
               bbox_to_anchor=(0.5, 1.0))


def _grid(n: int) -> tuple[int, int]:
    cols = 3 if n > 4 else 2 if n > 1 else 1
    return math.ceil(n / cols), cols


def _plot_curves(plt, train: list[dict], agents: list[str], colors: dict[str, str]):
    panels = [c for c in CURVES if _has(train, c[0])]
    rows, cols = _grid(len(panels))
    window = _window(len(train))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.9 * rows + 0.5), squeeze=False)
    for ax, (key, title, fraction) in zip(axes.flat, panels):
        for agent in agents:
            steps, values = _series(train, agent, key)
            if window > 1:  # the raw series stays visible, faintly, so the smoothing hides nothing
                ax.plot(steps, values, color=colors[agent], lw=0.8, alpha=0.25)
            ax.plot(steps, _moving_average(values, window), color=colors[agent], lw=1.8)
        ax.set_title(title + (f"  (moving avg {window})" if window > 1 else ""), fontsize=10)
        if fraction:
            _percent_axis(ax)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    # Only the lowest visible plot in each column gets x labels (a short last row leaves gaps).
    for i, ax in enumerate(axes.flat[:len(panels)]):
        if i + cols >= len(panels):
            ax.set_xlabel("training step", fontsize=9)
        else:
            ax.tick_params(labelbottom=False)
    _legend(fig, agents, colors)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / (2.9 * rows + 0.5)))
    return fig


def _percent_axis(ax) -> None:
    """Fractions as percentages with just enough decimals to tell the ticks apart (50%, not 50.0%)."""
    from matplotlib.ticker import FuncFormatter

    def label(x, pos):
        ticks = ax.yaxis.get_majorticklocs()
        spacing = abs(ticks[1] - ticks[0]) * 100 if len(ticks) > 1 else 1.0
        decimals = max(0, -math.floor(math.log10(spacing))) if spacing > 0 else 0
        return f"{100 * x:.{decimals}f}%"

    ax.yaxis.set_major_formatter(FuncFormatter(label))


def _plot_eval(plt, evals: list[dict], agents: list[str], colors: dict[str, str], k: int | None):
    keys = [("pass@1", "pass@1 (mean over samples)"), ("greedy", "greedy")]
    if k is not None:
        keys.append((f"maj@{k}", f"maj@{k} (majority vote)"))
    keys = [kt for kt in keys if _has(evals, kt[0])]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4), squeeze=False)
    all_ends = []
    for ax, (key, title) in zip(axes[0], keys):
        ends = []
        for agent in agents:
            steps, values = _series(evals, agent, key)
            ax.plot(steps, values, color=colors[agent], lw=1.5, marker="o", ms=5)
            if steps and math.isfinite(values[-1]):
                ends.append((steps[-1], values[-1], colors[agent]))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step", fontsize=9)
        if len(evals) <= 8:  # few evals: tick exactly the evaluated steps
            ax.set_xticks(sorted({r["step"] for r in evals}))
        ax.margins(x=0.15)  # room for the end-value labels
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        all_ends.append(ends)
    _legend(fig, agents, colors)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    for ax, ends in zip(axes[0], all_ends):  # after the layout: the nudging works in screen units
        _label_ends(ax, ends)
    return fig


def _label_ends(ax, ends: list[tuple[int, float, str]], gap: float = 9.0) -> None:
    """Write each line's final value beside its last marker, nudged apart so close values stay readable."""
    ax.autoscale_view()
    to_points = 72 / ax.figure.dpi
    # Lines that end on the same printed value share one label, in grey (its colour would pick one agent).
    groups: dict[tuple[int, str], list[str]] = {}
    for step, value, color in ends:
        groups.setdefault((step, f"{value:.3f}"), []).append(color)
    ends = [(step, float(text), colors[0] if len(colors) == 1 else "#444444")
            for (step, text), colors in groups.items()]
    placed: list[float] = []
    for step, value, color in sorted(ends, key=lambda e: e[1]):
        y = ax.transData.transform((step, value))[1] * to_points
        shift = max(y, placed[-1] + gap) - y if placed else 0.0
        placed.append(y + shift)
        ax.annotate(f"{value:.3f}", (step, value), xytext=(6, shift), textcoords="offset points", va="center",
                    fontsize=7.5, color=color)


def _matrix(rows: list[list[Any]]):
    import numpy as np

    return np.array([[_number(v) for v in row] for row in rows], dtype=float)


def _plot_cohort(plt, cohort: dict, step: int):
    from matplotlib.colors import TwoSlopeNorm

    panels = [("agreement", "answer agreement", "viridis", dict(vmin=0, vmax=1)),
              ("phi", "correctness correlation (phi)", "RdBu_r", dict(norm=TwoSlopeNorm(0, -1, 1))),
              ("same_wrong", "P(same answer | both wrong)", "viridis", dict(vmin=0, vmax=1))]
    panels = [p for p in panels if cohort.get(p[0]) is not None]
    names = cohort["agents"]
    size = 1.6 + 0.65 * len(names)
    # Constrained layout keeps the suptitle close and the colorbars the height of their heatmaps.
    fig, axes = plt.subplots(1, len(panels), figsize=(size * len(panels), size + 0.3), squeeze=False,
                             layout="constrained")
    for ax, (key, title, cmap, scale) in zip(axes[0], panels):
        values = _matrix(cohort[key])
        cmap = plt.get_cmap(cmap).with_extremes(bad="#e0e0e0")  # undefined cells: light grey, labelled n/a
        image = ax.imshow(values, cmap=cmap, **scale)
        _annotate(ax, image, values)
        ax.set_xticks(range(len(names)), names, rotation=45 if len(names) > 3 else 0, ha="right"
                      if len(names) > 3 else "center", fontsize=8)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_title(title, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.8).ax.tick_params(labelsize=7)
    n = cohort.get("n")
    fig.suptitle(f"cohort at step {step}" + (f" ({n} held-out prompts)" if n else ""), fontsize=11)
    return fig


def _annotate(ax, image, values) -> None:
    """Write each value in its cell, dark on light colours and light on dark ones."""
    small = values.shape[0] > 8  # many agents: fewer digits, smaller type
    for (i, j), v in _cells(values):
        if not math.isfinite(v):
            ax.text(j, i, "n/a", ha="center", va="center", fontsize=6 if small else 7.5, color="#666666")
            continue
        r, g, b, _ = image.cmap(image.norm(v))
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.55
        ax.text(j, i, f"{v:.1f}" if small else f"{v:.2f}", ha="center", va="center", fontsize=6 if small else 8,
                color="white" if dark else "black")


def _cells(values):
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            yield (i, j), float(values[i, j])


# ---------------------------------------------------------------------------------------------------- the page


def _page(name, summary, train, evals, agents, k, images, cohort_step, cohort) -> dict[str, Any]:
    """Everything both formats show, as plain strings; the Markdown and HTML writers only lay it out."""
    rows, source = _table(summary, evals, agents, k)
    facts = [f"{summary.get('steps')} steps" if summary else f"{train[-1]['step'] if train else 0} steps logged",
             _duration(_number(summary.get("seconds")) if summary else _total_seconds(train))]
    if summary and summary.get("eval_prompts"):
        facts.append(f"{summary['eval_prompts']} held-out prompts, k={k}")
    notes = []
    if source:
        notes.append(source)
    if "curves.png" not in images:
        notes.append("No training records in metrics.jsonl, so there are no training curves.")
    if "eval.png" not in images:
        notes.append("No evaluation records in metrics.jsonl, so there is no held-out accuracy plot.")
    if cohort is None:
        notes.append("No cohort data in this run (agreement / correctness correlation between agents), "
                     "so there is no cohort plot.")
    return {"title": f"Co-RL run: {name}", "facts": ", ".join(facts), "k": k, "rows": rows,
            "sentences": [s for a in agents if (s := _sentence(a, summary, train, evals, cohort))],
            "images": images, "notes": notes}


def _total_seconds(train: list[dict]) -> float:
    seconds = [_number(r.get("seconds")) for r in train]
    return sum(s for s in seconds if math.isfinite(s)) if train else math.nan


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "duration unknown"
    text = f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return text + (f" ({seconds / 60:.1f} min)" if seconds >= 120 else "")


def _before_after(summary, evals, agents) -> tuple[dict[str, dict], str]:
    """Per agent: before, after, best and best_step, from summary.json or, for an unfinished run, the evals."""
    if summary:
        return {a: s for a, s in summary["agents"].items()  # an agent never evaluated has an empty entry
                if isinstance(s, dict) and all(isinstance(s.get(x), dict) for x in ("before", "after", "best"))}, ""
    table = {}
    for agent in agents:
        points = [(r["step"], r["agents"][agent]) for r in evals if agent in r["agents"]]
        if points:
            # The same rule as the runner's summary: best pass@1, earliest step on ties.
            best_step, best = max(points, key=lambda p: (_number(p[1].get("pass@1")), -p[0]))
            table[agent] = {"before": points[0][1], "after": points[-1][1], "best": best, "best_step": best_step}
    note = "No summary.json (the run did not finish?); the table is built from the eval records in metrics.jsonl."
    return table, note if evals else "No summary.json and no evaluation records, so there is no table."


def _table(summary, evals, agents, k) -> tuple[list[list[str]], str]:
    table, note = _before_after(summary, evals, agents)
    cols = ["greedy", "pass@1"] + ([f"maj@{k}"] if k is not None else [])
    rows = []
    for agent, s in table.items():
        cells = [_change(s["before"].get(c), s["after"].get(c)) for c in cols]
        best = _number(s["best"].get("pass@1"))
        rows.append([agent, *cells, f"{best:.3f} @ step {s.get('best_step')}" if math.isfinite(best) else "n/a"])
    return rows, note


def _change(before: Any, after: Any) -> str:
    b, a = _number(before), _number(after)
    if not (math.isfinite(b) and math.isfinite(a)):
        return "n/a"
    return f"{b:.3f} → {a:.3f} ({100 * (a - b):+.1f} pt)"


def _sentence(agent, summary, train, evals, cohort) -> str:
    """One line per agent, computed from the data: the pass@1 change and what its training signal was worth."""
    table, _ = _before_after(summary, evals, [agent])
    parts = []
    if agent in table:
        b, a = _number(table[agent]["before"].get("pass@1")), _number(table[agent]["after"].get("pass@1"))
        if math.isfinite(b) and math.isfinite(a):
            parts.append(f"pass@1 {b:.3f} → {a:.3f} ({100 * (a - b):+.1f} pt)")
    label = _mean(_series(train, agent, "label_accuracy")[1])
    if math.isfinite(label):
        parts.append(f"its pseudo-label was right {label:.0%} of the time")
    reward = _mean(_series(train, agent, "reward_accuracy")[1])
    if math.isfinite(reward):
        parts.append(f"its reward matched the true one {reward:.0%} of the time")
    partner = _closest(agent, cohort)
    if partner:
        parts.append(f"it agrees most with {partner[0]} ({partner[1]:.0%} of answers)")
    return f"{agent}: " + "; ".join(parts) if parts else ""


def _closest(agent: str, cohort: dict | None) -> tuple[str, float] | None:
    if not cohort or cohort.get("agreement") is None or agent not in cohort["agents"]:
        return None
    names = cohort["agents"]
    row = cohort["agreement"][names.index(agent)]
    others = [(names[j], _number(v)) for j, v in enumerate(row) if names[j] != agent and math.isfinite(_number(v))]
    return max(others, key=lambda p: p[1]) if others else None


def _markdown(page: dict) -> str:
    lines = [f"# {page['title']}", "", page["facts"], ""]
    if page["rows"]:
        header = ["agent", "greedy", "pass@1"] + ([f"maj@{page['k']}"] if page["k"] is not None else [])
        header.append("best pass@1")
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in page["rows"]]
        lines.append("")
    lines += [f"- {s}" for s in page["sentences"]]
    lines += [""] + [f"*{n}*\n" for n in page["notes"]]
    for file, alt in page["images"].items():
        lines += [f"![{alt}]({file})", ""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"  # parts left out leave no gaps


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.facts { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.note { color: #666; font-style: italic; }
img { max-width: 100%; display: block; margin: 1em 0; }
"""


def _html(page: dict) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{e(page['title'])}"
             f"</title>\n<style>{STYLE}</style>\n</head>\n<body>",
             f"<h1>{e(page['title'])}</h1>", f"<p class=\"facts\">{e(page['facts'])}</p>"]
    if page["rows"]:
        header = ["agent", "greedy", "pass@1"] + ([f"maj@{page['k']}"] if page["k"] is not None else [])
        header.append("best pass@1")
        parts.append("<table>\n<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in page["rows"]]
        parts.append("</table>")
    if page["sentences"]:
        parts.append("<ul>\n" + "\n".join(f"<li>{e(s)}</li>" for s in page["sentences"]) + "\n</ul>")
    parts += [f"<p class=\"note\">{e(n)}</p>" for n in page["notes"]]
    parts += [f"<img src=\"{e(file)}\" alt=\"{e(alt)}\">" for file, alt in page["images"].items()]
    parts.append("</body>\n</html>")
    return "\n".join(parts) + "\n"

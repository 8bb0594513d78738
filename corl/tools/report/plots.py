"""The report's figures (matplotlib, imported only here): training curves, held-out accuracy, cohort heatmaps."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from corl.errors import CorlError
from corl.tools.report.read import _has, _mean, _number, _series

DPI = 150
#: Training curves, in grid order: (metrics.jsonl key, subplot title, y is a fraction in [0, 1]).
CURVES = [
    ("reward_mean", "reward mean", True),
    ("reward_std", "reward std", False),
    ("label_accuracy", "pseudo-label accuracy", True),
    ("reward_accuracy", "reward accuracy", True),
    ("entropy", "entropy", False),
    ("completion_length", "completion length (tokens)", False),
]


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
    run_steps = {r["step"] for r in train}  # every panel spans the run, also one whose metric has one value
    for ax, (key, title, fraction) in zip(axes.flat, panels):
        for agent in agents:
            steps, values = _series(train, agent, key)
            if window > 1:  # the raw series stays visible, faintly, so the smoothing hides nothing
                ax.plot(steps, values, color=colors[agent], lw=0.8, alpha=0.25)
            smooth = _moving_average(values, window)
            ax.plot(steps, smooth, color=colors[agent], lw=1.8, marker="o", ms=4, markevery=_marked_points(smooth))
        ax.set_title(title + (f"  (moving avg {window})" if window > 1 else ""), fontsize=10)
        _step_axis(ax, run_steps)
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


def _marked_points(values: list[float], few: int = 30) -> list[int]:
    """Which points get a marker: all of a short series (a line of one or two points is invisible or
    reads as a trend between fractional steps), else those whose neighbours are missing (a lone value
    between gaps draws no line)."""
    finite = [math.isfinite(v) for v in values]
    if sum(finite) <= few:
        return [i for i, f in enumerate(finite) if f]
    return [i for i, f in enumerate(finite)
            if f and not (i > 0 and finite[i - 1]) and not (i + 1 < len(finite) and finite[i + 1])]


def _step_axis(ax, steps: set[int], room: float = 0.03, few: int = 8) -> None:
    """Steps are whole numbers: a short run ticks exactly its steps (matplotlib's own locator would tick
    1.900 ... 2.100 around one step), a long one whole steps only. The axis spans ``steps`` (also where a
    metric was logged at one step only), with ``room`` of the span, at least half a step, either side."""
    from matplotlib.ticker import MaxNLocator

    if not steps:
        return
    if len(steps) <= few:
        ax.set_xticks(sorted(steps))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    low, high = min(steps), max(steps)
    pad = max(0.5, room * (high - low))
    ax.set_xlim(low - pad, high + pad)


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
            # error bars where the evaluation measured a standard error (pass@1's over its k samples)
            _, errors = _series(evals, agent, f"{key}_se")
            if any(math.isfinite(e) for e in errors):
                ax.errorbar(steps, values, yerr=[e if math.isfinite(e) else 0.0 for e in errors], color=colors[agent],
                            lw=1.5, marker="o", ms=5, capsize=3, elinewidth=1)
            else:
                ax.plot(steps, values, color=colors[agent], lw=1.5, marker="o", ms=5)
            if steps and math.isfinite(values[-1]):
                ends.append((steps[-1], values[-1], colors[agent]))
        ax.set_title(title + (" ± s.e." if _has(evals, f"{key}_se") else ""), fontsize=10)
        ax.set_xlabel("training step", fontsize=9)
        _step_axis(ax, {r["step"] for r in evals}, room=0.15)  # room for the end-value labels
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
        # A few agents make narrow panels: the title wraps to their width instead of running off the figure.
        ax.set_title(textwrap.fill(title, max(14, int(6.5 * size))), fontsize=10)
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

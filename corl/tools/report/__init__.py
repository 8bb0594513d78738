"""A one-page report of a finished (or interrupted) run: PNG figures plus ``report.md`` and ``report.html``.

``render_report(run_dir)`` reads ``metrics.jsonl`` and, when present, ``summary.json`` and ``samples.jsonl``
(a few completions per agent, with the answer taken from each and its label and reward) and writes everything
under ``run_dir/report/``. matplotlib is imported only inside the function, so ``import corl.tools.report`` stays cheap
and the training path never needs it.
"""

from __future__ import annotations

from pathlib import Path

from corl.errors import CorlError
from corl.tools.report.page import _html, _markdown, _page
from corl.tools.report.plots import CURVES, _plot_cohort, _plot_curves, _plot_eval, _pyplot, _save
from corl.tools.report.read import (
    _agent_order,
    _eval_k,
    _has,
    _last_cohort,
    _read_metrics,
    _read_samples,
    _read_summary,
    _run_name,
)

#: The tab10 palette, so an agent keeps its colour in every figure.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


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
    page["samples"] = _read_samples(run_dir / "samples.jsonl")
    (out / "report.md").write_text(_markdown(page))
    path = out / "report.html"
    path.write_text(_html(page))
    return path

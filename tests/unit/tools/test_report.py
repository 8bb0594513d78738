import json
import re

import pytest

from corl.errors import CorlError
from corl.tools.report import render_report

pytest.importorskip("matplotlib")

AGENTS = ["llama", "qwen2", "neox"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COHORT = {"agents": AGENTS, "n": 100,
          "agreement": [[1.0, 0.71, 0.64], [0.71, 1.0, 0.58], [0.64, 0.58, 1.0]],
          "phi": [[1.0, 0.32, -0.12], [0.32, 1.0, 0.05], [-0.12, 0.05, 1.0]],
          "same_wrong": [[None, 0.41, 0.22], [0.41, None, 0.3], [0.22, 0.3, None]]}


def train_record(step, labels=True):
    agents = {}
    for i, name in enumerate(AGENTS):
        m = {"reward_mean": 0.5 + 0.01 * step - 0.1 * i, "reward_std": 0.45 + 0.002 * step, "label_share": 0.7,
             "entropy": 0.4 - 0.005 * step, "completion_length": 3.2 + 0.01 * (step % 3), "loss": 0.0, "kl": 0.0,
             "grad_norm": 2.5, "clip_frac": 0.0}
        if labels:
            m |= {"label_accuracy": 0.8 - 0.1 * i, "reward_accuracy": 0.9 - 0.05 * i}
        agents[name] = m
    return {"kind": "train", "step": step, "seconds": 0.4, "agents": agents}


def eval_record(step, cohort=None):
    agents = {name: {"greedy": 0.70 - 0.1 * i + 0.002 * step, "pass@1": 0.668 - 0.1 * i + 0.001 * step,
                     "maj@8": 0.685 - 0.1 * i, "pass@8": 0.84, "length": 3.3} for i, name in enumerate(AGENTS)}
    record = {"kind": "eval", "step": step, "agents": agents}
    if cohort:
        record["cohort"] = cohort
    return record


def make_run(path, cohort=True, labels=True, steps=12):
    path.mkdir(parents=True, exist_ok=True)
    records = [eval_record(0, COHORT if cohort else None)]
    records += [train_record(s, labels) for s in range(1, steps + 1)]
    records.append(eval_record(steps, COHORT if cohort else None))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    first, last = records[0]["agents"], records[-1]["agents"]
    summary = {"name": "tiny_ring", "steps": steps, "seconds": 5.2, "eval_prompts": 100, "eval_k": 8,
               "agents": {n: {"before": first[n], "after": last[n], "best": last[n], "best_step": steps}
                          for n in AGENTS}}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def assert_png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert path.stat().st_size > 5000
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height > 100 and width > 100


def test_a_run_with_cohort_data_renders_every_figure_and_the_table(tmp_path):
    html_path = render_report(make_run(tmp_path / "run"))
    out = tmp_path / "run" / "report"
    assert html_path == out / "report.html"
    pngs = ["curves.png", "eval.png", "cohort.png"]
    for name in pngs:
        assert_png(out / name)
    page = html_path.read_text()
    md = (out / "report.md").read_text()
    for name in pngs:
        assert f'<img src="{name}"' in page
        assert f"]({name})" in md
    assert "tiny_ring" in page and "12 steps" in page
    # llama: pass@1 0.668 -> 0.680 (+1.2 pt); greedy 0.700 -> 0.724; maj@8 unchanged; best at step 12
    expected = ["0.668 → 0.680 (+1.2 pt)", "0.700 → 0.724 (+2.4 pt)", "0.685 → 0.685 (+0.0 pt)",
                "0.680 @ step 12", "0.468 → 0.480"]  # the last one is neox's pass@1
    for text in expected:
        assert text in page and text in md
    assert "pseudo-label was right 80% of the time" in page  # llama's label_accuracy, from the train records
    assert "agrees most with qwen2 (71%" in page
    assert "No cohort data" not in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # self-contained: no CDN, no remote assets


def test_without_cohort_data_there_is_no_cohort_figure_and_the_report_says_so(tmp_path):
    run = make_run(tmp_path / "run", cohort=True)
    render_report(run)
    assert (run / "report" / "cohort.png").exists()
    make_run(run, cohort=False, labels=False)  # the same directory, rewritten by a run without cohort logging
    page = render_report(run).read_text()
    assert not (run / "report" / "cohort.png").exists()
    assert "cohort.png" not in page
    assert "No cohort data" in page and "No cohort data" in (run / "report" / "report.md").read_text()
    assert "pseudo-label" not in page.split("<ul>")[1]  # no labels: no claim about label accuracy
    assert_png(run / "report" / "curves.png")


def test_an_unfinished_run_builds_the_table_from_the_eval_records(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "summary.json").unlink()
    page = render_report(run).read_text()
    assert "No summary.json" in page
    assert "0.668 → 0.680 (+1.2 pt)" in page


def test_a_malformed_line_names_the_file_and_line(tmp_path):
    run = make_run(tmp_path / "run")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[3] = lines[3][:40] + "\n"  # a line cut short, as by a crash mid-write
    (run / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(CorlError, match=r"metrics\.jsonl:4: ") as info:
        render_report(run)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("line, problem", [
    ('[1, 2]', "expected a JSON object"),
    ('{"kind": "train", "step": "3", "agents": {}}', "'step' must be an integer"),
    ('{"kind": "eval", "step": 3, "agents": {}, "cohort": {"agents": ["a", "b"], "agreement": [[1]]}}',
     "2x2 matrix"),
])
def test_records_of_the_wrong_shape_are_rejected(tmp_path, line, problem):
    run = make_run(tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as f:
        f.write(line + "\n")
    with pytest.raises(CorlError, match=rf"metrics\.jsonl:15: .*{re.escape(problem)}"):
        render_report(run)


def test_missing_inputs_are_user_errors(tmp_path):
    with pytest.raises(CorlError, match="no such run directory"):
        render_report(tmp_path / "nowhere")
    with pytest.raises(CorlError, match=r"metrics\.jsonl: not found"):
        render_report(tmp_path)


def _visible_ticks(ax):
    low, high = ax.get_xlim()
    return [t for t in ax.get_xticks() if low <= t <= high]


def test_step_axes_tick_whole_steps_and_pass_at_1_has_error_bars():
    from matplotlib.container import ErrorbarContainer

    from corl.tools.report.plots import _plot_curves, _plot_eval, _pyplot

    plt = _pyplot()
    colors = dict(zip(AGENTS, ["r", "g", "b"]))
    curves = _plot_curves(plt, [train_record(s) for s in (1, 2, 3)], AGENTS, colors)  # matplotlib's own: 1.0, 1.5, ...
    evals = [eval_record(s) for s in range(0, 20, 2)]  # ten evaluations: ticks left to the locator
    for record in evals:
        for values in record["agents"].values():
            values["pass@1_se"] = 0.02
    figure = _plot_eval(plt, evals, AGENTS, colors, 8)
    try:
        for ax in [a for a in curves.axes if a.get_visible()] + figure.axes:
            ticks = _visible_ticks(ax)
            assert ticks and all(t == int(t) for t in ticks), (ax.get_title(), ticks)
        pass1, greedy = figure.axes[0], figure.axes[1]
        assert pass1.get_title().endswith("± s.e.")
        assert sum(isinstance(c, ErrorbarContainer) for c in pass1.containers) == len(AGENTS)
        assert not any(isinstance(c, ErrorbarContainer) for c in greedy.containers)  # no s.e. measured for greedy
    finally:
        plt.close(curves)
        plt.close(figure)


def _drawn_points(ax):
    """(x, y) of every point a line of ``ax`` shows: both ends of its segments and its markers."""
    import numpy as np

    points = []
    for line in ax.get_lines():
        xs, ys = (np.asarray(a, dtype=float) for a in line.get_data())
        finite = np.isfinite(ys)
        marked = line.get_marker() not in (None, "", "None", " ") and line.get_markersize() > 0
        for i in np.flatnonzero(finite):
            joined = (i > 0 and finite[i - 1]) or (i + 1 < len(ys) and finite[i + 1])
            every = line.get_markevery()
            if joined or marked and (every is None or i in list(every)):
                points.append((xs[i], ys[i]))
    return points


@pytest.mark.parametrize("steps", [1, 2])
def test_a_short_run_draws_whole_steps_and_every_value_visibly(steps):
    """One- and two-step runs: ticks only at whole steps (matplotlib alone ticks 1.900 ... 2.100), and a
    metric logged at one step only is a visible marker, not an empty panel."""
    from corl.tools.report.plots import _plot_curves, _plot_eval, _pyplot

    plt = _pyplot()
    colors = dict(zip(AGENTS, ["r", "g", "b"]))
    train = [train_record(s) for s in range(1, steps + 1)]
    for record in train[:-1]:  # reward accuracy and entropy logged at the last step only
        for values in record["agents"].values():
            del values["reward_accuracy"], values["entropy"]
    curves = _plot_curves(plt, train, AGENTS, colors)
    evals = _plot_eval(plt, [eval_record(0), eval_record(steps)], AGENTS, colors, 8)
    try:
        for ax in [a for a in curves.axes if a.get_visible()] + evals.axes:
            ticks = _visible_ticks(ax)
            assert ticks and all(t == int(t) for t in ticks), (ax.get_title(), ticks)
            points = _drawn_points(ax)
            assert len(points) >= len(AGENTS), (ax.get_title(), points)  # every agent's value is shown
            assert all(x == int(x) for x, _ in points)
            low, high = ax.get_xlim()
            assert all(low < x < high for x, _ in points)
    finally:
        plt.close(curves)
        plt.close(evals)


def test_cohort_titles_fit_their_figure_for_two_agents():
    from corl.tools.report.plots import _plot_cohort, _pyplot

    plt = _pyplot()
    two = {"agents": ["smollm2", "gemma3"], "n": 48, "agreement": [[1, 0.5], [0.5, 1]], "phi": [[1, 0.2], [0.2, 1]],
           "same_wrong": [[None, 0.3], [0.3, None]]}
    fig = _plot_cohort(plt, two, 2)
    try:
        fig.canvas.draw()
        box = fig.bbox
        renderer = fig.canvas.get_renderer()
        titles = [ax.title for ax in fig.axes if ax.get_title()]
        assert len(titles) == 3
        for title in titles:
            extent = title.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1, title.get_text()
        for ax in fig.axes:  # nor does any run under another panel or a colour bar (drawn over it)
            for other in fig.axes:
                if other is not ax and ax.get_title():
                    assert not ax.title.get_window_extent(renderer).overlaps(other.get_window_extent(renderer)), \
                        ax.get_title()
    finally:
        plt.close(fig)


def test_the_report_says_which_agents_started_from_a_warm_up(tmp_path):
    run = make_run(tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["warm_ups"] = {"qwen2": {"steps": 4, "lr": 1e-5, "batch_size": 8, "examples": 64,
                                     "base_fingerprint": "abc123", "warm_up_fingerprint": "def456"}}
    (run / "summary.json").write_text(json.dumps(summary))
    page = render_report(run).read_text()
    md = (run / "report" / "report.md").read_text()
    for text in ("qwen2 started from a supervised warm-up of 4 steps (lr 1e-05, batch 8, 64 labeled seed examples; "
                 "base abc123, warm-up def456)",):
        assert text in page and text in md
    assert "llama started from" not in page

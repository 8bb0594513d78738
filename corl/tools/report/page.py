"""The report's page: the before/after table, one sentence per agent, as Markdown and HTML."""

from __future__ import annotations

import html
import math
import re
from typing import Any

from corl.tools.report.read import _mean, _number, _series


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
    for agent, w in ((summary or {}).get("warm_ups") or {}).items():
        notes.append(f"{agent} started from a supervised warm-up of {w.get('steps')} steps (lr {w.get('lr')}, batch "
                     f"{w.get('batch_size')}, {w.get('examples')} labeled seed examples; base {w.get('base_fingerprint')}, "
                     f"warm-up {w.get('warm_up_fingerprint')}).")
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
    if page.get("samples"):
        lines += ["## Completions", "", SAMPLES_NOTE, ""]
        cell = lambda v: "" if v is None else str(v).replace("|", "\\|").replace("\n", " ⏎ ")
        for agent, rows in page["samples"].items():
            lines += [f"### {agent}", "", "| " + " | ".join(SAMPLE_HEADER) + " |", "|" + "---|" * len(SAMPLE_HEADER)]
            lines += ["| " + " | ".join(cell(r.get(c)) for c in SAMPLE_HEADER) + " |" for r in rows]
            lines.append("")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"  # parts left out leave no gaps


SAMPLE_HEADER = ("kind", "step", "prompt", "completion", "answer", "label", "reward", "truth")
SAMPLES_NOTE = ("The latest logged completions of each agent (samples.jsonl, run.log_completions a step): the answer "
                "taken from each, the label it was scored against (train: the pseudo-label that paid it; eval: the "
                "agent's majority) and the hidden label.")


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
table.samples td { text-align: left; white-space: pre-wrap; max-width: 30em; }
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
    if page.get("samples"):
        parts += ["<h2>Completions</h2>", f"<p class=\"note\">{e(SAMPLES_NOTE)}</p>"]
        for agent, rows in page["samples"].items():
            parts.append(f"<h3>{e(agent)}</h3>\n<table class=\"samples\">\n<tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in SAMPLE_HEADER) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e('' if r.get(c) is None else str(r.get(c)))}</td>" for c in SAMPLE_HEADER)
                      + "</tr>" for r in rows]
            parts.append("</table>")
    parts.append("</body>\n</html>")
    return "\n".join(parts) + "\n"

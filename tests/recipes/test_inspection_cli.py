"""corl eval, corl cohort and corl report on a real (tiny) run's output, through the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit import TINY

ROOT = Path(__file__).resolve().parents[2]


def corl(*args, cache_dir):
    return subprocess.run([sys.executable, "-m", "corl.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)}, timeout=600)


def sets(*items):
    return [x for item in items for x in ("--set", item)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("inspect") / "run"
    res = corl("run", str(ROOT / "recipes" / "three_agent_ring.toml"), *sets(*TINY, f"run.output_dir={out}"),
               cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def test_eval_scores_a_runs_final_checkpoints(run_dir, cache_dir):
    res = corl("eval", str(run_dir), "--json", "--k", "3", "--size", "12", cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["settings"]["prompts"] == 12 and out["settings"]["k"] == 3 and out["settings"]["temperature"] == 1.0
    assert set(out["results"]) == {"llama", "qwen2", "neox"}
    for name, model in out["settings"]["models"].items():
        assert model == str(run_dir / "checkpoints" / "final" / name)
    for scores in out["results"].values():
        assert 0 <= scores["pass@1"] <= scores["pass@3"] <= 1 and "maj@3" in scores
    assert out["cohort"]["agents"] == ["llama", "qwen2", "neox"] and len(out["cohort"]["phi"]) == 3
    assert "samples" not in out  # completions only on request
    with_samples = json.loads(corl("eval", str(run_dir), "--json", "--k", "3", "--size", "12", "--samples", "2",
                                   cache_dir=cache_dir).stdout)
    assert [(s["agent"], s["kind"]) for s in with_samples["samples"]] == [(a, "eval") for a in ("llama", "qwen2", "neox")
                                                                          for _ in range(2)]
    assert all({"prompt", "completion", "answer", "label", "truth"} <= set(s) for s in with_samples["samples"])
    # the final scores are the ones the run itself measured at its last step (same seed, same stream)
    table = corl("eval", str(run_dir), "--size", "12", "--k", "3", cache_dir=cache_dir)
    assert "12 held-out prompts; pass@1 and maj@3 from 3 samples at temperature 1.0" in table.stdout
    assert "P(same wrong answer | both wrong)" in table.stdout


def test_eval_named_models_and_bad_model_argument(run_dir, cache_dir):
    final = run_dir / "checkpoints" / "final"
    res = corl("eval", str(run_dir), "--json", "--size", "8", "--k", "2", "--model", f"tuned={final / 'llama'}",
               "--model", "base=zoo:llama-tiny", *sets("zoo.steps=20", "task.seed_size=256"), cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    assert set(json.loads(res.stdout)["results"]) == {"tuned", "base"}
    one = corl("eval", str(run_dir), "--json", "--size", "4", "--k", "2", "--model", f"only={final / 'neox'}",
               cache_dir=cache_dir)  # a single model, though the run's topology is a ring
    assert one.returncode == 0, one.stderr[-2000:]
    assert list(json.loads(one.stdout)["results"]) == ["only"]
    bad = corl("eval", str(run_dir), "--model", "oops", cache_dir=cache_dir)
    assert bad.returncode == 2 and bad.stderr.strip() == "corl: error: --model 'oops': expected NAME=PATH (a zoo: name or a model folder)"


def test_cohort_ranks_candidate_peers(cache_dir):
    res = corl("cohort", str(ROOT / "recipes" / "three_agent_ring.toml"), "--json", "--prompts", "16",
               *sets(*TINY), cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["prompts"] == 16 and set(out["strength"]) == {"llama", "qwen2", "neox"}
    ranked = out["ranked"]
    zero = corl("cohort", str(ROOT / "recipes" / "three_agent_ring.toml"), "--prompts", "0", cache_dir=cache_dir)
    assert zero.returncode == 2 and zero.stderr.strip() == "corl: error: --prompts 0: must be at least 1"
    assert len(ranked) == 4  # three pairs and one trio
    assert [c["score"] for c in ranked] == sorted((c["score"] for c in ranked), reverse=True)
    assert {c["topology"] for c in ranked} == {"ring", "all_pairs"}


def test_report_renders_the_runs_curves_and_heatmaps(run_dir, cache_dir):
    res = corl("report", str(run_dir), cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    html = Path(res.stdout.strip())
    assert html == run_dir / "report" / "report.html"
    for png in ("curves.png", "eval.png", "cohort.png"):  # the run's evals carry cohort matrices
        data = (html.parent / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert png in html.read_text()
    # a few completions per agent, with the answer taken from each and what it was scored against
    logged = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {x["agent"] for x in logged} == {"llama", "qwen2", "neox"} and {x["kind"] for x in logged} == {"train", "eval"}
    report = (html.parent / "report.md").read_text()
    group = lambda x: (x["agent"], x["kind"], x["step"])
    shown = next(x for x in logged if group(x) == group(logged[-1]))  # the first of the newest evaluation's rows
    assert "## Completions" in report and shown["completion"] in report
    missing = corl("report", str(run_dir / "nope"), cache_dir=cache_dir)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_screen_prints_the_cohorts_figures(cache_dir):
    res = corl("screen", str(ROOT / "recipes" / "three_agent_ring.toml"), "--json", "--prompts", "8", "--k", "4",
               *sets(*TINY), cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["prompts"] == 8 and out["k"] == 4 and out["labelled"] and out["split"] == "eval"
    assert set(out["agents"]) == {"llama", "qwen2", "neox"} and len(out["pairs"]) == 3
    assert all(0 <= a["pass@1"] <= 1 and "pooled others" in out["corrections"][n] for n, a in out["agents"].items())
    text = corl("screen", str(ROOT / "recipes" / "three_agent_ring.toml"), "--prompts", "4", "--k", "2",
                *sets(*TINY), cache_dir=cache_dir)
    assert text.returncode == 0 and "corrections:" in text.stdout and "pooled vote of all agents" in text.stdout

"""The run every fault test breaks: two `corl run` racing for one folder, the winner SIGKILLed inside
retention's delete of an old checkpoint (CORL_FAULT=retention:3), and a clean resume of it.

The tiny zoo's three-agent ring, shrunk to 4 steps with a checkpoint after every step: the killed
run leaves step-000002 and step-000003, a half-done delete of step-000001, and metrics up to step 3.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from corl import cli
from tests.kit import ROOT

RECIPE = ROOT / "recipes" / "three_agent_ring.toml"
AGENTS = ("llama", "qwen2", "neox")
SETTINGS = [
    "run.steps=4", "run.checkpoint_every=1", "run.keep_checkpoints=2", "run.prompts_per_step=8", "zoo.steps=20",
    "task.seed_size=256", "task.train_size=64", "task.eval_size=32", "eval.size=8", "eval.k=2", "eval.every=0",
    "voting.n_votes=4", "voting.n_train=4", "run.observers=['jsonl', 'checkpoint']",
    # a schedule's span is part of what a resume must keep
    "agents[0].optimizer.lr_schedule='cosine'", "agents[0].optimizer.warmup_steps=1",
    "agents[0].optimizer.min_lr_ratio=0.1",
]


def args(out: Path, *extra: str, sets=()) -> list[str]:
    return ["run", str(RECIPE), *[x for s in [*SETTINGS, *sets, f"run.output_dir={out}"] for x in ("--set", s)], *extra]


def spawn(out: Path, *extra: str, fault: str = "", sets=()) -> subprocess.Popen:
    env = {**os.environ, "CORL_FAULT": fault, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "corl.cli", *args(out, *extra, sets=sets)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def corl(*argv: str) -> tuple[int, str]:
    """``corl ARGV`` in this process (nothing to import again): its exit status and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(list(argv))
    return rc, err.getvalue()


def records(out: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (out / name).read_text().splitlines()]


def trained_steps(out: Path) -> list[int]:
    return [r["step"] for r in records(out) if r["kind"] == "train"]


def final_weights(out: Path) -> dict:
    return {name: load_file(out / "checkpoints" / "final" / name / "model.safetensors") for name in AGENTS}


def copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


def holder_recorded(out: Path, deadline: float) -> dict | None:
    while time.time() < deadline:
        try:
            return json.loads((out / ".corl.lock").read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


@pytest.fixture(scope="session")
def race(tmp_path_factory, cache_dir):
    """Two `corl run` into one folder at once; while the winner runs, a third `corl run --resume`
    (in this process) asks for the folder too. The winner is SIGKILLed mid-retention at step 3."""
    out = tmp_path_factory.mktemp("race") / "run"
    procs = [spawn(out, fault="retention:3") for _ in range(2)]
    holder = holder_recorded(out, time.time() + 300)
    live = {}
    if holder is not None:
        # a temp folder of the live run's (as its checkpoint write would leave it): no resume may remove it
        tmp = out / "checkpoints" / ".step-000099.tmp-live"
        tmp.mkdir(parents=True, exist_ok=True)
        rc, err = corl(*args(out, "--resume"))
        live = {"rc": rc, "err": err, "tmp_kept": tmp.is_dir(), "alive": [p.poll() is None for p in procs]}
        shutil.rmtree(tmp, ignore_errors=True)
    results = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        results.append((p.returncode, p.pid, err))
    base = tmp_path_factory.mktemp("killed") / "run"
    if out.is_dir():
        copy(out, base)
    return {"out": out, "base": base, "holder": holder, "live": live, "results": results}


@pytest.fixture(scope="session")
def killed(race) -> Path:
    """The folder the killed run left (a pristine copy: copy it before breaking it)."""
    winner = [r for r in race["results"] if r[0] != 2]
    assert len(winner) == 1 and winner[0][0] < 0, [(rc, err[-1500:]) for rc, _, err in race["results"]]
    return race["base"]


@pytest.fixture(scope="session")
def resumed(killed, tmp_path_factory) -> tuple[Path, str]:
    """The killed run, its logs torn as a kill leaves them, resumed to the end (the run every other
    resume of it must equal); and what the resume said."""
    out = copy(killed, tmp_path_factory.mktemp("resumed") / "run")
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 4, "agen')  # half a line: what a kill or a full disk leaves
    with open(out / "samples.jsonl", "a") as f:
        f.write('{"kind": "train", "st')
    rc, err = corl(*args(out, "--resume"))
    assert rc == 0, err[-3000:]
    return out, err

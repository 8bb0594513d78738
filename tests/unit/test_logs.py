"""Messages through `logging.getLogger("corl")` (an embedding program controls them) and progress
that still says something when stderr is not a terminal (CI, SLURM logs)."""

import logging
import os
import subprocess
import sys

import pytest

import corl
from corl import logs
from corl.testing import fake_recipe, install_plugin, uninstall_plugin, write_recipe
from corl.types import StepMetrics
from tests.kit import ROOT


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_off_a_terminal_logs_a_line_every_tenth(caplog, monkeypatch):
    monkeypatch.setattr(logs, "interactive", lambda: False)
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="corl"):
        with logs.Progress("warm-start llama", 50, clock=clock, seconds=1e9) as progress:
            for _ in range(50):
                clock.now += 2.0
                progress.advance()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10
    assert lines[0] == "warm-start llama: step 5/50 (10%), 10s elapsed, 2.00 s/step, ETA 1m30s"
    assert lines[-1] == "warm-start llama: step 50/50 (100%), 1m40s elapsed, 2.00 s/step, ETA 0s"
    assert all(r.name == "corl" and r.levelno == logging.INFO for r in caplog.records)


def test_progress_also_logs_when_a_step_is_slow(caplog, monkeypatch):
    monkeypatch.setattr(logs, "interactive", lambda: False)
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="corl"):
        progress = logs.Progress("co-rl run", 1000, completed=500, clock=clock, seconds=60)
        clock.now += 90  # one step of a resumed run, slower than the interval
        progress.advance(info="a: r=0.50")
    assert [r.getMessage() for r in caplog.records] == [
        "co-rl run: step 501/1000 (50%), 1m30s elapsed, 90.00 s/step, ETA 12h28m  a: r=0.50"]


def test_progress_on_a_terminal_draws_a_bar_and_logs_nothing(caplog, monkeypatch):
    monkeypatch.setattr(logs, "interactive", lambda: True)
    with caplog.at_level(logging.INFO, logger="corl"):
        items = list(logs.track(range(20), "warm-start qwen2", 20))
    assert items == list(range(20)) and caplog.records == []
    with caplog.at_level(logging.WARNING, logger="corl"):  # a program that silenced corl gets no bar either
        assert logs.Progress("quiet", 5).bar is None


class StopAtTwo:
    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics):
        if step == 2:
            run.request_stop("enough for this test")


class NaNOnce:
    """A router whose first step's rewards for one agent are NaN: a health message."""

    supervised = False

    def __init__(self):
        self.calls = 0

    def route(self, votes, labels, verifier, aggregator, truth=None):
        self.calls += 1
        return {n: [[float("nan") if (n == "fake0" and self.calls == 1) else float(i % 2) for i in range(len(vs))]
                    for vs in votes[n]] for n in votes}


def test_a_runs_messages_go_through_the_corl_logger(caplog, corl_run):
    recipe = fake_recipe(**{"run.steps": 4, "run.checkpoint_every": 1})
    with caplog.at_level(logging.INFO, logger="corl"):
        _, out = corl_run(recipe, plugins=[StopAtTwo()], router=NaNOnce())
    by_level = {(r.levelno, r.getMessage()) for r in caplog.records}
    assert (logging.INFO, f"step 1: checkpoint {out / 'checkpoints' / 'step-000001'}") in by_level
    assert (logging.INFO, "step 2: stopping early: enough for this test") in by_level
    assert any(level == logging.WARNING and "step 1: agent 'fake0'" in m and "non-finite reward" in m
               for level, m in by_level)


def test_resume_is_logged(caplog, tmp_path):
    from corl.runtime import run
    from corl.testing import FakePlugin

    recipe, where = fake_recipe(**{"run.steps": 2, "run.checkpoint_every": 1}), f"run.output_dir='{tmp_path}'"
    run(recipe, [where], plugins=[FakePlugin()])
    with caplog.at_level(logging.INFO, logger="corl"):
        run(recipe, [where, "run.steps=3"], plugins=[FakePlugin()], resume=True, force=True)
    assert f"resuming from {tmp_path / 'checkpoints' / 'step-000002'} (step 2)" in [r.getMessage() for r in caplog.records]


def test_an_embedding_program_silences_corl(capsys, caplog, corl_run):
    logging.getLogger("corl").setLevel(logging.ERROR)
    try:
        with caplog.at_level(logging.ERROR, logger="corl"):
            corl_run(fake_recipe(**{"run.checkpoint_every": 1, "run.observers": ["console"]}))
    finally:
        logging.getLogger("corl").setLevel(logging.NOTSET)
    assert caplog.records == []
    assert "checkpoint" not in capsys.readouterr().err


def test_warm_start_progress_is_logged(caplog, monkeypatch, tmp_path):
    """A first run's warm-start used to print nothing off a terminal for minutes."""
    from corl.builtin.hf.models import zoo
    from corl.builtin.hf.models.config import ZooConfig

    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(logs, "interactive", lambda: False)
    examples = [(f"{a}+{b}=", str(a + b)) for a in range(5) for b in range(5)]
    with caplog.at_level(logging.INFO, logger="corl"):
        folder = zoo.resolve("gpt2-tiny", examples, ZooConfig(steps=10, batch_size=4))
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert lines[0][0] == "corl" and lines[0][1].startswith("zoo:gpt2-tiny: warm-starting 10 supervised steps")
    progress = [m for name, m in lines if name == "corl.zoo"]
    assert len(progress) == 10 and progress[-1].startswith("warm-start gpt2: step 10/10 (100%), ")
    assert lines[-1][1].endswith(f"-> {folder}")


FAKES = '''
import corl
from corl.testing.fakes import FakePlugin


@corl.hookimpl
def corl_register_components(registry):
    FakePlugin().corl_register_components(registry)
'''

#: two fake agents, "a" and "b", for 20 steps with the console's progress lines
RECIPE = fake_recipe(2, **{"run.steps": 20, "run.checkpoint_every": 10, "run.observers": ["console", "jsonl"],
                           "agents[0].name": "a", "agents[1].name": "b"})


@pytest.fixture
def fakes_installed(tmp_path):
    site = install_plugin(tmp_path / "site", "corl-fakes", FAKES)
    yield site
    uninstall_plugin(site)


def test_a_cli_run_off_a_terminal_writes_progress_lines(tmp_path, fakes_installed):
    write_recipe(tmp_path / "r.toml", RECIPE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes_installed), str(ROOT)])}
    res = subprocess.run([sys.executable, "-m", "corl.cli", "run", str(tmp_path / "r.toml"), "--set",
                          f"run.output_dir='{tmp_path / 'out'}'"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    err = res.stderr.splitlines()
    progress = [line for line in err if line.startswith("co-rl tiny: step ")]
    assert len(progress) == 20  # every 5% of 20 steps
    assert progress[0].startswith("co-rl tiny: step 1/20 (5%), ") and " s/step, ETA " in progress[0]
    assert "a: r=" in progress[-1] and "b: r=" in progress[-1]
    assert f"step 10: checkpoint {tmp_path / 'out' / 'checkpoints' / 'step-000010'}" in err
    assert err[0] == "evaluating 2 agent(s) on 32 held-out prompts (greedy, and k=4 samples each)"  # not silent
    assert err[1].startswith("eval step 0: a pass@1=")
    assert "held-out accuracy before -> after 20 steps" in res.stdout  # the table is the result: stdout


def test_cli_log_level_is_set_by_environment(tmp_path, fakes_installed):
    write_recipe(tmp_path / "r.toml", RECIPE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes_installed), str(ROOT)]), "CORL_LOG_LEVEL": "warning"}
    res = subprocess.run([sys.executable, "-m", "corl.cli", "run", str(tmp_path / "r.toml"), "--set",
                          f"run.output_dir='{tmp_path / 'out'}'"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_the_first_eta_leaves_the_evaluation_before_step_1_out(caplog, monkeypatch):
    from corl.builtin.observers import ConsoleObserver

    monkeypatch.setattr(logs, "interactive", lambda: False)
    clock, console = Clock(), ConsoleObserver()
    with caplog.at_level(logging.INFO, logger="corl"):
        console.progress = logs.Progress("co-rl x", 10, clock=clock, percent=10, log=console.log)
        clock.now += 60  # the evaluation before step 1 (a real model: a minute)
        console.corl_on_eval_end(run=None, step=0, results={"a": {"pass@1": 0.5}})
        clock.now += 2
        console.corl_on_step_end(run=None, step=1, metrics=StepMetrics(1, {"a": {"reward_mean": 0.25}}, 2.0))
        clock.now += 30  # a later evaluation is not taken out: the ETA includes the ones to come
        console.corl_on_eval_end(run=None, step=1, results={"a": {"pass@1": 0.5}})
        console.corl_on_step_end(run=None, step=2, metrics=StepMetrics(2, {"a": {"reward_mean": 0.25}}, 30.0))
    lines = [r.getMessage() for r in caplog.records]
    assert "co-rl x: step 1/10 (10%), 2s elapsed, 2.00 s/step, ETA 18s  a: r=0.25" in lines
    assert "co-rl x: step 2/10 (20%), 32s elapsed, 16.00 s/step, ETA 2m08s  a: r=0.25" in lines


@pytest.mark.parametrize("debug", ["", "1"])
def test_transformers_and_peft_warnings_are_off_in_runs_unless_debugging(monkeypatch, debug):
    import warnings

    from transformers.utils import logging as hf_logging

    from corl.builtin.hf.backend.common import quiet_libraries

    monkeypatch.setenv("CORL_DEBUG", debug)
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity(hf_logging.WARNING)  # as a fresh process has it (an earlier test may have quieted it)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_libraries()
        for module in ("transformers.modeling_utils", "peft.utils.save_and_load", "corl.mine"):
            warnings.warn_explicit("deprecated", FutureWarning, "x.py", 1, module=module)
    try:
        assert [w.filename for w in caught] == (["x.py"] if not debug else ["x.py"] * 3)
        assert (hf_logging.get_verbosity() == hf_logging.ERROR) == (not debug)
    finally:
        hf_logging.set_verbosity(before)


def test_a_resumed_jsonl_log_keeps_what_the_checkpoint_covers_and_drops_a_torn_tail(tmp_path):
    from corl.logs import reopen_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\nnot json\n{"step": 3}\n{"step": 2, "ki')
    said = []
    with reopen_jsonl(path, 2, log=said.append) as f:
        f.write('{"step": 3}\n')
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n{"step": 3}\n'
    assert said == [f"{path}: dropped an unreadable line 3 (8 bytes) left by the interrupted run",
                    f"{path}: dropped a torn last line (15 bytes) left by the interrupted run"]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temp file left
    with reopen_jsonl(path, 0):  # a new run starts it empty
        pass
    assert path.read_text() == ""

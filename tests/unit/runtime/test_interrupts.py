"""SIGINT / SIGTERM anywhere: a run stops within seconds, its completed steps saved, with one line
and exit status 128 + signal; a repeated signal never loses them; ``--resume`` ends exactly where
the run left alone ends. Each point is reached in a real ``corl run`` process, paused there by a
test plugin (the kit's fake agents) that says so on stderr, and signalled as a user would."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from corl.testing import fake_recipe, install_plugin, outcome, write_recipe
from tests.kit import ROOT

#: The kit's fake components, each able to pause at one point named by CORL_TEST_PAUSE: the
#: evaluations and training samples poll the run's stop (as the hf sampler's decode loop does);
#: the saves cannot (a write in progress is never abandoned).
PAUSING_PLUGIN = '''
import os, sys, time

import corl
from corl.testing.fakes import FakeAgent, FakeAgentConfig, FakeOptimizer, FakeOptimizerConfig, FakeSampler, _NoOptions

WHERE = os.environ.get("CORL_TEST_PAUSE", "")
SECONDS = float(os.environ.get("CORL_TEST_PAUSE_SECONDS", "60"))
seen = {}


def pause(point, poll=None):
    seen[point] = seen.get(point, 0) + 1
    if WHERE != f"{point}:{seen[point]}":
        return
    print(f"PAUSED {WHERE}", file=sys.stderr, flush=True)
    end = time.time() + SECONDS
    while time.time() < end:
        if poll is not None:
            poll()
        time.sleep(0.02)


class PausingAgent(FakeAgent):
    def save_state(self, path):
        if self.name == "fake0":
            pause("checkpoint")
        super().save_state(path)

    def save(self, path):
        if self.name == "fake0":
            pause("final")
        super().save(path)


class PausingSampler(FakeSampler):
    def __init__(self, config=None, ctx=None):
        self.stop = getattr(ctx, "stop", None)
        self.name = ctx.agent_name

    def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
        if self.name == "fake0":
            pause("eval" if greedy else "step" if n == 8 else "sampled", self.stop and self.stop.check)
        return super().sample(agent, prompts, n, greedy=greedy, temperature=temperature)


@corl.hookimpl
def corl_register_components(registry):
    registry.add("agent", "fake", PausingAgent, FakeAgentConfig)
    registry.add("sampler", "fake", PausingSampler, _NoOptions)
    registry.add("optimizer", "fake", FakeOptimizer, FakeOptimizerConfig)
'''

RECIPE = fake_recipe(2, **{"run.name": "interrupts", "run.steps": 4, "run.observers": ["jsonl", "checkpoint"],
                           "run.checkpoint_every": 0})


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    install_plugin(root, "corl-pause-example", PAUSING_PLUGIN)
    sys.path.remove(str(root))  # for the subprocesses only
    write_recipe(root / "recipe.toml", RECIPE)
    return root


class Running:
    """A ``corl run`` process whose stderr is read as it comes."""

    def __init__(self, site, out, *args, pause="", sets=(), env=None):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "CORL_PLUGINS": "corl-pause-example",
               "CORL_TEST_PAUSE": pause, "CORL_FAULT": "", **(env or {})}
        sets = [x for item in [*sets, f"run.output_dir={out}"] for x in ("--set", item)]
        self.proc = subprocess.Popen([sys.executable, "-m", "corl.cli", "run", str(site / "recipe.toml"), *sets, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.err, self.lines = [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, marker, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"exited before {marker!r}:\n{''.join(self.err)[-3000:]}")
            if marker in line:
                return
        raise AssertionError(f"no {marker!r} within {timeout}s:\n{''.join(self.err)[-3000:]}")

    def signal(self, *signums, between=0.3):
        self.sent = time.time()
        for i, signum in enumerate(signums):
            if i:
                time.sleep(between)
            self.proc.send_signal(signum)

    def finish(self, timeout=120):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, time.time() - self.sent, "".join(self.err)


def corl(site, out, *args, sets=()):
    run = Running(site, out, *args, sets=sets)
    run.proc.wait(300)
    return run.proc.returncode, "".join(run.err)


@pytest.fixture(scope="module")
def reference(site, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "run"
    code, err = corl(site, out, sets=["eval.every=2"])
    assert code == 0, err[-3000:]
    return outcome(out)


def same_as(reference, out):
    summary, records, weights = outcome(out)
    assert summary == reference[0]
    assert records == reference[1]
    assert weights.keys() == reference[2].keys()
    assert all((weights[n]["logits"] == reference[2][n]["logits"]).all() for n in weights)


def last_line(err):
    return [line for line in err.splitlines() if line.startswith("corl: error:")][-1]


def checkpoints(out):
    root = out / "checkpoints"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


# -- each point: where the signal lands, what is saved, and that --resume ends like the run left alone


@pytest.mark.parametrize("point, sig, where, saved", [
    ("eval:1", signal.SIGINT, "during the evaluation before step 1", None),
    ("eval:2", signal.SIGTERM, "during the evaluation after step 2", "step-000002"),
    ("eval:3", signal.SIGINT, "during the final evaluation (after step 4)", "step-000004"),
])
def test_a_signal_during_an_evaluation_stops_it_within_seconds(site, reference, tmp_path, point, sig, where, saved):
    out = tmp_path / "run"
    run = Running(site, out, pause=point, sets=["eval.every=2"])
    run.wait_for(f"PAUSED {point}")
    run.signal(sig)
    code, seconds, err = run.finish()
    assert code == 128 + sig and seconds < 10, err[-3000:]  # the evaluation pauses 60 s unless abandoned
    assert "Traceback" not in err
    name = signal.Signals(sig).name
    if saved is None:
        assert last_line(err) == (f"corl: error: stopped by {name} {where}; nothing was trained yet, so there is no "
                                  "checkpoint; run the same command again to start over")
        assert checkpoints(out) == []
        again, err = corl(site, out, sets=["eval.every=2"])  # nothing trained: the folder is simply reused
    else:
        assert last_line(err) == (f"corl: error: stopped by {name} {where}; checkpoint {out}/checkpoints/{saved}; "
                                  "continue with --resume")
        assert checkpoints(out) == [saved]
        again, err = corl(site, out, "--resume", sets=["eval.every=2"])
        assert f"resuming from {out}/checkpoints/{saved}" in err
    assert again == 0, err[-3000:]
    same_as(reference, out)  # the abandoned evaluation was done again, nothing else


def test_a_second_signal_during_a_training_step_still_saves_that_step(site, reference, tmp_path):
    out = tmp_path / "run"
    run = Running(site, out, pause="step:3", sets=["eval.every=2"], env={"CORL_TEST_PAUSE_SECONDS": "2"})
    run.wait_for("PAUSED step:3")
    run.signal(signal.SIGINT, signal.SIGINT)  # the natural second press
    code, seconds, err = run.finish()
    assert code == 130, err[-3000:]
    assert "corl: SIGINT again: still stopping; completed steps are saved first" in err
    assert last_line(err) == f"corl: error: stopped by SIGINT after step 3; checkpoint {out}/checkpoints/step-000003; " \
                             "continue with --resume"
    assert checkpoints(out) == ["step-000003"]
    resumed, err = corl(site, out, "--resume", sets=["eval.every=2"])
    assert resumed == 0 and f"resuming from {out}/checkpoints/step-000003 (step 3)" in err, err[-3000:]
    same_as(reference, out)


def test_signals_during_a_checkpoint_write_let_it_finish(site, reference, tmp_path):
    out = tmp_path / "run"
    run = Running(site, out, pause="checkpoint:1", sets=["eval.every=2", "run.checkpoint_every=2"],
                  env={"CORL_TEST_PAUSE_SECONDS": "2"})
    run.wait_for("PAUSED checkpoint:1")
    run.signal(signal.SIGINT, signal.SIGINT, signal.SIGTERM)
    code, seconds, err = run.finish()
    assert code == 130 and seconds < 10, err[-3000:]
    assert last_line(err) == f"corl: error: stopped by SIGINT after step 2; checkpoint {out}/checkpoints/step-000002; " \
                             "continue with --resume"
    assert checkpoints(out) == ["step-000002"]  # complete: never a hidden half-written folder
    resumed, err = corl(site, out, "--resume", sets=["eval.every=2", "run.checkpoint_every=2"])
    assert resumed == 0 and "(step 2)" in err, err[-3000:]
    same_as(reference, out)


def test_signals_during_the_final_save_let_it_finish(site, reference, tmp_path):
    out = tmp_path / "run"
    run = Running(site, out, pause="final:1", sets=["eval.every=2"], env={"CORL_TEST_PAUSE_SECONDS": "2"})
    run.wait_for("PAUSED final:1")
    run.signal(signal.SIGTERM, signal.SIGTERM)
    code, seconds, err = run.finish()
    assert code == 143 and seconds < 10, err[-3000:]
    assert last_line(err) == ("corl: error: stopped by SIGTERM at the end of the run (step 4): the run had finished "
                              f"and its outputs were saved first in {out}")
    same_as(reference, out)  # summary, metrics and the final export, all complete


def test_a_signal_during_a_warm_start_stops_it_and_caches_nothing(tmp_path):
    """A real zoo warm-start (hf backend) of far more steps than the test waits for."""
    cache = tmp_path / "cache"
    out = tmp_path / "run"
    env = {**os.environ, "CORL_CACHE_DIR": str(cache), "CORL_DISABLE_PLUGIN_AUTOLOAD": "1", "CORL_FAULT": ""}
    sets = [x for item in ["zoo.steps=100000", "run.observers=['jsonl']", f"run.output_dir={out}"]
            for x in ("--set", item)]
    # data_file.toml: zoo models warm-started on its seed file (the addition recipes ship trained ones)
    proc = subprocess.Popen([sys.executable, "-m", "corl.cli", "run", str(ROOT / "recipes" / "data_file.toml"),
                             *sets], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    run = Running.__new__(Running)
    run.proc, run.err, run.lines = proc, [], queue.Queue()
    threading.Thread(target=run._read, daemon=True).start()
    run.wait_for("warm-starting 100000 supervised steps")
    time.sleep(1)  # well inside the warm-start loop
    run.signal(signal.SIGINT)
    code, seconds, err = run.finish()
    assert code == 130 and seconds < 10, err[-3000:]
    assert "Traceback" not in err
    assert last_line(err).startswith("corl: error: stopped by SIGINT while building agent ")
    assert last_line(err).endswith("; nothing was trained yet, so there is no checkpoint; run the same command again "
                                   "to start over")
    zoo = cache / "zoo"
    assert not zoo.exists() or not any(zoo.iterdir())  # no model cached, not even a half-trained one

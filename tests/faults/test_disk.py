"""What a kill or a full disk leaves: torn logs, a partial checkpoint; SIGKILLs at random moments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest

from corl.runtime import checkpoint
from tests.faults.conftest import AGENTS, args, corl, final_weights, records, spawn, trained_steps


def test_torn_log_tails_are_dropped_on_resume(resumed):
    out, err = resumed
    assert f"{out / 'metrics.jsonl'}: dropped a torn last line (" in err
    assert f"{out / 'samples.jsonl'}: dropped a torn last line (" in err
    assert trained_steps(out) == [1, 2, 3, 4]
    assert [r["step"] for r in records(out) if r["kind"] == "eval"] == [0, 4]
    samples = records(out, "samples.jsonl")
    assert sorted({r["step"] for r in samples if r["kind"] == "train"}) == [1, 2, 3, 4]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_is_named_and_leaves_the_last_checkpoint_whole(tmp_path, cache_dir):
    disk = tmp_path / "disk"
    disk.mkdir()
    # room for one checkpoint of the three tiny agents (8.6 MB) and the logs, not for a second one
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=14m", "tmpfs", str(disk)]).returncode:
        pytest.skip("root, but mounting a tmpfs is not allowed here (a container without CAP_SYS_ADMIN)")
    try:
        out = disk / "run"
        rc, err = corl(*args(out, sets=["run.steps=2", "run.observers=['jsonl']"]))
        names = sorted(p.name for p in (out / "checkpoints").iterdir())
        if names == ["step-000001"]:
            checkpoint.check(out / "checkpoints" / "step-000001")
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # lazy: never left mounted
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    target = out / "checkpoints" / "step-000002"
    assert line.startswith(f"corl: error: no space left on device writing {target} ("), line
    assert "the partial folder was removed); checkpoint step-000002 needs about 8." in line, line
    assert line.endswith(f"MB (the size of step-000001, which is intact); free space in {out / 'checkpoints'} and "
                         "continue with --resume"), line
    assert names == ["step-000001"]  # no partial .step-*.tmp-* left behind


def test_a_handful_of_sigkills_at_random_moments_lose_nothing(resumed, tmp_path):
    """Three SIGKILLs at random moments of one run (the first after it made its folder, the others
    inside its resumes), then a resume to the end: the steps and weights of an uninterrupted run."""
    seed = int(os.environ.get("CORL_FAULT_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    out = tmp_path / "run"
    for kill in range(3):
        proc = spawn(out, *(["--resume"] if kill else []))
        deadline = time.time() + 300
        while not kill and time.time() < deadline and not (out / "recipe.json").exists():
            time.sleep(0.05)  # the run has its folder: models load next
        time.sleep(rng.uniform(0.0, 4.0) if not kill else rng.uniform(0.5, 5.0))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    rc, err = corl(*args(out, "--resume"))
    assert rc == 0, f"CORL_FAULT_SEED={seed}: {err[-3000:]}"
    assert trained_steps(out) == [1, 2, 3, 4], f"CORL_FAULT_SEED={seed}"
    reference, weights = final_weights(resumed[0]), final_weights(out)
    for name in AGENTS:
        assert all((reference[name][k] == weights[name][k]).all() for k in reference[name]), f"CORL_FAULT_SEED={seed}"

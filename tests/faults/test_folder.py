"""One run per folder, crash-safe retention, a read-only folder, and resuming a finished run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from corl.builtin.policy.config import PolicyConfig
from corl.builtin.policy.optimizer import lr_multiplier
from corl.runtime import checkpoint, lock
from tests.faults.conftest import args, copy, corl, records, trained_steps


def test_two_runs_into_one_folder_one_refused_naming_the_holder(race, killed):
    (rc_a, pid_a, err_a), (rc_b, pid_b, err_b) = race["results"]
    winner, loser = ((pid_a, err_a), (pid_b, err_b)) if rc_b == 2 else ((pid_b, err_b), (pid_a, err_a))
    assert sorted(r[0] for r in race["results"])[-1] == 2  # exactly one refused (the other was SIGKILLed)
    holder = race["holder"]
    assert holder["pid"] == winner[0] and holder["host"] == socket.gethostname()
    [line] = loser[1].strip().splitlines()
    assert line.startswith(f"corl: error: {race['out']} is in use by another corl process (pid {winner[0]} on "
                           f"{socket.gethostname()}: ")
    assert line.endswith("wait for it to end or stop it, or choose another run.output_dir")


def test_resume_while_the_run_is_alive_is_refused_and_touches_nothing(race, killed):
    live = race["live"]
    assert live["alive"].count(True) >= 1  # asked while the winner was running
    assert live["rc"] == 2 and live["tmp_kept"], live
    [line] = live["err"].strip().splitlines()
    assert f"is in use by another corl process (pid {race['holder']['pid']} on" in line


def test_a_lock_left_by_a_killed_run_never_blocks(killed, tmp_path):
    # the winner was SIGKILLed holding the lock; its record is still in the file
    assert json.loads((killed / ".corl.lock").read_text())["pid"]
    with lock.holding(killed, "test"):  # the kernel released it with the process
        code = ("from pathlib import Path\nfrom corl.runtime import lock\n"
                f"with lock.holding(Path({str(killed)!r}), 'x'):\n pass")
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert child.returncode != 0 and f"pid {os.getpid()} on {socket.gethostname()}: test" in child.stderr


def test_a_kill_inside_retention_leaves_no_half_deleted_checkpoint(killed, resumed):
    root = killed / "checkpoints"
    names = sorted(p.name for p in root.iterdir())
    # killed between the rename and the delete of step-000001: every step-* is whole and verifies
    assert names[1:] == ["step-000002", "step-000003"] and names[0].startswith(".trash-step-000001-"), names
    for step in names[1:]:
        checkpoint.check(root / step)
    assert sorted(p.name for p in (resumed[0] / "checkpoints").iterdir()) == ["final", "step-000003", "step-000004"]


def test_a_read_only_folder_is_one_line(killed, tmp_path):
    out = copy(killed, tmp_path / "run")
    if os.geteuid() == 0:  # root writes through permissions: a read-only mount is what stops it
        if subprocess.run(["mount", "--bind", str(out), str(out)]).returncode:
            pytest.skip("root, but mounting is not allowed here (a container without CAP_SYS_ADMIN)")
    else:
        os.chmod(out, 0o555)
    try:
        if os.geteuid() == 0:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(out)], check=True)
        rc, err = corl(*args(out, "--resume"))
        fresh, err2 = corl(*args(out / "sub"))
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "--lazy", str(out)], check=True)
        else:
            os.chmod(out, 0o755)
    why = "read-only file system" if os.geteuid() == 0 else "permission denied"
    assert rc == 2 and err.strip() == (f"corl: error: {out}: cannot write the run's output folder ({why}); choose "
                                       "another run.output_dir, or make it writable")
    assert fresh == 2 and err2.strip().startswith(f"corl: error: {out / 'sub'}: cannot write the run's output folder")


def test_resuming_a_finished_run_appends_nothing_and_more_steps_extend_the_schedule(resumed, tmp_path):
    out = copy(resumed[0], tmp_path / "run")
    before = (out / "metrics.jsonl").read_bytes()
    rc, err = corl(*args(out, "--resume"))
    assert rc == 0 and err.strip() == (f"{out}: the run finished at step 4 (summary.json); nothing to do; raise "
                                       "run.steps to train it further")
    assert (out / "metrics.jsonl").read_bytes() == before
    rc, err = corl(*args(out, "--resume", sets=["run.steps=6"]))
    assert rc == 0, err[-3000:]
    assert trained_steps(out) == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records(out) if r["kind"] == "eval"] == [0, 4, 6]  # each evaluation once
    lrs = {r["step"]: r["agents"]["llama"]["lr"] for r in records(out) if r["kind"] == "train"}
    config = PolicyConfig(lr_schedule="cosine", warmup_steps=1, min_lr_ratio=0.1)
    base = lrs[1] / lr_multiplier(config, 0, 4)
    # the span stays the 4 steps the run started with: steps 5 and 6 train at its last lr, never rising again
    assert lrs[5] == lrs[6] == pytest.approx(base * 0.1)
    assert lrs[5] <= lrs[4] and lr_multiplier(config, 4, 6) > lr_multiplier(config, 3, 4)  # re-spanned: rising

"""A checkpoint that is not as written is named and never trained on: flipped bytes, a corrupted
header, a deleted file, truncated state files. `--resume` falls back to the newest one that
verifies, saying so in one line; `--resume-from` asks for exactly one and refuses it, naming it."""

from __future__ import annotations

import os
import shutil

import pytest

from corl.runtime import checkpoint
from tests.faults.conftest import AGENTS, args, copy, corl, final_weights, trained_steps


def flip(path, at=None, n=64):
    """Flip ``n`` bytes of ``path`` in the middle (or at ``at``)."""
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if at is None else at
    data[at:at + n] = bytes(b ^ 0xFF for b in data[at:at + n])
    path.write_bytes(bytes(data))


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


FAULTS = {  # what an operator did to step-000003, and the file the refusal must name
    "64 bytes flipped in the weights": (lambda c: flip(c / "agents" / "qwen2" / "model.safetensors"),
                                        "agents/qwen2/model.safetensors does not match its digest"),
    "safetensors header corrupted": (lambda c: flip(c / "agents" / "llama" / "model.safetensors", at=8, n=16),
                                     "agents/llama/model.safetensors does not match its digest"),
    "optimizer file deleted": (lambda c: (c / "optimizers" / "neox" / "optimizer.pt").unlink(),
                               "optimizers/neox/optimizer.pt is missing"),
    "state.json truncated": (lambda c: truncate(c / "state.json"), "state.json has"),
    "rng.json truncated": (lambda c: truncate(c / "rng.json"), "rng.json has"),
    "manifest deleted": (lambda c: (c / "manifest.json").unlink(), "no manifest.json"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_broken_checkpoint_is_named_and_the_one_before_it_used(fault, killed, tmp_path):
    out = copy(killed, tmp_path / "run")
    root = out / "checkpoints"
    damage, named = FAULTS[fault]
    damage(root / "step-000003")
    # --resume-from asks for exactly this checkpoint: refused before anything loads, naming file and checkpoint
    rc, err = corl(*args(out, "--resume-from", "step-000003"))
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    [line] = err.strip().splitlines()
    assert line.startswith(f"corl: error: {root / 'step-000003'}") and named in line, line
    # --resume: the newest that verifies, and one line saying which one was skipped and why
    said = []
    assert checkpoint.resume_point(root, said.append) == root / "step-000002"
    [line] = said
    assert line.startswith("checkpoint step-000003 does not verify (") and named in line
    assert line.endswith("resuming from step-000002, the newest checkpoint that does (the bad one is kept as "
                         "step-000003.unverified)")
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003.unverified"]


def test_resume_falls_back_and_never_trains_on_flipped_bytes(killed, resumed, tmp_path):
    out = copy(killed, tmp_path / "run")
    flip(out / "checkpoints" / "step-000003" / "agents" / "neox" / "model.safetensors")
    rc, err = corl(*args(out, "--resume"))
    assert rc == 0, err[-3000:]
    assert ("checkpoint step-000003 does not verify" in err and "resuming from step-000002" in err
            and f"resuming from {out / 'checkpoints' / 'step-000002'} (step 2)" in err), err[-3000:]
    assert trained_steps(out) == [1, 2, 3, 4]  # step 3 of the bad checkpoint dropped, trained again
    # what it trained equals what the run resumed from the intact step-000003 trained: nothing corrupted got in
    reference = final_weights(resumed[0])
    weights = final_weights(out)
    for name in AGENTS:
        assert all((reference[name][k] == weights[name][k]).all() for k in reference[name]), name


def test_resume_from_picks_an_older_checkpoint_and_refuses_a_missing_one(killed, tmp_path):
    out = copy(killed, tmp_path / "run")
    rc, err = corl(*args(out, "--resume-from", "step-7"))
    assert rc == 2
    assert err.strip() == (f"corl: error: --resume-from step-7: no checkpoint {out / 'checkpoints' / 'step-000007'}; "
                           "complete checkpoints: step-000002, step-000003")


def test_no_checkpoint_verifies_is_one_line(killed, tmp_path):
    out = copy(killed, tmp_path / "run")
    for step in ("step-000002", "step-000003"):
        truncate(out / "checkpoints" / step / "state.json")
    rc, err = corl(*args(out, "--resume"))
    assert rc == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line.startswith(f"corl: error: {out / 'checkpoints'}: no checkpoint verifies: ") and "state.json" in line


@pytest.mark.parametrize("command", ["eval", "export"])
def test_corl_eval_and_export_verify_the_final_checkpoint(command, resumed, tmp_path):
    """A flipped byte in the final weights is named, never scored or shipped as a model."""
    out = tmp_path / "run"
    shutil.copytree(resumed[0], out)
    flip(out / "checkpoints" / "final" / "llama" / "model.safetensors")
    rc, err = corl(command, str(out), *([str(tmp_path / "exported")] if command == "export" else []))
    assert rc == 2 and "Traceback" not in err
    assert err.strip() == (f"corl: error: {out / 'checkpoints' / 'final'}: llama/model.safetensors does not match its "
                           "digest: the file changed after the checkpoint was written")
    assert os.path.exists(out / "summary.json") and not os.path.exists(tmp_path / "exported")

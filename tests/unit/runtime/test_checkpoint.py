"""Whole-run checkpoints (corl.runtime.checkpoint): atomic, newest found, old ones pruned, RNG restored."""

import json
import random

import numpy as np
import torch

from corl.runtime import checkpoint
from corl.runtime.distributed import Local


class Layout(Local):
    def __init__(self):  # one process, no recipe needed
        self.rank, self.is_writer, self.run_id = 0, True, "test"

    def barrier(self, what):
        pass


def write(root, step, keep=2, fault=lambda where: None):
    def parts(folder):
        (folder / "agents").mkdir()
        (folder / "agents" / "weights.txt").write_text(f"step {step}")

    return checkpoint.write(root, step, {"step": step}, checkpoint.rng_state(), parts, keep, Layout(), fault)


def test_write_is_complete_and_keeps_the_newest(tmp_path):
    for step in (1, 2, 3):
        write(tmp_path, step)
    assert [p.name for p in checkpoint.list_complete(tmp_path)] == ["step-000002", "step-000003"]
    newest = checkpoint.latest(tmp_path)
    assert newest.name == "step-000003" and checkpoint.read_state(newest) == {"step": 3}
    assert (newest / "agents" / "weights.txt").read_text() == "step 3"


def test_a_write_that_fails_midway_leaves_no_step_folder(tmp_path):
    write(tmp_path, 1)

    class Failed(Exception):
        pass

    def fail(where):
        raise Failed

    try:
        write(tmp_path, 2, fault=fail)
    except Failed:
        pass
    assert [p.name for p in checkpoint.list_complete(tmp_path)] == ["step-000001"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]  # an error cleans its temp folder


def test_what_a_killed_write_or_delete_leaves_is_cleaned(tmp_path):
    write(tmp_path, 1)
    (tmp_path / ".step-000002.tmp-999" / "agents").mkdir(parents=True)  # SIGKILL mid-write
    (tmp_path / ".trash-step-000000-999" / "agents").mkdir(parents=True)  # SIGKILL mid-delete
    assert checkpoint.latest(tmp_path, clean=True).name == "step-000001"
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]


def test_rng_states_round_trip(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    path = write(tmp_path, 1)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    assert checkpoint.restore_rng(path) == {}  # no agent streams were saved beside them
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    assert json.loads((path / "rng.json").read_text())["python"]  # plain JSON, nothing pickled

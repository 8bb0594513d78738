import os
import tomllib
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One zoo cache for the whole session, so tiny warm-starts are built once."""
    path = tmp_path_factory.mktemp("corl-cache")
    os.environ["CORL_CACHE_DIR"] = str(path)
    return path


#: Overrides that shrink any shipped recipe to seconds on 2 cores.
TINY = [
    "run.steps=2", "run.prompts_per_step=8", "zoo.steps=20", "task.seed_size=256", "task.train_size=64",
    "task.eval_size=32", "eval.size=16", "eval.k=4", "voting.n_votes=4", "voting.n_train=4",
]

#: TINY's task.* keys are the arithmetic (and shapes) task's; other task types shrink their data their own way.
TINY_TASK = {"jsonl": ["task.limit=256"]}


def tiny_for(recipe) -> list[str]:
    """TINY, adapted to the task type of a recipe file."""
    task = tomllib.loads(Path(recipe).read_text()).get("task", {}).get("type", "arithmetic")
    if task in ("arithmetic", "shapes"):
        return TINY
    return [x for x in TINY if not x.startswith("task.")] + TINY_TASK[task]

import os
import tomllib
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Converted real models (corl.models) outlive a test session when a cache is given (tox passes
# CORL_CACHE_DIR on): converting both packaged models takes a minute or more.
if os.environ.get("CORL_CACHE_DIR"):
    os.environ.setdefault("CORL_MODELS_DIR", str(Path(os.environ["CORL_CACHE_DIR"]) / "models"))


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
TINY_TASK = {"jsonl": ["task.limit=256"],
             "expressions": ["task.seed_size=128", "task.train_size=16", "task.eval_size=16"]}


#: Real pretrained models (recipes with pypi: agents): two steps of 2 prompts x 4 samples, 12 tokens.
TINY_REAL = ["run.steps=2", "run.prompts_per_step=2", "voting.n_votes=4", "voting.n_train=4", "task.train_size=4",
             "task.eval_size=2", "eval.size=2", "eval.k=4"]


def real_models_missing(recipe) -> str | None:
    """Why a recipe's packaged (pypi:) models cannot load here, or None (the corl[real] extra)."""
    from corl.models import check_source

    for agent in tomllib.loads(Path(recipe).read_text()).get("agents", []):
        try:
            check_source(agent.get("model", ""))
        except ValueError as exc:
            return str(exc)
    return None


def tiny_for(recipe) -> list[str]:
    """TINY, adapted to the task type of a recipe file."""
    data = tomllib.loads(Path(recipe).read_text())
    if any(a.get("model", "").startswith("pypi:") for a in data.get("agents", [])):
        return TINY_REAL + [f"agents[{i}].sampler.max_new_tokens=12" for i in range(len(data["agents"]))]
    task = data.get("task", {}).get("type", "arithmetic")
    # an agent's own zoo_steps outranks zoo.steps: shrink it too
    own = [f"agents[{i}].zoo_steps=20" for i, a in enumerate(data.get("agents", [])) if "zoo_steps" in a]
    if task in ("arithmetic", "shapes"):
        return TINY + own
    return [x for x in TINY if not x.startswith("task.")] + TINY_TASK[task] + own

"""Helpers corl's own tests share (the public kit is :mod:`corl.testing`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from corl.testing import context

ROOT = Path(__file__).resolve().parents[1]

#: Overrides that shrink any shipped recipe to seconds on 2 cores.
TINY = [
    "run.steps=2", "run.prompts_per_step=8", "zoo.steps=20", "task.seed_size=256", "task.train_size=64",
    "task.eval_size=32", "eval.size=16", "eval.k=4", "voting.n_votes=4", "voting.n_train=4",
]
#: TINY's task.* keys are the arithmetic (addition, shapes) task's; other task types shrink their data their own way.
TINY_TASK = {"jsonl": ["task.limit=256"],
             "expressions": ["task.seed_size=128", "task.train_size=16", "task.eval_size=16"]}
#: Real pretrained models (recipes with pypi: agents): two steps of 2 prompts x 4 samples.
TINY_REAL = ["run.steps=2", "run.prompts_per_step=2", "voting.n_votes=4", "voting.n_train=4", "task.train_size=4",
             "task.eval_size=2", "eval.size=2", "eval.k=4"]


def tiny_for(recipe: str | Path) -> list[str]:
    """:data:`TINY`, adapted to a recipe file's task type and agents."""
    data = tomllib.loads(Path(recipe).read_text())
    agents = data.get("agents", [])
    if any(str(a.get("model", "")).startswith("pypi:") for a in agents):
        return TINY_REAL + [f"agents[{i}].sampler.max_new_tokens=12" for i in range(len(agents))]
    task = data.get("task", {}).get("type", "arithmetic")
    own = [f"agents[{i}].zoo_steps=20" for i, a in enumerate(agents) if "zoo_steps" in a]  # outranks zoo.steps
    own += [f"agents[{i}].zoo_stop=10" for i, a in enumerate(agents) if "zoo_stop" in a]  # within the 20 steps
    own += ["zoo.stop=10"] if "stop" in data.get("zoo", {}) else []
    # zoo.steps shrinks the warm-start a [zoo] table asks for; shipped zoo models (zoo:*-add3) have none
    tiny = TINY if "zoo" in data else [x for x in TINY if not x.startswith("zoo.")]
    if task in ("arithmetic", "addition", "shapes"):
        return tiny + own
    return [x for x in tiny if not x.startswith("task.")] + TINY_TASK.get(task, []) + own


def base_recipe() -> dict[str, Any]:
    """Two zoo agents of two families in a ring: the smallest recipe of real models."""
    return {
        "run": {"steps": 3},
        "agents": [{"name": "a", "model": "zoo:llama-tiny"}, {"name": "b", "model": "zoo:qwen2-tiny"}],
        "voting": {"n_votes": 8, "n_train": 4},
        "topology": {"type": "ring"},
    }


def real_models_missing(recipe) -> str | None:
    """Why a recipe's packaged (pypi:) models cannot load here, or None (the co-rl[real] extra)."""
    from corl.builtin.hf.models.sources import check_source

    for agent in tomllib.loads(Path(recipe).read_text()).get("agents", []):
        try:
            check_source(agent.get("model", ""), vision=agent.get("type") == "hf_vision")
        except ValueError as exc:
            return str(exc)
    return None


def zoo_context(task, name: str = "a", steps: int = 5, **changes):
    """A factory context whose [zoo] section warm-starts ``steps`` steps."""
    from corl.builtin.hf.models.config import ZooConfig

    return context(agent_name=name, task=task, sections={"zoo": ZooConfig(steps=steps, **changes)})


def hf_agent(name: str, task, steps: int = 5):
    """A text zoo agent ``zoo:NAME`` warm-started ``steps`` steps on ``task``'s seed split."""
    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig

    return HFAgent(HFAgentConfig(model=f"zoo:{name}"), zoo_context(task, name, steps))

"""Helpers corl's own tests share (the public kit is :mod:`corl.testing`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from corl.testing import context

ROOT = Path(__file__).resolve().parents[1]


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

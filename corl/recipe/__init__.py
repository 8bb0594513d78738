"""Recipes: TOML -> a frozen :class:`RunSpec`, validated whole before any model loads.

* :mod:`~corl.recipe.schema`: the core sections and the validated spec;
* :mod:`~corl.recipe.overrides`: reading files, ``--set key.path=value``;
* :mod:`~corl.recipe.structure`: the strict structurer (key paths in every message);
* :mod:`~corl.recipe.components`: one component's table, and what its factory declares;
* :mod:`~corl.recipe.validate`: the sections and their cross-checks;
* :mod:`~corl.recipe.load`: ``load_recipe``, a file or table with its overrides, validated;
* :mod:`~corl.recipe.resume`: what a resumed run may change; the resolved recipe as JSON;
* :mod:`~corl.recipe.locate`: a recipe from what a user typed (a file, a shipped name, a run dir).

Nothing here imports torch.
"""

from corl.recipe.components import declared_traits, model_facts, router_traits
from corl.recipe.load import load_recipe
from corl.recipe.overrides import apply_overrides, read_toml
from corl.recipe.resume import (
    RESUMABLE_CHANGES,
    defaults_of,
    differences,
    recorded_objects,
    resume_from_python,
    to_dict,
)
from corl.recipe.schema import (
    AgentSpec,
    ComponentSpec,
    EvalSection,
    GivenObject,
    RunSection,
    RunSpec,
    ShapingSpec,
    VotingSpec,
)
from corl.recipe.structure import Errors, structure
from corl.recipe.validate import validate

__all__ = [
    "RESUMABLE_CHANGES", "AgentSpec", "ComponentSpec", "Errors", "EvalSection", "GivenObject", "RunSection", "RunSpec",
    "ShapingSpec", "VotingSpec", "apply_overrides", "declared_traits", "defaults_of", "differences", "load_recipe",
    "model_facts", "read_toml", "recorded_objects", "resume_from_python", "router_traits", "structure", "to_dict",
    "validate",
]

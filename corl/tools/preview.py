"""``corl data preview RECIPE``: the first prompts of a split as each agent receives them.

For each agent, the exact string it tokenizes (its prompt format and chat template applied, a
conversational row's own turns included), from the agent's tokenizer alone: no model weights load
and no zoo model is warm-started (an agent type declares how, :class:`corl.traits.AgentTraits`
``preview``). With each prompt, its label and how the task's extractor found it, where the task says
(the data-file task: ``boxed``, ``hashes``, ``fallback``, ...).
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from corl import logs
from corl.errors import CorlError
from corl.protocols import LabelPathTask
from corl.recipe.locate import resolve


def preview(args) -> int:
    from corl.context import Context
    from corl.plugins import registry_of
    from corl.recipe import declared_traits, model_facts
    from corl.runtime import prepare
    from corl.runtime.build import Builder

    if args.rows < 1:
        raise CorlError(f"--rows {args.rows}: must be at least 1")
    data, overrides, source = resolve(args.recipe, args.set)
    if Path(args.recipe).is_dir() and isinstance(data, dict):
        data.pop("observers", None)  # a run dir's trackers need not be installed to look at its data
    pm, spec = prepare(data, overrides, source=source)
    registry = registry_of(pm)  # the one the recipe was validated with
    ctx = Context(spec=spec, seed=spec.run.seed, log=logs.get("data").info)
    task = Builder(registry)("task", spec.task, ctx)
    prompts = list(task.split(args.split))[: args.rows]
    if not prompts:
        raise CorlError(f"task: the {args.split} split has no prompts; preview another with --split")
    paths = task.label_paths if isinstance(task, LabelPathTask) else {}
    rows = [{"id": p.id, "origin": p.origin, "label": None if p.label is None else str(p.label),
             "label_path": paths.get(p.id)} for p in prompts]
    agents = {}
    for a in spec.agents:
        declared = declared_traits(registry, "agent", a.agent)
        rendered = None
        if declared.preview is not None:
            rendered = list(declared.preview(a.agent.config, attrs.evolve(ctx, task=task, agent_name=a.name), prompts))
        agents[a.name] = {"type": a.agent.type, "model": model_facts(registry, a).model or None, "rendered": rendered}
    if args.json:
        print(json.dumps({"split": args.split, "prompts": rows, "agents": agents}, indent=2))
        return 0
    print(f"{spec.source}: the first {len(prompts)} prompts of the {args.split} split, as each agent receives them "
          "(between the ---- lines, exactly)")
    for name, agent in agents.items():
        model = f", {agent['model']}" if agent["model"] else ""
        print(f"\n== agent {name} ({agent['type']}{model}) ==")
        if agent["rendered"] is None:
            print(f"(agent type {agent['type']!r} declares no preview; the task's text of each prompt follows)")
        for i, (prompt, row) in enumerate(zip(prompts, rows)):
            label = "no label" if row["label"] is None else f"label {row['label']}" + (
                f" (found by: {row['label_path']})" if row["label_path"] else "")
            print(f"-- {row['origin'] or row['id']}: {label}")
            print("----")
            print(prompt.text if agent["rendered"] is None else agent["rendered"][i])
            print("----")
    return 0

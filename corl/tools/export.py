"""``corl export RUN_DIR OUT``: each agent of a run as one portable Hugging Face folder.

``OUT/<agent>/`` holds ``config.json``, ``model.safetensors``, the tokenizer (or processor) and a
model card (``README.md``: the recipe, its seed, the step and the run's held-out evaluations), and
loads anywhere with ``AutoModelForCausalLM.from_pretrained`` + ``AutoTokenizer`` or ``pipeline``;
``push_to_hub`` uploads it as it is. A LoRA agent's adapters are merged into its base (the export
needs no base model and no peft). The agents are built as ``corl eval`` builds them (the recipe's
base, the run's trained weights at the final step or at ``--step N``), so what is exported is what
``corl eval`` scores. ``OUT`` is written whole or not at all (a temp folder renamed at the end).
"""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from corl.atomic import atomic_folder
from corl.errors import CorlError

_NOT_HUB = ("zoo:", "pypi:", "gguf:", "/", ".", "~")


@runtime_checkable
class Exports(Protocol):
    """An agent whose plain export differs from its ``save`` (the hf agent with adapters: merged)."""

    def export(self, path: str) -> None: ...


def cmd_export(args) -> int:
    from corl.tools.inspect import _build_for_inspection

    run_dir, out = Path(args.run_dir), Path(args.out)
    if not (run_dir / "recipe.json").is_file():
        raise CorlError(f"{run_dir}: not a run dir (no recipe.json)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CorlError(f"{out} exists and is not empty; choose another folder (an export is never written over)")
    target = Namespace(target=str(run_dir), set=list(args.set), model=[])
    run, step, _ = _build_for_inspection(target, [], step=args.step)
    try:
        recipe = json.loads((run_dir / "recipe.json").read_text())
        evals = _evaluations(run_dir)
        exported = []
        if out.is_dir():
            out.rmdir()  # (empty: checked above) the atomic rename puts the whole export there
        with atomic_folder(out) as tmp:
            for slot in run.agents:
                folder = tmp / slot.name
                agent = slot.agent
                (agent.export if isinstance(agent, Exports) else agent.save)(str(folder))
                spec = next(a for a in run.spec.agents if a.name == slot.name)
                (folder / "README.md").write_text(model_card(slot.name, recipe, spec, step, evals))
                exported.append(slot.name)
        for name in exported:
            print(out / name)
        return 0
    finally:
        run.close()


def _evaluations(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The run's held-out evaluations by step (``metrics.jsonl``'s eval records)."""
    evals: dict[int, dict[str, Any]] = {}
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # (a line cut by a kill)
            if isinstance(record, dict) and record.get("kind") == "eval":
                evals[record["step"]] = record.get("agents", {})
    return evals


def model_card(name: str, recipe: dict[str, Any], spec, step: int, evals: dict[int, dict[str, Any]]) -> str:
    """A Hugging Face model card: the recipe, its seed, the step and the run's evaluation table."""
    agent = next((a for a in recipe.get("agents", []) if a.get("name") == name), {})
    source = str(agent.get("model", ""))
    run = recipe.get("run", {})
    lora = agent.get("lora") or {}
    header = ["---", "library_name: transformers", "tags:", "- corl", "- co-rl", "- reinforcement-learning"]
    if source and not source.startswith(_NOT_HUB) and source.count("/") == 1:
        header.append(f"base_model: {source}")
    header.append("---")
    trained = "frozen (not trained)" if spec.frozen else f"trained for {step} step{'' if step == 1 else 's'}"
    lines = [*header, "", f"# {run.get('name', 'corl run')}: {name}", "",
             f"Agent `{name}` of a corl (Co-RL) run, {trained}: recipe `{run.get('name')}`, seed {run.get('seed')}, "
             f"{run.get('steps')} steps planned, topology `{recipe.get('topology', {}).get('type')}`, "
             f"voting `{recipe.get('voting', {}).get('type')}`, optimizer `{agent.get('optimizer', {}).get('type')}`.",
             f"Base model: `{source}`" + (f"; LoRA rank {lora['rank']} adapters merged in." if lora.get("rank") else "."),
             "", "## Evaluation", ""]
    shown = sorted({s for s in evals if s in (0, step)})
    rows = [(s, evals[s][name]) for s in shown if name in evals[s]]
    if rows:
        keys = [k for k in rows[0][1] if not k.endswith("_se") and k != "length"]
        lines += [f"Held-out prompts of the run's task ({recipe.get('eval', {}).get('size')} asked, "
                  f"k = {recipe.get('eval', {}).get('k')} samples at temperature "
                  f"{recipe.get('eval', {}).get('temperature')}), as the run measured them:", "",
                  "| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        lines += [f"| {s}{' (base)' if s == 0 else ''} | " + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys)
                  + " |" for s, r in rows]
    else:
        lines.append(f"The run evaluated no step of this export (step {step}); score it with `corl eval`.")
    lines += ["", "## Use", "", "```python", "from transformers import pipeline", "",
              'generate = pipeline("text-generation", model="PATH/TO/THIS/FOLDER")', "```", "",
              "## Recipe", "", "The whole recipe the run resolved (`recipe.json`):", "", "```json",
              json.dumps(_portable(recipe), indent=2), "```", ""]
    return "\n".join(lines)


def _portable(recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe without this machine's output folder."""
    run = {k: v for k, v in recipe.get("run", {}).items() if k != "output_dir"}
    return {**recipe, "run": run}

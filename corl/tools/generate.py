"""``corl data generate TASK OUT``: a generated task's splits written as data files.

Each non-empty split becomes ``OUT/<split>.jsonl``, one row per prompt: ``question`` (its text) and
``answer`` (its label, left out where it has none), and ``image`` where it has images (PNG files
under ``OUT/images/``, named relative to the data file), the layout the ``jsonl`` task reads by
default (a prompt's ``solution``, a warm-start target, is not written: that task reads none); the
lines to put in a recipe are printed. Offered are the registered tasks that declare
the ``generates_data`` trait (:class:`corl.traits.TaskTraits`), built from their defaults and the
``--set KEY=VALUE`` keys of their table (``--set train_size=100``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corl import logs
from corl.atomic import atomic_folder
from corl.context import Context
from corl.errors import CorlError
from corl.recipe.overrides import apply_overrides
from corl.recipe.schema import ComponentSpec
from corl.recipe.structure import Errors, structure
from corl.types import Prompt

SPLITS = ("seed", "train", "eval")  # the Task protocol's split names


def cmd_generate(args) -> int:
    from corl.plugins import build_registry, make_plugin_manager
    from corl.runtime.build import Builder

    registry = build_registry(make_plugin_manager())
    component = registry.get("task", args.task) if registry.has("task", args.task) else None
    if component is None or not component.traits.generates_data:
        choices = sorted({c.name for c in registry if c.kind == "task" and c.traits.generates_data})
        why = "is no generated task" if component is None else "writes no data files (it declares no generates_data)"
        raise CorlError(f"task {args.task!r} {why}; choose one of: {', '.join(choices) or 'none installed'}")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CorlError(f"{out} exists and is not empty; choose another folder (data is never written over)")
    errors = Errors()
    config = structure(component.config_cls, apply_overrides({}, list(args.set)), "task", errors)
    if errors:
        raise CorlError("\n".join(errors))
    ctx = Context(spec=None, seed=0, log=logs.get("data").info)
    task = Builder(registry)("task", ComponentSpec(args.task, config), ctx)
    splits = {name: tuple(task.split(name)) for name in SPLITS}
    written = write(out, splits, args.task)
    for name, path in written.items():
        print(f"{path}: {len(splits[name])} prompts")
    labels = [p.label for prompts in splits.values() for p in prompts if p.label is not None]
    integer = bool(labels) and all(isinstance(label, int) and not isinstance(label, bool) for label in labels)
    print("\na recipe in this folder reads them back with (a recipe's paths are relative to its file):\n"
          '[task]\ntype = "jsonl"')
    for name, path in written.items():
        print(f'{name} = "{path.as_posix()}"')
    if any(p.images for prompts in splits.values() for p in prompts):
        print('image_field = "image"')
    if integer:
        print('answers = "integer"')
    return 0


def write(out: Path, splits: dict[str, tuple[Prompt, ...]], task: str = "task") -> dict[str, Path]:
    """Write each non-empty split as ``out/<split>.jsonl`` (images under ``out/images/``); the files
    written, by split. A prompt a data file cannot hold is refused before anything is written, and
    ``out`` is written whole or not at all (a temp folder renamed at the end)."""
    rows = {name: [_row(task, p) for p in prompts] for name, prompts in splits.items() if prompts}
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()  # the rename below puts the whole folder there
    with atomic_folder(out) as tmp:
        for name, split_rows in rows.items():
            with (tmp / f"{name}.jsonl").open("w", encoding="utf-8") as f:
                for row, images in split_rows:
                    for image, file in images:
                        _save(image, tmp / file)
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {name: out / f"{name}.jsonl" for name in rows}


def _row(task: str, prompt: Prompt) -> tuple[dict[str, Any], list[tuple[Any, str]]]:
    """One JSONL row of ``prompt``, and its images to save as ``(image, file relative to the data)``."""
    where = f"task {task!r}: prompt {prompt.id}"
    if prompt.test_inputs or prompt.messages:
        what = "test inputs" if prompt.test_inputs else "chat turns"
        raise CorlError(f"{where} carries {what}, which a data file of question and answer cannot hold")
    label = prompt.label
    if label is not None and (isinstance(label, bool) or not isinstance(label, (str, int, float))):
        raise CorlError(f"{where}: a data file's answer is text or a number, not {type(label).__name__} {label!r}")
    row: dict[str, Any] = {"question": prompt.text}
    if label is not None:
        row["answer"] = label
    images = [(image, f"images/{prompt.id}-{k}{_suffix(image)}") for k, image in enumerate(prompt.images)]
    if images:
        row["image"] = images[0][1] if len(images) == 1 else [file for _, file in images]
    return row, images


def _suffix(image: Any) -> str:
    return Path(image).suffix if isinstance(image, (str, Path)) else ".png"


def _save(image: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(image, (str, Path)):
        shutil.copyfile(image, path)
    else:  # a PIL image
        image.save(path, format="PNG")

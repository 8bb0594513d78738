"""Rebuild the shipped zoo models (zoo:llama-add3, zoo:qwen2-add3, zoo:neox-add3, the weak cohort's
zoo:*-add3-weak, zoo:qwen2-add3-strong, and the VLM pair's zoo:llava-shapes and zoo:idefics3-shapes) with
corl's own warm-start trainer, from the addition (text) or shapes (vision) task's labeled seed split
(corl/builtin/hf/models/shipped.py says how).

    python scripts/make_zoo.py --out DIR [--only llama-add3,...]     # rebuild into DIR/<name>
    python scripts/make_zoo.py --check                               # rebuild to a temp dir, compare sha256
    python scripts/make_zoo.py --write                               # replace the package's copies

One torch thread, about 1-3 minutes per text model on a free CPU core, 2-6 minutes per vision
model (zoo:idefics3-shapes 1,100 steps, zoo:llava-shapes 3,000). Bit-for-bit on the torch build
and machine the shipped files were made with; elsewhere a rebuild may stop at another point of the
models' learning transition (compare its pass@1 with `corl eval`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from corl.builtin.hf.models import shipped
from corl.builtin.hf.models.catalog import shipped_folder
from corl.builtin.tasks.addition import AdditionConfig, AdditionTask
from corl.builtin.tasks.shapes import ShapesConfig, ShapesTask


def seed_examples() -> list[tuple[str, str]]:
    config = AdditionConfig(**{k: v for k, v in shipped.TASK.items() if k != "type"})
    return [(p.text, p.solution) for p in AdditionTask(config).split("seed")]


def vision_seed_prompts() -> list:
    return ShapesTask(ShapesConfig(**{k: v for k, v in shipped.VISION_TASK.items() if k != "type"})).split("seed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the rebuilt folders here")
    where.add_argument("--check", action="store_true", help="rebuild into a temp dir; exit 1 unless every sha256 matches")
    where.add_argument("--write", action="store_true", help="replace the package's shipped folders")
    ap.add_argument("--only", default=",".join([*shipped.SHIPPED, *shipped.SHIPPED_VISION]), help="comma-separated names")
    args = ap.parse_args(argv)
    names = args.only.split(",")
    unknown = [n for n in names if n not in shipped.SHIPPED and n not in shipped.SHIPPED_VISION]
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)}; shipped: {', '.join([*shipped.SHIPPED, *shipped.SHIPPED_VISION])}")
    examples = seed_examples() if any(n in shipped.SHIPPED for n in names) else []
    prompts = vision_seed_prompts() if any(n in shipped.SHIPPED_VISION for n in names) else []
    different = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            if args.write:
                out = shipped_folder(name)
                backup = Path(scratch) / f"old-{name}"
                if out.exists():
                    out.rename(backup)
            else:
                out = (args.out or Path(scratch)) / name
            if name in shipped.SHIPPED_VISION:
                got, want = shipped.rebuild_vision(name, prompts, out, log=print), shipped.SHIPPED_VISION[name].sha256
            else:
                got, want = shipped.rebuild(name, examples, out, log=print), shipped.SHIPPED[name].sha256
            if got != want:
                different.append(name)
    if different and not args.write:
        print(f"differs from the shipped weights: {', '.join(different)}", file=sys.stderr)
        return 1
    if different:
        print(f"written; update SHIPPED's (or SHIPPED_VISION's) sha256 in corl/builtin/hf/models/shipped.py for {', '.join(different)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

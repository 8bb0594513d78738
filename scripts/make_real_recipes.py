"""Write the baselines of recipes/real_headroom.toml: the same real pair, task, prompts and
optimizer, rewarded by each agent's own majority (self-reward) or by the hidden labels (supervised).

    python scripts/make_real_recipes.py
    corl compare recipes/real_headroom.toml recipes/real/headroom_self_reward.toml \\
        recipes/real/headroom_supervised.toml recipes/real/headroom_claims.toml --seeds 0,1,2,3 --out runs/real

Each recipe differs from the shipped one only where its name says (docs/how-to/real-models.md).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_paper_recipes import table, toml_value  # noqa: E402  (the one TOML writer of the generated recipes)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "recipes" / "real_headroom.toml"
VARIANTS = {
    "headroom_self_reward": ("Self-reward (TTRL): each real agent against its own majority.", {"type": "self"}, {}),
    "headroom_supervised": ("Supervised RLVR ceiling: ground-truth reward.", {"type": "ground_truth"},
                            {"supervised": True}),
}


def write(name: str, about: str, topology: dict, run: dict, out: Path) -> None:
    recipe = tomllib.loads(SHIPPED.read_text())
    lines = [f"# {about}", "# The baseline of recipes/real_headroom.toml (the Co-RL ring): written by "
             "scripts/make_real_recipes.py; see docs/how-to/real-models.md.", ""]
    lines += table("run", {**recipe["run"], "name": name, **run})
    lines += table("task", recipe["task"])
    for agent in recipe["agents"]:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in agent.items()), ""]
    lines += table("voting", recipe["voting"]) + table("topology", topology) + table("eval", recipe["eval"])
    (out / f"{name}.toml").write_text("\n".join(lines))


def main(out: Path = ROOT / "recipes" / "real") -> None:
    for name, (about, topology, run) in VARIANTS.items():
        write(name, about, topology, run, out)


if __name__ == "__main__":
    main()

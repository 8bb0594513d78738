"""Write the baselines of recipes/real_headroom.toml (the real pair) and recipes/real/max3_pooled.toml
(the three families): the same agents, task, prompts and optimizer, rewarded by each agent's own
majority (self-reward) or by the hidden labels (supervised).

    python scripts/make_real_recipes.py
    corl compare recipes/real/max3_pooled.toml recipes/real/max3_self_reward.toml \\
        recipes/real/max3_supervised.toml recipes/real/max3_claims.toml --seeds 0,1,2,3 --tabulate
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
THREE = ROOT / "recipes" / "real" / "max3_pooled.toml"
SELF = ("Self-reward (TTRL): each real agent against its own majority.", {"type": "self"}, {})
SUPERVISED = ("Supervised RLVR ceiling: ground-truth reward.", {"type": "ground_truth"}, {"supervised": True})
#: (the Co-RL recipe, what it is, where its docs are) -> baseline name -> (about, topology, run keys)
SETS = {
    (SHIPPED, "the Co-RL ring", "docs/results/real-models.md"): {"headroom_self_reward": SELF, "headroom_supervised": SUPERVISED},
    (THREE, "three families, pooled Co-RL", "docs/results/real-models.md"): {"max3_self_reward": SELF,
                                                                      "max3_supervised": SUPERVISED},
}


def write(name: str, about: str, topology: dict, run: dict, out: Path, shipped: Path = SHIPPED,
          what: str = "the Co-RL ring", docs: str = "docs/how-to/real-models.md") -> None:
    recipe = tomllib.loads(shipped.read_text())
    where = shipped.relative_to(ROOT).as_posix()
    lines = [f"# {about}", f"# The baseline of {where} ({what}): written by "
             f"scripts/make_real_recipes.py; see {docs}.", ""]
    lines += table("run", {**recipe["run"], "name": name, **run})
    lines += table("task", recipe["task"])
    for agent in recipe["agents"]:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in agent.items()), ""]
    lines += table("voting", recipe["voting"]) + table("topology", topology) + table("eval", recipe["eval"])
    (out / f"{name}.toml").write_text("\n".join(lines))


def main(out: Path = ROOT / "recipes" / "real") -> None:
    for (shipped, what, docs), variants in SETS.items():
        for name, (about, topology, run) in variants.items():
            write(name, about, topology, run, out, shipped, what, docs)


if __name__ == "__main__":
    main()

"""Write recipes/cohort/*.toml (the reliability vote against pooled majority, on an equal and an
unequal cohort) and recipes/weak/*.toml (a weak cohort: Co-RL, each lever, the reliability vote,
self-reward, supervised) on the addition testbed (docs/results/claims.md, "Reliability-weighted votes" and
"A weak cohort").

    python scripts/make_cohort_recipes.py
    corl compare recipes/cohort/*.toml --seeds 0,1,2,3 --out runs/cohort
    corl compare recipes/weak/*.toml --seeds 0,1,2,3 --out runs/weak

Three agents pool their votes (``all_pairs`` with ``combine = "vote"``: every agent is rewarded by
the label of all three agents' votes). *equal*: the three shipped models (pass@1 66.5 / 57.9 /
~58 at step 0). *unequal*: llama and qwen2 as shipped, and a weak third: ``zoo:gpt-neox-tiny``
warm-started with the shipped neox's own schedule (constant lr 3e-3 after 100 warmup steps, batch
128, seed 0, 800 steps) but stopped at step 420: 26.9% pass@1, greedy 61%, maj@8 43% (300 held-out
prompts x 8; the transition is steep here: 15% at 350, 54% at 550, 63% at 700). Each pair of
recipes differs only in ``voting.type``.

*weak*: three tiny zoo models warm-started on the addition seed split at one constant lr (1e-3, the
only one at which qwen2 learns; 100 warmup steps, batch 128) and each stopped early in its learning
transition, so every base is below 50% pass@1 and its maj@4 is wrong about half the time (300
held-out prompts x 4, snapshots of `bench/zoo_curve.py` every 100 steps): llama at 700 steps
(pass@1 41%, maj@4 50%, greedy 66%), qwen2 at 2,400 (37%, 40%, 47%), neox at 1,200 (36%, 49%, 76%).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_paper_recipes import agent, table, toml_value  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "recipes" / "cohort"
WEAK_OUT = OUT.parent / "weak"
#: each family's zoo model and where its warm-start stops, at WEAK_COHORT_ZOO's schedule
WEAK_COHORT = {"llama": ("zoo:llama-tiny", 700), "qwen2": ("zoo:qwen2-tiny", 2400), "neox": ("zoo:gpt-neox-tiny", 1200)}
WEAK_COHORT_ZOO = dict(steps=2400, lr=1e-3, schedule="constant", warmup_steps=100, batch_size=128, seed=0)
#: 60 steps (the default recipe's length), evaluated before and after on 1000 held-out prompts x 8.
RUN = dict(steps=60, prompts_per_step=32, threads=1, checkpoint_every=0, observers=["jsonl"], protocol="held_out")
EVAL = dict(size=1000, k=8, every=0)
WEAK_ZOO = dict(steps=800, stop=420, lr=3e-3, schedule="constant", warmup_steps=100, batch_size=128, seed=0)


def weak_neox() -> dict:
    a = agent("neox")
    a["model"] = "zoo:gpt-neox-tiny"
    return a


def recipe(name: str, about: str, agents: list[dict], voting: str | dict, zoo: dict | None,
           topology: dict | None = None, run: dict | None = None, extra: dict | None = None, out: Path = OUT) -> None:
    lines = [f"# {about}", "# Written by scripts/make_cohort_recipes.py; see docs/results/claims.md.", ""]
    lines += table("run", {"name": name, **RUN, **(run or {})})
    lines += table("task", {"type": "addition", "train_size": 2048, "eval_size": 1000})
    for a in agents:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in a.items()), ""]
    voting = {"type": voting} if isinstance(voting, str) else voting
    lines += table("voting", {**voting, "n_votes": 16, "n_train": 8})
    lines += table("topology", topology or {"type": "all_pairs", "combine": "vote"})
    lines += table("eval", EVAL)
    if zoo:
        lines += table("zoo", zoo)
    for section, values in (extra or {}).items():
        lines += table(section, values)
    (out / f"{name}.toml").write_text("\n".join(lines))


def weak_agents(**optimizer) -> list[dict]:
    agents = []
    for name, (model, stop) in WEAK_COHORT.items():
        a = agent(name)
        a["model"], a["zoo_stop"] = model, stop
        a["optimizer"] = {**a["optimizer"], **optimizer}
        agents.append(a)
    return agents


def weak(out: Path = WEAK_OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ring, z = {"type": "ring"}, WEAK_COHORT_ZOO
    recipe("weak_ring", "A weak cohort, Co-RL ring, no lever.", weak_agents(), "majority", z, ring, out=out)
    recipe("weak_ring_gated", "A weak cohort, Co-RL ring, confidence gate: no label under a 50% vote share.",
           weak_agents(), {"type": "majority", "min_share": 0.5}, z, ring, out=out)
    recipe("weak_ring_kl", "A weak cohort, Co-RL ring, KL anchor 0.05 to each start policy.",
           weak_agents(kl=0.05), "majority", z, ring, out=out)
    recipe("weak_ring_early_stop", "A weak cohort, Co-RL ring, early stop (and roll back) on collusion.",
           weak_agents(), "majority", z, ring, run={"observers": ["jsonl", "early_stop"]}, out=out)
    recipe("weak_pooled_majority", "A weak cohort, pooled votes, plain majority.",
           weak_agents(), "majority", z, out=out)
    recipe("weak_pooled_reliability", "A weak cohort, pooled votes weighted by learned reliability.",
           weak_agents(), "reliability", z, out=out)
    recipe("weak_self_reward", "A weak cohort, self-reward (TTRL): each agent against its own majority.",
           weak_agents(), "majority", z, {"type": "self"}, out=out)
    recipe("weak_supervised", "A weak cohort, supervised RLVR ceiling: ground-truth reward.",
           weak_agents(), "majority", z, {"type": "ground_truth"}, run={"supervised": True}, out=out)


def main(out: Path = OUT, weak_out: Path = WEAK_OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    equal = [agent(n) for n in ("llama", "qwen2", "neox")]
    unequal = [agent("llama"), agent("qwen2"), weak_neox()]
    for voting, what in (("majority", "plain majority"), ("reliability", "the reliability-weighted vote")):
        recipe(f"equal_pooled_{voting}", f"Three shipped agents of similar accuracy, pooled votes, {what}.",
               equal, voting, None, out=out)
        recipe(f"unequal_pooled_{voting}", f"Two shipped agents and a weak neox (~33% pass@1), pooled votes, {what}.",
               unequal, voting, WEAK_ZOO, out=out)
    weak(weak_out)


if __name__ == "__main__":
    main()

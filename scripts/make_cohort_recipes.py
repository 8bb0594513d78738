"""Write recipes/cohort/*.toml: the reliability vote against pooled majority, on an equal and an
unequal cohort of the addition testbed (docs/results.md, "Reliability-weighted votes").

    python scripts/make_cohort_recipes.py
    corl compare recipes/cohort/*.toml --seeds 0,1,2,3 --out runs/cohort

Three agents pool their votes (``all_pairs`` with ``combine = "vote"``: every agent is rewarded by
the label of all three agents' votes). *equal*: the three shipped models (pass@1 66.5 / 57.9 /
~58 at step 0). *unequal*: llama and qwen2 as shipped, and a weak third: ``zoo:gpt-neox-tiny``
warm-started with the shipped neox's own schedule (constant lr 3e-3 after 100 warmup steps, batch
128, seed 0, 800 steps) but stopped at step 420: 26.9% pass@1, greedy 61%, maj@8 43% (300 held-out
prompts x 8; the transition is steep here: 15% at 350, 54% at 550, 63% at 700). Each pair of
recipes differs only in ``voting.type``.
"""

from __future__ import annotations

from pathlib import Path

from make_paper_recipes import agent, table, toml_value

OUT = Path(__file__).resolve().parent.parent / "recipes" / "cohort"
#: 60 steps (the default recipe's length), evaluated before and after on 1000 held-out prompts x 8.
RUN = dict(steps=60, prompts_per_step=32, threads=1, checkpoint_every=0, observers=["jsonl"], protocol="held_out")
EVAL = dict(size=1000, k=8, every=0)
WEAK_ZOO = dict(steps=800, stop=420, lr=3e-3, schedule="constant", warmup_steps=100, batch_size=128, seed=0)


def weak_neox() -> dict:
    a = agent("neox")
    a["model"] = "zoo:gpt-neox-tiny"
    return a


def recipe(name: str, about: str, agents: list[dict], voting: str, zoo: dict | None) -> None:
    lines = [f"# {about}", "# Written by scripts/make_cohort_recipes.py; see docs/results.md.", ""]
    lines += table("run", {"name": name, **RUN})
    lines += table("task", {"type": "addition", "train_size": 2048, "eval_size": 1000})
    for a in agents:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in a.items()), ""]
    lines += table("voting", {"type": voting, "n_votes": 16, "n_train": 8})
    lines += table("topology", {"type": "all_pairs", "combine": "vote"})
    lines += table("eval", EVAL)
    if zoo:
        lines += table("zoo", zoo)
    (OUT / f"{name}.toml").write_text("\n".join(lines))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    equal = [agent(n) for n in ("llama", "qwen2", "neox")]
    unequal = [agent("llama"), agent("qwen2"), weak_neox()]
    for voting, what in (("majority", "plain majority"), ("reliability", "the reliability-weighted vote")):
        recipe(f"equal_pooled_{voting}", f"Three shipped agents of similar accuracy, pooled votes, {what}.",
               equal, voting, None)
        recipe(f"unequal_pooled_{voting}", f"Two shipped agents and a weak neox (~33% pass@1), pooled votes, {what}.",
               unequal, voting, WEAK_ZOO)


if __name__ == "__main__":
    main()

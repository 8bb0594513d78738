"""Write recipes/cohort/*.toml (the reliability vote against pooled majority, on an equal and an
unequal cohort) and recipes/weak/*.toml (a weak cohort: Co-RL, each lever, the reliability vote,
self-reward, supervised) on the addition testbed (docs/results/claims.md, "Reliability-weighted votes" and
"A weak cohort").

    python scripts/make_cohort_recipes.py
    corl compare recipes/cohort/*.toml --seeds 0,1,2,3 --out runs/cohort
    corl compare recipes/weak/*.toml --seeds 0,1,2,3 --out runs/weak
    corl compare recipes/one_strong/*.toml --seeds 0,1,2,3 --out runs/one_strong

Three agents pool their votes (``all_pairs`` with ``combine = "vote"``: every agent is rewarded by
the label of all three agents' votes). *equal*: the three shipped models (pass@1 66.5 / 57.9 /
~58 at step 0). *unequal*: llama and qwen2 as shipped, and a weak third, ``zoo:neox-add3-weak``.
Each pair of recipes differs only in ``voting.type``.

*weak*: three tiny families stopped early in their learning transitions, every base below 50%
pass@1: ``zoo:llama-add3-weak``, ``zoo:qwen2-add3-weak``, ``zoo:neox-add3-weak``.

*one_strong* (recipes/one_strong): one strong agent (``zoo:qwen2-add3-strong``) and two weak ones (the
weak cohort's neox and llama): does a topology do no harm to the strong member? The ring, the pooled
vote of the others, and ``upward`` (never paid by a peer it outperforms).

Every base is shipped inside the package (corl/builtin/hf/models/shipped.py says how each was
warm-started and where it was stopped), so step 0 is the same on every machine: a warm-start stopped
inside a learning transition lands elsewhere on another machine (issue 38).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_paper_recipes import agent, table, toml_value  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "recipes" / "cohort"
WEAK_OUT = OUT.parent / "weak"
#: each family's shipped weak base (corl/builtin/hf/models/shipped.py)
WEAK_COHORT = {"llama": "zoo:llama-add3-weak", "qwen2": "zoo:qwen2-add3-weak", "neox": "zoo:neox-add3-weak"}
ONE_STRONG_OUT = OUT.parent / "one_strong"
#: 60 steps (the default recipe's length), evaluated before and after on 1000 held-out prompts x 8.
RUN = dict(steps=60, prompts_per_step=32, threads=1, checkpoint_every=0, observers=["jsonl"], protocol="held_out")
EVAL = dict(size=1000, k=8, every=0)


def shipped_agent(name: str, model: str, **optimizer) -> dict:
    a = agent(name)
    a["model"] = model
    a["optimizer"] = {**a["optimizer"], **optimizer}
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
    return [shipped_agent(name, model, **optimizer) for name, model in WEAK_COHORT.items()]


def weak(out: Path = WEAK_OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ring, z = {"type": "ring"}, None
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


def one_strong(out: Path = ONE_STRONG_OUT) -> None:
    """One strong agent first (so the ring pays it by the weak neox's label, as in issue 38), two weak ones."""
    out.mkdir(parents=True, exist_ok=True)
    agents = [shipped_agent("qwen2", "zoo:qwen2-add3-strong"), shipped_agent("neox", WEAK_COHORT["neox"]),
              shipped_agent("llama", WEAK_COHORT["llama"])]
    about = "One strong agent (qwen2) and two weak ones (neox, llama), "
    recipe("one_strong_ring", about + "Co-RL ring: each agent paid by the next one's majority.",
           agents, "majority", None, {"type": "ring"}, out=out)
    recipe("one_strong_pooled", about + "pooled majority of the others (all_pairs).",
           agents, "majority", None, out=out)
    recipe("one_strong_upward", about + "upward: paid by itself and the peers it does not outperform.",
           agents, "majority", None, {"type": "upward"}, out=out)


def main(out: Path = OUT, weak_out: Path = WEAK_OUT, one_strong_out: Path = ONE_STRONG_OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    equal = [agent(n) for n in ("llama", "qwen2", "neox")]
    unequal = [agent("llama"), agent("qwen2"), shipped_agent("neox", "zoo:neox-add3-weak")]
    for voting, what in (("majority", "plain majority"), ("reliability", "the reliability-weighted vote")):
        recipe(f"equal_pooled_{voting}", f"Three shipped agents of similar accuracy, pooled votes, {what}.",
               equal, voting, None, out=out)
        recipe(f"unequal_pooled_{voting}", f"Two shipped agents and a weak neox (zoo:neox-add3-weak), pooled votes, "
               f"{what}.", unequal, voting, None, out=out)
    weak(weak_out)
    one_strong(one_strong_out)


if __name__ == "__main__":
    main()

"""Write recipes/paper/*.toml: the baselines and Co-RL variants of docs/results.md, two regimes.

One grid, written out as plain recipes so each can be run (and read) on its own:
    python scripts/make_paper_recipes.py && corl compare recipes/paper/*.toml --seeds 0,1,2 --out runs/paper
Every recipe of a regime shares the run settings below; a recipe differs from its regime's
others only where its name says. The claims each regime tests are in recipes/paper/claims.toml.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "recipes" / "paper"

#: FINDINGS' training budget (100 steps of 32 prompts), sized to rerun on 2 CPU cores in under an
#: hour (see docs/results.md, "Budget"); held-out eval of 1000 prompts x 8 every 25 steps.
RUN = dict(steps=100, prompts_per_step=32, threads=1, checkpoint_every=0, observers=["jsonl"])
EVAL = dict(size=1000, k=8, every=25)
#: the collusion early stop compares the last WINDOW steps' means with the WINDOW before
WINDOW = 10
LR = 4e-5
#: zoo warm-start steps per family: the strong base (default zoo) and the weak one (~20% pass@1).
REGIMES = {"strong": {"llama": 2000, "qwen2": 2000, "neox": 2000},
           "weak": {"llama": 800, "qwen2": 800, "neox": 800}}
MODELS = {"llama": "zoo:llama-tiny", "qwen2": "zoo:qwen2-tiny", "neox": "zoo:gpt-neox-tiny"}


def agent(name, regime, model=None, optimizer="grpo", kl=0.0, frozen=False, zoo_seed=None):
    family = model or name
    opt = {"type": optimizer, "lr": LR} | ({"scale_rewards": False} if optimizer == "grpo" else {})
    if kl:
        opt["kl"] = kl
    a = {"name": name, "model": MODELS[family], "zoo_steps": REGIMES[regime][family],
         "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": 6}, "optimizer": opt}
    if zoo_seed is not None:
        a["zoo_seed"] = zoo_seed
    if frozen:
        a["frozen"] = True
    return a


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return str(v)


def table(name, d):
    return [f"[{name}]", *(f"{k} = {toml_value(v)}" for k, v in d.items()), ""]


def recipe(name, regime, about, agents, topology, voting=None, run=None, extra=()):
    voting = {"type": "majority", "n_votes": 16, "n_train": 8} | (voting or {})
    lines = [f"# {about}", f"# Regime: {regime} base. Written by scripts/make_paper_recipes.py; see docs/results.md.", ""]
    lines += table("run", {"name": name, **RUN, **(run or {})})
    lines += table("task", {"type": "arithmetic", "train_size": 2048, "eval_size": 1000})
    for a in agents:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in a.items()), ""]
    lines += table("voting", voting) + table("topology", topology) + table("eval", EVAL)
    for header, body in extra:
        lines += table(header, body)
    (TARGET / f"{name}.toml").write_text("\n".join(lines))


def three(regime, **kw):
    return [agent(n, regime, **kw) for n in ("llama", "qwen2", "neox")]


def pair(regime, **kw):
    return [agent(n, regime, **kw) for n in ("llama", "qwen2")]


TARGET = OUT


def main(out: Path = OUT) -> None:
    global TARGET
    TARGET = out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.toml"):
        if old.name != "claims.toml":
            old.unlink()
    s = "strong"
    recipe("strong_base", s, "Base models, no training: evaluated exactly as the trained ones.",
           three(s), {"type": "self"}, run={"steps": 0})
    recipe("strong_self_reward", s, "Self-reward (TTRL): each agent against its own majority.", three(s), {"type": "self"})
    recipe("strong_supervised", s, "Supervised RLVR ceiling: ground-truth reward.", three(s),
           {"type": "ground_truth"}, run={"supervised": True})
    recipe("strong_judge", s, "Judge-based: llama and qwen2 rewarded by a frozen neox's majority.",
           [agent("llama", s), agent("qwen2", s), agent("neox", s, frozen=True)], {"type": "judge", "judge": "neox"})
    recipe("strong_pair_hetero", s, "Co-RL pair, two families (llama <- qwen2 <- llama).", pair(s), {"type": "ring"})
    recipe("strong_pair_homo_copies", s, "Co-RL pair, two copies of one llama checkpoint.",
           [agent("llama", s), agent("llama2", s, model="llama")], {"type": "ring"})
    recipe("strong_pair_homo_seeds", s, "Co-RL pair, two llama warm-starts from different seeds.",
           [agent("llama", s), agent("llama2", s, model="llama", zoo_seed=1)], {"type": "ring"})
    recipe("strong_ring3", s, "Co-RL, three agents, ring (llama <- qwen2 <- neox <- llama).", three(s), {"type": "ring"})
    recipe("strong_pooled3", s, "Co-RL, three agents, all_pairs with pooled votes (majority), GRPO.",
           three(s), {"type": "all_pairs", "combine": "vote"})
    recipe("strong_pooled3_weighted", s, "Co-RL, three agents, all_pairs pooled, self-consistency-weighted votes.",
           three(s), {"type": "all_pairs", "combine": "vote"}, voting={"type": "weighted", "weight": "self_consistency"})
    recipe("strong_pooled3_rloo", s, "Co-RL, three agents, all_pairs pooled (majority), RLOO instead of GRPO.",
           three(s, optimizer="rloo"), {"type": "all_pairs", "combine": "vote"})

    w = "weak"
    recipe("weak_base", w, "Base models, no training (weak warm-start).", three(w), {"type": "self"}, run={"steps": 0})
    recipe("weak_self_reward", w, "Self-reward (TTRL) on the weak base.", pair(w), {"type": "self"})
    recipe("weak_supervised", w, "Supervised RLVR ceiling on the weak base.", pair(w), {"type": "ground_truth"},
           run={"supervised": True})
    recipe("weak_pair", w, "Co-RL pair, no lever: the failure to fix.", pair(w), {"type": "ring"})
    recipe("weak_pair_votes8", w, "Co-RL pair, as many votes as trained samples (8/8) instead of 16/8.",
           pair(w), {"type": "ring"}, voting={"n_votes": 8})
    recipe("weak_pair_gated", w, "Co-RL pair, confidence-gated: no reward unless the peer's answer holds half "
           "the votes, none on a tie.", pair(w), {"type": "ring"}, voting={"min_share": 0.5, "tie_break": "none"})
    recipe("weak_pair_weighted", w, "Co-RL pair, votes weighted by their sampling confidence.", pair(w), {"type": "ring"},
           voting={"type": "weighted", "weight": "confidence"})
    recipe("weak_pair_kl", w, "Co-RL pair with a KL anchor to the base (kl 0.1).", pair(w, kl=0.1), {"type": "ring"})
    recipe("weak_pair_early_stop", w, "Co-RL pair with the label-free collusion early stop.", pair(w),
           {"type": "ring"}, extra=[("observers.early_stop", {"window": WINDOW})])
    recipe("weak_pair_levers", w, "Co-RL pair with gating, KL anchor and early stop together.", pair(w, kl=0.1),
           {"type": "ring"}, voting={"min_share": 0.5, "tie_break": "none"},
           extra=[("observers.early_stop", {"window": WINDOW})])
    recipe("weak_pooled3", w, "Co-RL, three agents, all_pairs pooled (majority) on the weak base.",
           three(w), {"type": "all_pairs", "combine": "vote"})


if __name__ == "__main__":
    main()

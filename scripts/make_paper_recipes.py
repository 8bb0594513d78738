"""Write recipes/paper/*.toml: the baselines and Co-RL variants of docs/results/claims.md, two protocols.

One grid, written out as plain recipes so each can be run (and read) on its own:
    python scripts/make_paper_recipes.py && corl compare recipes/paper/*.toml --seeds 0,1,2,3 --out runs/paper
Every recipe of a protocol shares the run settings below; a recipe differs from its protocol's
others only where its name says. The claims each protocol tests are in recipes/paper/claims.toml.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "recipes" / "paper"

#: 150 steps of 32 prompts, the settings docs/results/claims.md's grid was measured with (the pair / judge /
#: copies gaps widen with steps); held-out (or, test-time, the trained prompts') eval of 1000 prompts
#: x 8 every 25 steps.
RUN = dict(steps=150, prompts_per_step=32, threads=1, checkpoint_every=0, observers=["jsonl"])
EVAL = dict(size=1000, k=8, every=25)
LR = 1e-4
#: held_out: train on the task's train split, evaluate on its eval split; test_time (TTRL): train
#: label-free on the evaluated prompts themselves.
PROTOCOLS = ("held_out", "test_time")
MODELS = {"llama": "zoo:llama-add3", "qwen2": "zoo:qwen2-add3", "neox": "zoo:neox-add3"}


def agent(name, model=None, frozen=False):
    a = {"name": name, "model": MODELS[model or name],
         "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": 6},
         "optimizer": {"type": "grpo", "lr": LR, "scale_rewards": False}}
    if frozen:
        a["frozen"] = True
    return a


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: quotes, backslashes and newlines escaped
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return str(v)


def table(name, d):
    return [f"[{name}]", *(f"{k} = {toml_value(v)}" for k, v in d.items()), ""]


def recipe(name, protocol, about, agents, topology, run=None):
    lines = [f"# {about}", f"# Protocol: {protocol}. Written by scripts/make_paper_recipes.py; see docs/results/claims.md.", ""]
    lines += table("run", {"name": name, **RUN, "protocol": protocol, **(run or {})})
    lines += table("task", {"type": "addition", "train_size": 2048, "eval_size": 1000})
    for a in agents:
        lines += ["[[agents]]", *(f"{k} = {toml_value(v)}" for k, v in a.items()), ""]
    lines += table("voting", {"type": "majority", "n_votes": 16, "n_train": 8}) + table("topology", topology)
    lines += table("eval", EVAL)
    (TARGET / f"{name}.toml").write_text("\n".join(lines))


def three(**kw):
    return [agent(n, **kw) for n in ("llama", "qwen2", "neox")]


TARGET = OUT


def main(out: Path = OUT) -> None:
    global TARGET
    TARGET = out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.toml"):
        if old.name != "claims.toml":
            old.unlink()
    for p in PROTOCOLS:
        recipe(f"{p}_self_reward", p, "Self-reward (TTRL): each agent against its own majority.", three(), {"type": "self"})
        recipe(f"{p}_supervised", p, "Supervised RLVR ceiling: ground-truth reward.", three(),
               {"type": "ground_truth"}, run={"supervised": True})
        recipe(f"{p}_judge", p, "Judge-based: llama and qwen2 rewarded by a frozen neox's majority.",
               [agent("llama"), agent("qwen2"), agent("neox", frozen=True)], {"type": "judge", "judge": "neox"})
        recipe(f"{p}_pair_hetero", p, "Co-RL pair, two families (llama <- qwen2 <- llama).",
               [agent("llama"), agent("qwen2")], {"type": "ring"})
        recipe(f"{p}_pair_homo_copies", p, "Co-RL pair, two copies of one llama model.",
               [agent("llama"), agent("llama2", model="llama")], {"type": "ring"})
        recipe(f"{p}_ring3", p, "Co-RL, three agents, ring (llama <- qwen2 <- neox <- llama).", three(), {"type": "ring"})
        recipe(f"{p}_pooled3", p, "Co-RL, three agents, all_pairs with pooled votes (majority).",
               three(), {"type": "all_pairs", "combine": "vote"})


if __name__ == "__main__":
    main()

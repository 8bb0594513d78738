"""corl's GRPO update against the plain REINFORCE loop of FINDINGS, on one checkpoint (prints a table).

  python bench/reinforce_compare.py [--seeds 0,1] [--steps 100] [--variants grpo_4e-5,reinforce_2e-5]

FINDINGS' three-seed study trained with "REINFORCE with group-mean baseline, lr 2e-5, AdamW, grad
clip 1.0": loss = -mean over sequences of (r - mean of the group) * sum of the sequence's token
log-probs, every sampled sequence trained. corl's GRPO divides by the minibatch's token count
instead (token mean), skips zero-advantage samples and clips the ratio (a no-op on-policy). Here
both run inside one corl run, on the same zoo checkpoint, the same rollouts machinery, the same
held-out evaluation, with ground-truth rewards (supervised), so only the update differs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import attrs

from corl.types import Rollout


@attrs.frozen
class ReinforceConfig:
    lr: float = 2e-5
    weight_decay: float = 0.01  # torch's AdamW default, as the throwaway loop used
    max_grad_norm: float = 1.0


class Reinforce:
    """The throwaway loop's update: one AdamW step per batch on every trained sample (the class is
    the component factory: ``Reinforce(config, ctx)``, its config validated by ``Config``)."""

    Config = ReinforceConfig

    def __init__(self, config: ReinforceConfig, ctx):
        import torch

        self.config, self.agent = config, ctx.agent
        self.params = [p for p in self.agent.parameters() if p.requires_grad]
        self.optim = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay)

    def step(self, rollout: Rollout, rewards) -> dict[str, float]:
        import torch

        batch, n_train = rollout.batch, len(rewards[0])
        r = torch.tensor(rewards, dtype=torch.float32)
        adv = (r - r.mean(dim=1, keepdim=True)).flatten()
        rows = torch.tensor([p * rollout.n + s for p in range(len(rewards)) for s in range(n_train)])
        mask = batch.completion_mask[rows].float()
        logp, _ = self.agent.token_logprobs(batch, rows)
        per_seq = (logp * mask).sum(dim=1)  # summed over a sequence's tokens, mean over sequences
        loss = -(adv * per_seq).sum() / len(rows)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
        self.optim.step()
        self.optim.zero_grad(set_to_none=True)
        return {"loss": float(loss.detach()), "grad_norm": float(norm), "nonfinite": 0.0}

    def save_state(self, path: str) -> None:
        pass

    def load_state(self, path: str) -> None:
        pass


AGENTS = (("llama", "zoo:llama-tiny"), ("qwen2", "zoo:qwen2-tiny"), ("neox", "zoo:gpt-neox-tiny"))


THREADS = [1]  # --threads

def optimizer_for(variant: str) -> dict:
    kind, lr = variant.split("_")
    if kind == "grpo":
        return {"type": "grpo", "lr": float(lr), "scale_rewards": False}
    if kind == "reinforce":
        return {"type": "__main__:Reinforce", "lr": float(lr)}
    raise SystemExit(f"unknown variant {variant!r}")


def recipe_for(variant: str, seed: int, steps: int, out: str, zoo_steps: int, prompts: int = 32) -> dict:
    return {
        "run": {"name": variant, "steps": steps, "seed": seed, "prompts_per_step": prompts, "supervised": True,
                "threads": THREADS[0], "observers": [], "output_dir": out, "checkpoint_every": 0},
        "task": {"type": "arithmetic"},
        "agents": [{"name": n, "model": m, "zoo_steps": zoo_steps,
                    "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": 6},
                    "optimizer": optimizer_for(variant)} for n, m in AGENTS],
        "voting": {"type": "majority", "n_votes": 8, "n_train": 8},
        "topology": {"type": "ground_truth"},
        "eval": {"size": 1000, "k": 8, "every": 0},
    }


def main() -> None:
    os.environ.setdefault("CORL_ALLOW_IMPORT_PATHS", "1")
    from corl.runtime import run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--zoo-steps", type=int, default=2000)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step")
    ap.add_argument("--variants", default="grpo_4e-5,grpo_2e-5,reinforce_2e-5")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    args = ap.parse_args()
    THREADS[0] = args.threads
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    gains: dict[str, dict[str, list[float]]] = {v: {n: [] for n, _ in AGENTS} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:  # seed-major, variants alternating: each sees the same machine
            for variant in variants:
                t0 = time.perf_counter()
                summary = run(recipe_for(variant, seed, args.steps, f"{tmp}/{variant}-{seed}", args.zoo_steps,
                                         args.prompts),
                              force=True)
                first = {n: a["before"] for n, a in summary["agents"].items()}
                last = {n: a["after"] for n, a in summary["agents"].items()}
                for name, _ in AGENTS:
                    gains[variant][name].append(100 * (last[name]["pass@1"] - first[name]["pass@1"]))
                print(f"seed {seed} {variant}: " + ", ".join(
                    f"{n} {100 * first[n]['pass@1']:.1f} -> {100 * last[n]['pass@1']:.1f}" for n, _ in AGENTS)
                    + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"\npass@1 change in points, supervised, {args.steps} steps x {args.prompts} prompts x 8, eval 1000 x 8, "
          f"seeds {args.seeds} (mean +- sd)")
    print("| update | " + " | ".join(n for n, _ in AGENTS) + " |")
    print("|---|" + "---|" * len(AGENTS))
    for variant in variants:
        cells = []
        for name, _ in AGENTS:
            g = gains[variant][name]
            sd = statistics.stdev(g) if len(g) > 1 else 0.0
            cells.append(f"{statistics.mean(g):+.2f} +- {sd:.2f}")
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

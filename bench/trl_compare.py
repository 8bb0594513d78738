"""corl against TRL's GRPOTrainer: step throughput and the learning signal (prints a table; never a test).

  pip install 'trl==1.16.*'          # the benchmark's own dependency (tox -e bench installs it)
  python bench/trl_compare.py [--steps 8] [--rounds 2] [--threads 2] [--compile]
  python bench/trl_compare.py --model smollm2 [--steps 3] [--rounds 2] [--threads 1]   # a real model (bench/trl_real.py)

One agent, GRPO, the same zoo model (zoo:llama-tiny, warm-started weights saved once and loaded
by both), the same task, 32 prompts x 8 generations per step, at most 6 new tokens, temperature 1,
lr 2e-5, no KL, one optimizer step per batch, token-mean loss (TRL's loss_type="bnpo"), clipped
ratio 0.2, grad norm 1.0, ground-truth reward from the task's verifier for both. Rounds alternate
corl, TRL, corl, TRL ... in this one process, so both see the same machine; the first two steps of
each round are warm-up and are dropped. ``--threads``: torch threads for both (default 2, both
cores here; on a busy machine 2 spin-waiting OpenMP threads collapse: use 1). ``--compile``: corl's
``compile_update`` against TRL's ``torch_compile`` (each side's first steps compile, in the warm-up).

Same signal: on one fixed sampled batch with the same weights, corl's loss and gradient against
TRL's ``_compute_loss`` on its own model (TRL's advantages, then identical advantages).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import load_recipe
from corl.runtime import Run

PROMPTS, GENERATIONS, NEW_TOKENS, LR = 32, 8, 6, 2e-5
THREADS = [2]  # --threads, for both sides
COMPILE = [False]  # --compile: corl's compile_update and TRL's torch_compile


def corl_run(out: str, seed: int = 0) -> Run:
    recipe = {"run": {"steps": 0, "seed": seed, "prompts_per_step": PROMPTS, "supervised": True, "threads": THREADS[0],
                      "observers": [], "output_dir": out},
              "agents": [{"name": "llama", "model": "zoo:llama-tiny", "compile_update": COMPILE[0],
                          "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": NEW_TOKENS},
                          "optimizer": {"type": "grpo", "lr": LR, "clip": 0.2, "max_grad_norm": 1.0}}],
              "voting": {"n_votes": GENERATIONS, "n_train": GENERATIONS}, "topology": {"type": "ground_truth"},
              "eval": {"size": 0}}
    Path(out).mkdir(parents=True, exist_ok=True)
    pm = make_plugin_manager()
    run = Run(load_recipe(recipe, registry=registry_of(pm)), pm=pm, log=lambda m: None)
    run.setup()
    return run


def time_corl(run: Run, steps: int, first: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process, all threads) per step."""
    wall, cpu = [], []
    for s in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        run.step(first + s)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return wall, cpu


class _StepTimer:
    """A TrainerCallback: wall time of every optimizer step (generation and scoring included)."""

    def __new__(cls):
        from transformers import TrainerCallback

        class Timer(TrainerCallback):
            def __init__(self):
                self.times, self.cpu, self._t0 = [], [], None

            def on_step_begin(self, args, state, control, **kw):
                self._t0 = time.perf_counter(), time.process_time()

            def on_step_end(self, args, state, control, **kw):
                self.times.append(time.perf_counter() - self._t0[0])
                self.cpu.append(time.process_time() - self._t0[1])

        return Timer()


def trl_trainer(model_dir: str, run: Run, steps: int, out: str, seed: int = 0):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    verifier = run.verifier
    data = Dataset.from_dict({"prompt": [p.text for p in run.train], "label": [p.label for p in run.train]})

    def correct(prompts, completions, label, **kw):
        answers = [verifier.extract(c) for c in completions]
        return [float(a is not None and verifier.equivalent(a, t)) for a, t in zip(answers, label)]

    args = GRPOConfig(
        output_dir=out, max_steps=steps, per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS, max_completion_length=NEW_TOKENS, temperature=1.0, top_p=1.0,
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, epsilon=0.2, loss_type="bnpo", scale_rewards="group", num_iterations=1,
        gradient_accumulation_steps=1, use_cpu=True, bf16=False, report_to=[], save_strategy="no",
        torch_compile=COMPILE[0],
        logging_steps=1000, disable_tqdm=True, seed=seed, dataloader_num_workers=0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    timer = _StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[timer])
    return trainer, timer


def same_signal(run: Run, trainer) -> dict[str, float]:
    """Loss and gradient of one fixed batch: corl's optimizer maths against TRL's ``_compute_loss``."""
    from corl.builtin.policy.losses import clipped_loss, grpo_advantages

    slot = run.agents[0]
    agent = slot.agent
    trainer.model.load_state_dict(agent.model.state_dict())
    torch.manual_seed(1)
    prompts = run.train[:PROMPTS]
    rollout = slot.sampler.sample(agent, prompts, GENERATIONS)
    v = run.verifier
    rewards = torch.tensor([[float(v.extract(t) is not None and v.equivalent(v.extract(t), p.label)) for t in texts]
                            for texts, p in zip(rollout.texts, prompts)])
    b = rollout.batch
    rows = torch.arange(len(b.sequences))
    mask = b.completion_mask.float()

    def corl_grad(adv):
        agent.model.zero_grad(set_to_none=True)
        logp, _ = agent.token_logprobs(b, rows)
        loss, _ = clipped_loss(logp, logp.detach(), adv, mask, 0.2)
        loss = loss / mask.sum()
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in agent.model.parameters() if p.grad is not None])

    def trl_grad(adv):
        model = trainer.model
        model.zero_grad(set_to_none=True)
        trainer.current_gradient_accumulation_steps = 1
        inputs = {"prompt_ids": b.sequences[:, :b.prompt_len], "prompt_mask": b.attention_mask[:, :b.prompt_len],
                  "completion_ids": b.sequences[:, b.prompt_len:], "completion_mask": b.completion_mask,
                  "advantages": adv, "old_per_token_logps": None, "num_items_in_batch": mask.sum()}
        loss = trainer._compute_loss(model, inputs)
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    # TRL's advantages: (r - mean) / (std + 1e-4) per group; corl's: / (std + 1e-6), exactly 0 on a flat group
    mean, std = rewards.mean(1, keepdim=True), rewards.std(1, keepdim=True)
    trl_adv = ((rewards - mean) / (std + 1e-4)).flatten()
    corl_adv = grpo_advantages(rewards).flatten()
    out = {}
    for label, (a_corl, a_trl) in {"own advantages": (corl_adv, trl_adv), "same advantages": (trl_adv, trl_adv)}.items():
        l1, g1 = corl_grad(a_corl)
        l2, g2 = trl_grad(a_trl)
        g1, g2 = g1.double(), g2.double()
        cos = float(torch.nn.functional.cosine_similarity(g1, g2, dim=0))
        out[label] = (l1, l2, cos, float((g1 - g2).norm() / g2.norm()))
    agent.model.zero_grad(set_to_none=True)
    trainer.model.zero_grad(set_to_none=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round (after 2 warm-up steps; "
                                                                  "default 8, for smollm2 3)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default 2; 1 on "
                                                                    "a busy machine)")
    parser.add_argument("--compile", action="store_true", help="both sides through torch.compile: corl's "
                        "compile_update, TRL's torch_compile (the compiles fall in the dropped warm-up steps)")
    parser.add_argument("--model", choices=["zoo", "smollm2"], default="zoo",
                        help="zoo: the tiny zoo model in one process; smollm2: SmolLM2-135M-Instruct, each side in "
                             "its own process for its peak RSS (bench/trl_real.py)")
    args, rest = parser.parse_known_args()
    if args.model == "smollm2":
        if args.compile:
            parser.error("--compile is measured on the zoo model only (SmolLM2's first compile takes ~6 min)")
        import subprocess
        import sys

        script = Path(__file__).with_name("trl_real.py")
        steps = ["--steps", str(args.steps)] if args.steps else []
        steps += ["--threads", str(args.threads)] if args.threads else []
        raise SystemExit(subprocess.call([sys.executable, str(script), *steps, "--rounds", str(args.rounds), *rest]))
    args.steps = args.steps or 8
    import transformers
    import trl

    from corl.plugins import corl_version

    THREADS[0], COMPILE[0] = args.threads or 2, args.compile
    torch.set_num_threads(THREADS[0])
    print(f"corl {corl_version()}, TRL {trl.__version__}, transformers {transformers.__version__}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; zoo:llama-tiny, {PROMPTS} prompts x "
          f"{GENERATIONS} generations, <= {NEW_TOKENS} new tokens, GRPO, one update per step"
          f"{', both compiled' if args.compile else ''}")
    per_step = PROMPTS * GENERATIONS
    with tempfile.TemporaryDirectory() as tmp:
        run = corl_run(f"{tmp}/corl")
        model_dir = f"{tmp}/start"
        run.agents[0].agent.save(model_dir)  # both start from these weights
        times = {"corl": ([], []), "TRL": ([], [])}
        rounds = []
        for r in range(args.rounds):
            fresh = corl_run(f"{tmp}/corl{r}", seed=r)
            wall, cpu = time_corl(fresh, args.steps + 2, 1)
            trainer, timer = trl_trainer(model_dir, run, args.steps + 2, f"{tmp}/trl{r}", seed=r)
            trainer.train()
            for name, (w, c) in {"corl": (wall, cpu), "TRL": (timer.times, timer.cpu)}.items():
                times[name][0].extend(w[2:])
                times[name][1].extend(c[2:])
            rounds.append((statistics.median(wall[2:]), statistics.median(timer.times[2:])))
            print(f"round {r + 1}: corl {rounds[-1][0]:.3f} s/step, TRL {rounds[-1][1]:.3f} s/step (wall)")
        signal = same_signal(run, trainer)
    med = {name: (statistics.median(w), statistics.median(c)) for name, (w, c) in times.items()}
    print("\n| trainer | wall s/step (median) | completions trained / s | CPU s/step (median) |")
    print("|---|---|---|---|")
    for name, label in (("corl", "corl"), ("TRL", "TRL GRPOTrainer")):
        print(f"| {label} | {med[name][0]:.3f} | {per_step / med[name][0]:.0f} | {med[name][1]:.3f} |")
    ratios = ", ".join(f"{t / c:.2f}x" for c, t in rounds)
    print(f"\ncorl / TRL throughput: {med['TRL'][0] / med['corl'][0]:.2f}x wall (per round: {ratios}); "
          f"{med['TRL'][1] / med['corl'][1]:.2f}x in CPU time per step (less sensitive to a loaded machine)")
    print("\nsame learning signal on one fixed batch (same weights):")
    print("| advantages | corl loss | TRL loss | gradient cosine | relative gradient difference |")
    print("|---|---|---|---|---|")
    for label, (l1, l2, cos, rel) in signal.items():
        print(f"| {label} | {l1:.6e} | {l2:.6e} | {cos:.6f} | {rel:.1e} |")


if __name__ == "__main__":
    main()

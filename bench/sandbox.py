"""Sandbox throughput and what each layer costs: programs executed per second, by batch size, with
every layer, then with one layer left out at a time, side by side in one run.

    python bench/sandbox.py [--sizes 1,16,64,256] [--inputs 4] [--repeat 3] [--mode expression]

Each batch is one ``Sandbox.run`` call (one worker process, one forked child per program, which
becomes a fresh interpreter) of distinct programs, each run on ``--inputs`` inputs: expressions
of ``x`` (what the zoo models write) or ``def f(n)`` functions (what real models write). Prints
the median over ``--repeat`` runs; the batch of 1 is the latency of one program, the worker's
start included. The rows:

* ``all``: every layer this machine allows (:func:`corl.sandbox.isolation`);
* ``-<layer>``: the same without one child layer (``Sandbox(without=...)``);
* ``unshare``: the fallback without bubblewrap (``isolate="unshare"``: the worker builds its view);
* ``no bubblewrap``: the worker as a plain process (its view and the child's layers still on);
* ``rlimits only``: no outer layer, no view and no child layer but the rlimits (about what the
  sandbox was before issue 21, without its namespaces).

On a shared machine the figures move with its load; the configurations alternate within each
repeat so that they see the same load, and the load average is printed with each table. A
program that fails (a timeout on a loaded machine, say) is counted and reported under the table,
not fatal: its batch's time still counts.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
import warnings

from corl.sandbox import Program, Sandbox, isolation

CHILD_LAYERS = ("audit-hook", "seccomp", "uid", "private-tmp")


def programs(n: int, inputs: int, mode: str) -> list[Program]:
    xs = tuple(range(inputs)) if mode == "expression" else tuple((i,) for i in range(inputs))
    if mode == "expression":
        return [Program(f"{i % 19 + 1}*x+{i}", xs) for i in range(n)]
    return [Program(f"def f(n):\n    return sum(range(n)) + {i}", xs, mode="function") for i in range(n)]


def configurations() -> dict[str, Sandbox]:
    layers = isolation().layers
    found = {"all": Sandbox()}
    for layer in CHILD_LAYERS:
        if layer in layers:
            found[f"-{layer}"] = Sandbox(without=(layer,))
    if isolation("unshare").outer == "unshare":
        found["unshare"] = Sandbox(isolate="unshare")
    found["no bubblewrap"] = Sandbox(isolate=False)
    found["rlimits only"] = Sandbox(isolate=False, without=(*CHILD_LAYERS, "view"))
    return found


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64,256")
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", default="expression,function", help="expression, function or both")
    args = parser.parse_args()
    found = isolation()
    print(f"outer layer: {found.outer}; layers: {', '.join(found.layers)}; missing: {', '.join(found.missing) or '-'}")
    print(f"{os.cpu_count()} CPUs, {load()}; {args.inputs} inputs per program")
    sizes = [int(s) for s in args.sizes.split(",")]
    sandboxes = configurations()
    with warnings.catch_warnings():  # a configuration without a layer is expected to lack it
        warnings.simplefilter("ignore", RuntimeWarning)
        for sandbox in sandboxes.values():  # probe and warm up outside the timings
            sandbox.run(programs(2, args.inputs, "expression"))
    for mode in args.mode.split(","):
        before = load()
        times = {(name, size): [] for name in sandboxes for size in sizes}
        failed: dict[str, collections.Counter] = {name: collections.Counter() for name in sandboxes}
        for size in sizes:
            batch = programs(size, args.inputs, mode)
            for _ in range(args.repeat):
                for name, sandbox in sandboxes.items():
                    start = time.perf_counter()
                    results = sandbox.run(batch)
                    times[name, size].append(time.perf_counter() - start)
                    failed[name].update(o.error for row in results for o in row if not o.ok)
        print(f"\n{mode}: programs/s by batch size (ms for a batch of 1); {before} at the start, {load()} at the end")
        print(f"{'layers':<16}" + "".join(f"{size:>10}" for size in sizes))
        for name in sandboxes:
            cells = []
            for size in sizes:
                t = statistics.median(times[name, size])
                cells.append(f"{1000 * t:>8.0f}ms" if size == 1 else f"{size / t:>10.0f}")
            print(f"{name:<16}" + "".join(cells))
        for name, kinds in failed.items():
            if kinds:
                print(f"  {name}: {sum(kinds.values())} program inputs failed ("
                      + ", ".join(f"{kind} x{n}" for kind, n in kinds.most_common()) + ")")


if __name__ == "__main__":
    main()

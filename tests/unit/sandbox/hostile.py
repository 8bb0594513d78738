"""Running a hostile program between benign ones, and checking that nothing around it changed."""

import glob
import os
import tempfile
import textwrap

import pytest

from corl.sandbox import Limits, Outcome, Program, Sandbox, isolation

FAST = Limits(wall_seconds=1.0, cpu_seconds=1.0, memory_mb=256)
#: room for the benign programs around an attack on a loaded machine (FAST's second can pass before they start)
ROOMY = Limits(wall_seconds=4.0, cpu_seconds=2.0, memory_mb=256)
BENIGN = Program("x * 2 + 1", (1, 2))
#: a benign program still running while the hostile one starts (``parallel`` > 1 runs them side by side)
SLOW = Program("import time\ndef f(x):\n    time.sleep(0.4)\n    return x * 2 + 1", ((1,), (2,)), mode="function")


def _leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "corl-sandbox-*")))


def run_hostile(source: str, sandbox: Sandbox | None = None, *, before: Program = BENIGN) -> Outcome:
    """Run ``source`` (a function ``f(x)``) on one input between ``before`` and a benign program, and
    check that both of those still gave their own outputs and that the batch left no folder behind."""
    left = _leftovers()
    hostile = Program(textwrap.dedent(source), ((1,),), mode="function")
    first, result, after = (sandbox or Sandbox(FAST)).run([before, hostile, BENIGN])
    for benign in (first, after):  # the run went on around it, and nobody wrote their results
        assert [o.output or o.error for o in benign] == ["3", "5"], [o.output or o.error for o in benign]
    assert _leftovers() == left  # nothing the program wrote survives
    return result[0]


#: the outer layers a test can ask for, and what isolation() says for each: bubblewrap, the fallback
#: without it (unshare, the worker's own view), and a plain process (the worker's own view)
OUTERS = {"bubblewrap": (True, "bubblewrap"), "unshare": ("unshare", "unshare"), "plain": (False, "none")}


def sandbox_for(outer: str, limits: Limits = ROOMY, **options) -> Sandbox:
    """A sandbox with the ``outer`` layer of :data:`OUTERS`; the test is skipped where it does not start."""
    isolate, name = OUTERS[outer]
    if isolation(isolate).outer != name:
        pytest.skip(f"no {name} outer layer on this machine")
    return Sandbox(limits, isolate=isolate, **options)

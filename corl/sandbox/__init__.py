"""Run untrusted programs (model completions) on inputs, contained, many per process.

One call of :meth:`Sandbox.run` starts one worker process for the whole batch, inside the outer
layer (:mod:`corl.sandbox.outer`: bubblewrap's namespaces and read-only view where the machine has
it); the worker (:mod:`corl.sandbox.inside.worker`) forks one child per program, which puts its
own layers on (:mod:`corl.sandbox.inside.child`: a private tmpfs, a uid of its own, no
capabilities, rlimits, a seccomp filter, an audit hook) and runs the program on each input. A
child that crashes, loops, blows a limit or does something forbidden loses only its own inputs.

:func:`isolation` says which layers hold on this machine; what the sandbox does not protect
against is listed in docs/how-to/code-tasks.md.
"""

from .batch import RESOURCE_ERRORS, Limits, Outcome, Program, Sandbox
from .inside.values import canonical
from .outer import Isolation, isolation

__all__ = ["RESOURCE_ERRORS", "Isolation", "Limits", "Outcome", "Program", "Sandbox", "canonical", "isolation"]

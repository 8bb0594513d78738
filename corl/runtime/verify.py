"""A time bound on answer verification: a pathological answer must not hang a run."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Hashable, Sequence
from typing import Any

from corl.errors import PluginError
from corl.protocols import AnswerVerifier, BatchVerifier, traits
from corl.types import Prompt


def extract_all(verifier: AnswerVerifier, prompts: Sequence[Prompt],
                texts: Sequence[Sequence[str]]) -> list[list[Hashable | None]]:
    """Every completion's answer, ``answers[p][s]``: the one place the run extracts answers.

    A :class:`~corl.protocols.BatchVerifier` gets the whole batch at once (a code verifier runs all
    the programs in one sandbox call, on each prompt's ``test_inputs``); any other verifier is
    asked ``extract(text)`` per completion.
    """
    if isinstance(verifier, BatchVerifier):
        return [list(row) for row in verifier.extract_batch(prompts, texts)]
    return [[verifier.extract(t) for t in row] for row in texts]


class _Timeout(Exception):
    pass


def _raise_timeout(signum, frame):
    raise _Timeout


class BoundedVerifier:
    """Wraps a task's verifier: ``extract`` that runs past ``seconds`` gives no answer and
    ``equivalent`` gives False; both are counted in ``timeouts``.

    The bound uses a real-time interval timer and a SIGALRM handler installed for the duration of
    ``with verifier.armed():`` (the run arms it while it runs, in the main thread); outside that,
    calls run unbounded. Arming once keeps a bounded call at two cheap syscalls.
    """

    def __init__(self, inner: AnswerVerifier, seconds: float):
        self.inner, self.seconds, self.timeouts = inner, seconds, 0
        self._armed = False
        try:  # what the verifier declares (corl.protocols.VerifierTraits), read once
            self.bounded = traits("verifier", inner).bounded
        except TypeError as exc:
            raise PluginError(f"the task's verifier {type(inner).__name__}: {exc}") from None

    @contextlib.contextmanager
    def armed(self):
        if self.seconds <= 0 or threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
        self._armed = True
        try:
            yield self
        finally:
            self._armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _bounded(self, fn, default, *args) -> Any:
        if not self._armed or self.bounded:  # a verifier that is fast by construction
            return fn(*args)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            return fn(*args)
        except _Timeout:
            self.timeouts += 1
            return default
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def extract(self, text: str) -> Hashable | None:
        return self._bounded(self.inner.extract, None, text)

    def extract_batch(self, prompts: Sequence[Prompt], texts: Sequence[Sequence[str]]) -> list[list[Hashable | None]]:
        if isinstance(self.inner, BatchVerifier):  # bounds its own work (a sandbox has its own limits)
            return self.inner.extract_batch(prompts, texts)
        return [[self.extract(t) for t in row] for row in texts]

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        if a == b:  # the common case needs no timer
            return True
        return self._bounded(self.inner.equivalent, False, a, b)

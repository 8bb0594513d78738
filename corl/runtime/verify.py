"""A time bound on answer verification: a pathological answer must not hang a run, and a verifier
that hangs anyway must not outlive a Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from corl.errors import PluginError
from corl.protocols import AnswerVerifier, BatchVerifier
from corl.runtime.boundary import guard
from corl.traits import traits
from corl.types import Prompt

#: seconds a verifier call may go on after SIGINT / SIGTERM before it is abandoned
GRACE = 2.0


def extract_all(verifier: AnswerVerifier, prompts: Sequence[Prompt],
                texts: Sequence[Sequence[str]]) -> list[list[Hashable | None]]:
    """Every completion's answer, ``answers[p][s]``: the one place the run extracts answers.

    A :class:`~corl.protocols.BatchVerifier` gets the whole batch at once, with the prompts (a code
    verifier runs all the programs in one sandbox call, on each prompt's ``test_inputs``); any other
    verifier is asked ``extract(text)`` per completion.
    """
    if isinstance(verifier, BatchVerifier):
        return [list(row) for row in verifier.extract_batch(prompts, texts)]
    return [[verifier.extract(t) for t in row] for row in texts]


def check_answers(answers: Any, texts: Sequence[Sequence[str]], who: str) -> list[list[Hashable | None]]:
    """What a verifier extracted: one hashable answer (or None) per completion. Votes are grouped by
    answer, so an unhashable one is the verifier's mistake, named here rather than in the vote."""
    if not isinstance(answers, Sequence) or len(answers) != len(texts) or any(
            not isinstance(row, Sequence) or len(row) != len(t) for row, t in zip(answers, texts)):
        raise PluginError(f"{who} returned answers that are not one per completion ({len(texts)} prompts x "
                          f"{len(texts[0]) if texts else 0} samples)")
    for p, row in enumerate(answers):
        for s, answer in enumerate(row):
            try:
                hash(answer)
            except TypeError:
                raise PluginError(f"{who} extracted an answer of type {type(answer).__name__} (prompt {p}, sample "
                                  f"{s}); answers must be hashable (a str, a number, a tuple, ...) or None") from None
    return [list(row) for row in answers]


class _Timeout(BaseException):  # (not an Exception: guard() lets it pass)
    pass


class _Abandon(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class BoundedVerifier:
    """Wraps a task's verifier: ``extract`` that runs past ``seconds`` gives no answer and
    ``equivalent`` gives False; a batch (:class:`~corl.protocols.BatchVerifier`) that runs past
    ``seconds`` per completion gives no answers. All are counted in ``timeouts``. A verifier that
    declares ``bounded = True`` (a sandbox with its own limits) runs without the bound.

    The bound uses a real-time interval timer and a SIGALRM handler installed for the duration of
    ``with verifier.armed():`` (the run arms it while it runs, in the main thread); outside that,
    calls run unbounded. Arming once keeps a bounded call at two cheap syscalls. While armed, a
    SIGINT or SIGTERM that arrives during a verifier call, bounded or not, gives the call
    :data:`GRACE` seconds to return; one that does not is abandoned and ``abandon(signum)`` (the
    run's) says what to raise instead. Whoever calls it (the run, an aggregator grouping votes, a
    router), an exception the verifier raises is one line naming it (``who``) and when (``when()``,
    the run's phase), never its caller.
    """

    def __init__(self, inner: AnswerVerifier, seconds: float,
                 abandon: Callable[[int], BaseException] | None = None, who: str = "the task's verifier",
                 when: Callable[[], str] = str):
        self.inner, self.seconds, self.timeouts, self.who, self.when = inner, seconds, 0, who, when
        self.abandon = abandon or (lambda signum: KeyboardInterrupt())
        self._armed = False
        self._in_call = False
        self._signalled: int | None = None
        try:  # what the verifier declares (corl.traits.VerifierTraits), read once
            self.bounded = traits("verifier", inner).bounded
        except TypeError as exc:
            raise PluginError(f"the task's verifier {type(inner).__name__}: {exc}") from None

    @contextlib.contextmanager
    def armed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM)}

        def on_alarm(signum, frame):
            if self._signalled is not None:
                raise _Abandon(self._signalled)
            raise _Timeout

        def on_stop(signum, frame):
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)  # the run's: ask for a stop, say so
            elif handler == signal.SIG_IGN:
                return
            elif signum == signal.SIGINT:  # no handler of the run's (a verifier armed by hand): as Python does
                raise KeyboardInterrupt
            else:  # SIGTERM's default: end the process, as it would have
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            if not self._in_call:
                return
            if self._signalled is not None:  # asked twice: stop now
                raise _Abandon(signum)
            self._signalled = signum
            remaining = signal.getitimer(signal.ITIMER_REAL)[0]
            if not remaining or remaining > GRACE:
                signal.setitimer(signal.ITIMER_REAL, GRACE)

        signal.signal(signal.SIGALRM, on_alarm)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGTERM, on_stop)
        self._armed = True
        try:
            yield self
        finally:
            self._armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _bounded(self, fn, seconds: float, *args) -> Any:
        """``fn(*args)``, or :data:`_TIMED_OUT` when it ran past ``seconds`` (counted by the caller)."""
        if not self._armed:
            with guard(self.who, self.when()):
                return fn(*args)
        timed = seconds > 0 and not self.bounded  # a verifier fast by construction needs no timer
        self._in_call, self._signalled = True, None
        if timed:
            signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            with guard(self.who, self.when()):
                return fn(*args)
        except _Timeout:
            return _TIMED_OUT
        except _Abandon as stop:
            raise self.abandon(stop.signum) from None
        finally:
            self._in_call = False
            if timed or self._signalled is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)

    def _count(self, result: Any, default: Any, n: int = 1) -> Any:
        if result is _TIMED_OUT:
            self.timeouts += n
            return default
        return result

    def extract(self, text: str) -> Hashable | None:
        return self._count(self._bounded(self.inner.extract, self.seconds, text), None)

    def extract_batch(self, prompts: Sequence[Prompt], texts: Sequence[Sequence[str]]) -> list[list[Hashable | None]]:
        if not isinstance(self.inner, BatchVerifier):
            return [[self.extract(t) for t in row] for row in texts]
        count = sum(len(row) for row in texts)  # the bound of each completion, for the whole batch
        answers = self._bounded(self.inner.extract_batch, self.seconds * count, prompts, texts)
        return self._count(answers, [[None] * len(row) for row in texts], count)

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        if a == b:  # the common case needs no timer
            return True
        return self._count(self._bounded(self.inner.equivalent, self.seconds, a, b), False)


_TIMED_OUT = object()

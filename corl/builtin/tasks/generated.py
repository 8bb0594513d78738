"""The base of a generated task: one whose seed / train / eval splits a generator draws from its
config alone (sized by ``seed_size`` / ``train_size`` / ``eval_size``, :class:`~.splits.SizedSplits`).

A new generated task is its config class, its generator and a few lines::

    class CountdownTask(GeneratedTask):
        name, Config, help = "countdown", CountdownConfig, "count down from n; exact integer answers"
        verifier = IntegerVerifier()

        def make_splits(self, config):
            return cut_pool(config, problems(config), lambda id, p: Prompt(id=id, text=p[0], label=p[1]))


    @hookimpl
    def corl_register_components(registry: RegistryView) -> None:
        CountdownTask.register(registry)

:class:`GeneratedTask` holds the rest: the splits, the ``missing_split`` trait (a split of size 0
holds nothing) and the ``generates_data`` trait (``corl data generate NAME OUT`` writes the splits
as files the ``jsonl`` task reads back; a task whose prompts carry what a data file cannot, such as
the code tasks' test inputs, sets it False).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from corl.builtin.tasks.splits import Splits, missing_sized_split
from corl.context import Context, RegistryView
from corl.types import Prompt


class GeneratedTask:
    """A task built from ``Config`` alone: ``make_verifier`` (the class's ``verifier`` unless
    overridden) runs first, so a verifier that refuses its config does so before any problem is
    drawn; then ``make_splits`` draws the splits (:func:`~.splits.cut_pool` or
    :func:`~.splits.drawn_splits`)."""

    name: ClassVar[str]  # the task's recipe name (task.type)
    Config: ClassVar[type]  # its attrs config class (its recipe keys)
    help: ClassVar[str] = ""  # one line for `corl plugins` and the recipe reference
    verifier: Any

    missing_split = staticmethod(missing_sized_split)  # traits (corl.traits.TaskTraits)
    generates_data: ClassVar[bool] = True

    def __init__(self, config: Any, ctx: Context | None = None):
        self.config = config
        self.verifier = self.make_verifier(config)
        self._splits = self.make_splits(config)

    def make_verifier(self, config: Any) -> Any:
        return self.verifier

    def make_splits(self, config: Any) -> Splits:
        raise NotImplementedError(f"{type(self).__name__} draws no splits: define make_splits(config)")

    def split(self, name: str) -> tuple[Prompt, ...]:
        return self._splits[name]

    @classmethod
    def register(cls, registry: RegistryView) -> None:
        """Add the task to ``registry`` (a module's ``corl_register_components``)."""
        registry.add("task", cls.name, cls, cls.Config, help=cls.help)


def instructed(id: str, problem: tuple[str, Hashable], instruction: str) -> Prompt:
    """A free-text problem ``(text, answer)`` as a prompt: ``instruction`` appended to the text (when
    there is one), the answer as text its label (the ``word_problems`` and ``drills`` prompts)."""
    text, answer = problem
    return Prompt(id=id, text=f"{text} {instruction}" if instruction else text, label=str(answer))

"""One base for every generated task (corl.builtin.tasks.generated): a new one is its config, its
generator and a few lines; the built-in ones all use it."""

import attrs
import pytest

from corl.builtin.tasks import addition, arithmetic, code_tasks, drills, shapes, word_problems
from corl.builtin.tasks.generated import GeneratedTask, instructed
from corl.builtin.tasks.splits import cut_pool, missing_sized_split
from corl.builtin.tasks.verifiers import IntegerVerifier
from corl.registry import Registry
from corl.types import Prompt


@attrs.frozen
class CountdownConfig:
    seed_size: int = 2
    train_size: int = 3
    eval_size: int = 0
    seed: int = 1


class CountdownTask(GeneratedTask):
    name, Config, help = "countdown", CountdownConfig, "what comes before n"
    verifier = IntegerVerifier()

    def make_splits(self, config):
        return cut_pool(config, range(10, 0, -1), lambda id, n: Prompt(id=id, text=f"{n}-1=", label=n - 1))


def test_a_new_generated_task_is_its_generator_and_a_few_lines():
    registry = Registry()
    CountdownTask.register(registry)
    component = registry.get("task", "countdown")
    assert (component.factory, component.config_cls, component.help) == (CountdownTask, CountdownConfig, "what comes before n")
    assert component.traits.missing_split is missing_sized_split and component.traits.generates_data
    task = component.factory(CountdownConfig(), None)
    assert [(p.id, p.text, p.label) for p in task.split("train")] == [("train-0", "8-1=", 7), ("train-1", "7-1=", 6),
                                                                     ("train-2", "6-1=", 5)]
    assert task.split("eval") == () and task.verifier is CountdownTask.verifier and task.config == CountdownConfig()


def test_a_task_without_a_generator_says_what_to_define():
    class Half(GeneratedTask):
        verifier = IntegerVerifier()

    with pytest.raises(NotImplementedError, match="Half draws no splits: define make_splits"):
        Half(CountdownConfig())


TASKS = (addition.AdditionTask, arithmetic.ArithmeticTask, word_problems.WordProblemsTask, drills.DrillsTask,
         shapes.ShapesTask, code_tasks.ExpressionsTask, code_tasks.PythonFunctionsTask)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_built_in_generated_task_uses_the_base(task):
    assert issubclass(task, GeneratedTask) and "split" not in vars(task) and "__init__" not in vars(task)
    # a data file holds no test inputs: only the code tasks' splits cannot be written as data
    assert task.generates_data is (task not in (code_tasks.ExpressionsTask, code_tasks.PythonFunctionsTask))


def test_instructed_appends_the_instruction_and_makes_the_label_text():
    assert instructed("eval-3", ("What is 2 + 2?", 4), "End with 'Answer: <number>'.") == Prompt(
        id="eval-3", text="What is 2 + 2? End with 'Answer: <number>'.", label="4")
    assert instructed("seed-0", ("What is 2 + 2?", 4), "").text == "What is 2 + 2?"

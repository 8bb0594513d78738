"""A run built in Python with component objects (``corl.run(..., router=obj)``) records them as
such, and continues only from Python with objects of the same classes: the command line refuses
it in one line, writing nothing."""

import json
import logging
import os
import subprocess
import sys

import pytest

import corl
from corl.builtin.topology import RingRouter, SelfRouter
from corl.builtin.voting import MajorityConfig, MajorityVote
from corl.errors import CorlError
from corl.testing import fake_recipe, write_recipe
from corl.types import NoConfig

#: the kit's fake agents as an installed plugin distribution, so that the command line can load them too
FAKES = '''
import corl
from corl.testing.fakes import FakePlugin

_fakes = FakePlugin()


@corl.hookimpl
def corl_register_components(registry):
    _fakes.corl_register_components(registry)
'''

#: three fake agents in a ring, for `corl run RECIPE` (written with write_recipe)
RECIPE = fake_recipe(**{"run.steps": 2, "run.checkpoint_every": 1})


class Vote(MajorityVote):
    """An aggregator built in code."""

    def __init__(self):
        super().__init__(MajorityConfig(tie_break="none"))


class OtherVote(Vote):
    """Another class of aggregator."""


class Router(RingRouter):
    """A router built in code."""

    def __init__(self):
        super().__init__(NoConfig())


@pytest.fixture
def fakes(installed_plugin):
    """The fake agents, found through an entry point here and in a `corl` subprocess."""
    return installed_plugin("corl-fakes", FAKES)


@pytest.fixture
def embedded(tmp_path, fakes):
    """A finished embedded run of 2 steps, checkpointed after each, and its recipe file."""
    write_recipe(tmp_path / "tiny.toml", RECIPE)
    out = tmp_path / "run"
    corl.run(str(tmp_path / "tiny.toml"), [f"run.output_dir={out}"], aggregator=Vote(), router=Router())
    return out


def corl_cli(fakes, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "corl.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def files(out):
    """What a run left in ``out`` (the lock file, rewritten by every process that takes it, aside)."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.rglob("*")) if p.name != ".corl.lock"}


def test_the_objects_are_recorded_instead_of_the_recipes_defaults(embedded):
    recipe = json.loads((embedded / "recipe.json").read_text())
    here = __name__
    assert recipe["voting"] == {"n_votes": 8, "n_train": 8, "object": "Vote", "import": f"{here}:Vote"}
    assert recipe["topology"] == {"object": "Router", "import": f"{here}:Router"}
    assert recipe["task"]["type"] == "arithmetic"  # not handed in: the recipe's own
    state = json.loads((embedded / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["recipe"]["topology"] == recipe["topology"]


@pytest.mark.parametrize("how", ["run dir", "recipe", "recipe --force"])
def test_the_command_line_refuses_to_resume_it_in_one_line_and_writes_nothing(embedded, fakes, how):
    before = files(embedded)
    if how == "run dir":
        res = corl_cli(fakes, "run", str(embedded), "--resume", "--set", "run.steps=4")
    else:
        res = corl_cli(fakes, "run", str(embedded.parent / "tiny.toml"), "--resume", "--set", "run.steps=4",
                       "--set", f"run.output_dir={embedded}", *(["--force"] if "force" in how else []))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corl: error: "), res.stderr
    assert (f"the run in {embedded} was built in Python with aggregator= object Vote ({__name__}:Vote) and "
            f"router= object Router ({__name__}:Router), which a recipe cannot name; resume it from Python with the "
            f"same objects: corl.run('{embedded}', resume=True, aggregator=Vote(...), router=Router(...))") in lines[0]
    assert files(embedded) == before


def test_python_resumes_it_with_objects_of_the_same_classes_only(embedded, caplog):
    with pytest.raises(CorlError, match=r"built in Python with aggregator= object Vote .*resume it from Python with "
                                        r"the same objects"):
        corl.run(str(embedded), ["run.steps=4"], aggregator=OtherVote(), router=Router(), resume=True)
    with pytest.raises(CorlError, match="aggregator=Vote"):  # the router alone is not the run
        corl.run(str(embedded), ["run.steps=4"], router=Router(), resume=True)
    with caplog.at_level(logging.INFO, logger="corl"):
        summary = corl.run(str(embedded), ["run.steps=4"], aggregator=Vote(), router=Router(), resume=True)
    assert summary["steps"] == 4
    assert any(f"resuming from {embedded / 'checkpoints' / 'step-000002'} (step 2)" in r.getMessage()
               for r in caplog.records)


class Alone(SelfRouter):
    """A one-agent router built in code."""

    def __init__(self):
        super().__init__(NoConfig())


def test_python_resumes_from_the_run_dir_whatever_the_recipes_default_router_would_say(tmp_path, fakes):
    out = tmp_path / "one"
    corl.run(fake_recipe(agents=1, **{"run.steps": 1, "run.checkpoint_every": 1}), [f"run.output_dir={out}"],
             router=Alone())
    # recipe.json's topology is the object; the default router (a ring of >= 2 agents) never applies to it
    assert corl.run(str(out), ["run.steps=2"], router=Alone(), resume=True)["steps"] == 2


def test_a_run_built_from_the_recipe_alone_is_not_that_run(tmp_path, fakes):
    """The objects' records are what differs: a command-line run in the same folder resumes as before."""
    write_recipe(tmp_path / "tiny.toml", RECIPE)
    out = tmp_path / "plain"
    assert corl_cli(fakes, "run", str(tmp_path / "tiny.toml"), "--set", f"run.output_dir={out}").returncode == 0
    assert "object" not in json.loads((out / "recipe.json").read_text())["topology"]
    res = corl_cli(fakes, "run", str(out), "--resume", "--set", "run.steps=3")
    assert res.returncode == 0, res.stderr


def test_corl_run_takes_a_shipped_recipes_name(tmp_path, cache_dir):
    from tests.kit import TINY

    summary = corl.run("three_agent_ring", [*TINY, "run.steps=1", "eval.size=0", "run.observers=[]",
                                            f"run.output_dir={tmp_path}"])
    assert summary["name"] == "three_agent_ring" and summary["steps"] == 1
    recipe = json.loads((tmp_path / "recipe.json").read_text())
    assert [a["name"] for a in recipe["agents"]] == ["llama", "qwen2", "neox"]


def test_corl_run_and_load_recipe_have_real_signatures():
    import inspect

    from corl.recipe import load_recipe
    from corl.runtime import run

    for public, host in ((corl.run, run), (corl.load_recipe, load_recipe)):
        ours, theirs = inspect.signature(public), inspect.signature(host)
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
               [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
        assert all(p.kind is not p.VAR_KEYWORD for p in ours.parameters.values())
    assert {"task", "aggregator", "router", "plugins", "resume", "force"} <= set(inspect.signature(corl.run).parameters)
    with pytest.raises(TypeError, match="unexpected keyword argument 'optimiser'"):
        corl.run({}, optimiser=object())
    assert "``resume``" in corl.run.__doc__ and "``objects``" in load_recipe.__doc__  # each argument documented


class Warm(RingRouter):
    """A ring with a setting of its own, as an embedding program writes one."""

    def __init__(self, warmup=3):
        super().__init__(NoConfig())
        self.warmup = warmup


def test_python_resume_compares_the_objects_settings_not_only_their_classes(tmp_path, fakes):
    """(Before: any object of the same class resumed the run, whatever its settings.)"""
    out = tmp_path / "warm"
    recipe = fake_recipe(**{"run.steps": 1, "run.checkpoint_every": 1})
    corl.run(recipe, [f"run.output_dir={out}"], router=Warm(warmup=3))
    with pytest.raises(CorlError, match=r"the recipe changed since this checkpoint \(router= object Warm: warmup: 3 -> 5\)"
                                        r"; resume with the same recipe and objects of the same settings, or pass "
                                        r"force=True") as refused:
        corl.run(str(out), ["run.steps=2"], router=Warm(warmup=5), resume=True)
    assert "\n" not in str(refused.value)
    assert corl.run(str(out), ["run.steps=2"], router=Warm(warmup=3), resume=True)["steps"] == 2


def test_a_table_an_object_replaces_is_not_looked_up_in_the_registry(tmp_path, fakes):
    """(Before: task=obj still required the recipe's [task] to name a registered task.)"""
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

    recipe = fake_recipe(**{"run.steps": 1, "task": {"type": "countdown", "size": 3},
                            "voting": {"type": "tournament", "n_votes": 8, "n_train": 8},
                            "topology": {"type": "elo"}})
    task = ArithmeticTask(ArithmeticConfig(seed_size=0, train_size=64, eval_size=32))
    summary = corl.run(recipe, [f"run.output_dir={tmp_path}"], task=task, aggregator=Vote(), router=Router())
    assert summary["steps"] == 1
    with pytest.raises(corl.ConfigError, match=r"task.type: unknown task 'countdown'"):
        corl.run(recipe, [f"run.output_dir={tmp_path / 'b'}"], aggregator=Vote(), router=Router())

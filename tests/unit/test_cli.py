"""The commands ask an agent's type about its model (AgentTraits describe / model_key), never read an
hf config key: `corl validate`, `corl eval` work on agent types of plugins that name no model."""

import json

import pytest

import corl
from corl.cli import main
from corl.errors import CorlError
from corl.testing import run_tiny

#: the kit's fake agents (no `model` key) and a plugin agent that describes its model, as an installed plugin
AGENTS = '''
import attrs
import corl
from corl.traits import ModelFacts
from corl.testing.fakes import FakeAgent, FakeAgentConfig, FakePlugin

_fakes = FakePlugin()
registrations = []


@attrs.frozen
class RemoteConfig(FakeAgentConfig):
    endpoint: str = "http://localhost:8000"
    device: str = "cpu"


def remote(config, ctx):
    return FakeAgent(FakeAgentConfig(accuracy=config.accuracy), ctx)


remote.describe = lambda config: ModelFacts(model=f"api:{config.endpoint}", device=config.device)


@corl.hookimpl
def corl_register_components(registry):
    registrations.append(1)
    _fakes.corl_register_components(registry)
    registry.add("agent", "remote", remote, RemoteConfig, help="a fake agent that names where its model is served")
'''

RECIPE = """
[run]
name = "plugin_agents"
steps = 1
prompts_per_step = 8
observers = []
threads = 1

[task]
type = "arithmetic"
seed_size = 0
train_size = 16
eval_size = 8

[[agents]]
name = "fake0"
type = "fake"
sampler = { type = "fake" }
optimizer = { type = "fake" }

[[agents]]
name = "far"
type = "remote"
endpoint = "http://gpu-box:8000"
sampler = { type = "fake" }
optimizer = { type = "fake" }

[voting]
n_votes = 4
n_train = 4

[eval]
size = 8
k = 2
"""


@pytest.fixture
def plugin_agents(installed_plugin, tmp_path):
    installed_plugin("corl-plugin-agents", AGENTS)
    import corl_plugin_agents

    corl_plugin_agents.registrations.clear()
    (tmp_path / "agents.toml").write_text(RECIPE)
    return tmp_path / "agents.toml", corl_plugin_agents.registrations


def test_validate_shows_agents_whose_type_names_no_model(plugin_agents, capsys):
    recipe, registrations = plugin_agents
    assert main(["validate", str(recipe)]) == 0
    out = capsys.readouterr().out
    # the fake agent declares nothing: its type; the plugin agent describes its model
    assert "2 agents [fake0 (fake, fake), far (api:http://gpu-box:8000, fake)]" in out
    assert len(registrations) == 1  # one registry for the whole command


def test_validate_shows_an_hf_agents_model(capsys):
    from tests.kit import ROOT

    assert main(["validate", str(ROOT / "recipes" / "three_agent_ring.toml")]) == 0
    assert "3 agents [llama (zoo:llama-add3, grpo), qwen2 (zoo:qwen2-add3, grpo)" in capsys.readouterr().out


def test_a_run_builds_its_registry_once(tmp_path):
    class Counting:
        calls = 0

        @corl.hookimpl
        def corl_register_components(self, registry):
            Counting.calls += 1

    run_tiny(tmp_path / "run", plugins=[Counting()])
    assert Counting.calls == 1


def test_a_run_places_its_agents_where_their_type_says(plugin_agents, monkeypatch):
    from corl.runtime import Run, distributed, prepare

    recipe, _ = plugin_agents
    placed = {}

    def layout_for(spec, env=None, *, devices=None):
        placed.update(devices)
        return distributed.Local(spec)

    monkeypatch.setattr(distributed, "layout_for", layout_for)
    pm, spec = prepare(str(recipe), ["agents[1].device=cuda:1"])
    Run(spec, pm=pm)
    assert placed == {"fake0": "cpu", "far": "cuda:1"}  # the fake agent declares nothing: the CPU


def test_eval_of_a_run_of_agents_that_name_no_model(plugin_agents, tmp_path, capsys):
    recipe, _ = plugin_agents
    out = tmp_path / "run"
    assert main(["run", str(recipe), "--set", f"run.output_dir={out}"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--json", "--size", "4", "--k", "2"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["models"] == {"fake0": "fake", "far": "api:http://gpu-box:8000"}
    assert settings["samplers"] == {"fake0": {"type": "fake"}, "far": {"type": "fake"}}
    with pytest.raises(CorlError, match=r"--model: agent type 'fake' names no model to replace"):
        from corl.cli import parser
        from corl.tools.inspect import _build_for_inspection

        _build_for_inspection(parser().parse_args(["eval", str(recipe), "--model", "x=somewhere"]), [])


def test_a_mistyped_local_model_path_is_no_such_folder(capsys):
    path = "runs/nope/checkpoints/final/llama"
    assert main(["eval", "three_agent_ring", "--model", f"tuned={path}"]) == 2
    assert capsys.readouterr().err.strip() == f"corl: error: --model tuned={path}: no such folder: {path}"


def test_every_subcommand_shows_examples_that_parse():
    import shlex

    from corl.cli import SUBCOMMANDS, parser

    sub = next(a for a in parser()._actions if isinstance(a.choices, dict))
    assert len(sub.choices) == len(SUBCOMMANDS)
    for name, sp in sub.choices.items():
        examples = [line.strip() for line in (sp.epilog or "").splitlines()[1:]]
        assert examples, f"corl {name} --help shows no example"
        for example in examples:
            argv = shlex.split(example.split(">")[0])[1:]
            assert argv[0] == name and parser().parse_args(argv).fn is sp.get_default("fn"), example

import os
import subprocess
import sys

import attrs
import pytest

from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import apply_overrides, load_recipe, to_dict
from tests.kit import ROOT, base_recipe


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


def errors(registry, data, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_recipe(data, list(overrides), registry=registry)
    return info.value.problems


def with_(**changes):
    data = base_recipe()
    for key, value in changes.items():
        apply_overrides(data, [f"{key}={value}"])
    return data


def test_valid_recipe_fills_defaults(registry):
    spec = load_recipe(base_recipe(), registry=registry)
    assert spec.agent_names() == ["a", "b"]
    assert spec.agents[0].sampler.type == "hf" and spec.agents[0].optimizer.type == "grpo"
    assert spec.voting.aggregator.type == "majority" and spec.voting.n_train == 4
    assert to_dict(spec)["agents"][1]["optimizer"]["lr"] == 2e-5


def test_unknown_key_names_its_path_and_the_valid_keys(registry):
    [msg] = errors(registry, with_(**{"agents[1].sampler.temprature": 0.5}))
    assert msg.startswith("<recipe>: agents[1].sampler.temprature: unknown key; valid keys here:")
    assert "temperature" in msg and "\n" not in msg


def test_wrong_type(registry):
    [msg] = errors(registry, with_(**{"agents[0].sampler.temperature": '"hot"'}))
    assert msg == "<recipe>: agents[0].sampler.temperature: expected a number, got 'hot'"
    [msg] = errors(registry, with_(**{"run.steps": 1.5}))
    assert msg == "<recipe>: run.steps: expected an integer, got 1.5"
    [msg] = errors(registry, with_(**{"run.steps": "true"}))
    assert "run.steps: expected an integer, got True" in msg


def test_validator_bounds(registry):
    [msg] = errors(registry, with_(**{"agents[0].sampler.top_p": 1.5}))
    assert msg == "<recipe>: agents[0].sampler.top_p: invalid value 1.5: must be <= 1"


def test_unknown_component_lists_the_available_ones(registry):
    [msg] = errors(registry, with_(**{"agents[1].sampler.type": '"vllm"'}))
    assert "agents[1].sampler.type: unknown sampler 'vllm'; available: hf" in msg
    [msg] = errors(registry, with_(**{"topology.type": '"star"'}))
    assert "available: all_pairs, ground_truth, judge, ring, self" in msg


def test_literal_choices(registry):
    [msg] = errors(registry, with_(**{"voting.tie_break": '"smallest"'}))
    assert msg == "<recipe>: voting.tie_break: invalid value 'smallest'; valid: 'random', 'none'"


def test_impossible_combinations(registry):
    [msg] = errors(registry, with_(**{"voting.n_train": 16}))
    assert msg.startswith("<recipe>: voting.n_train: invalid value 16: must be <= voting.n_votes (8)")
    one = with_()
    one["agents"] = one["agents"][:1]
    [msg] = errors(registry, one)
    assert "topology.type: 'ring' needs at least 2 agents, the recipe has 1" in msg
    dup = with_(**{"agents[1].name": '"a"'})
    [msg] = errors(registry, dup)
    assert "agents[1].name: duplicate agent name 'a' (also agents[0])" in msg
    [msg] = errors(registry, with_(**{"topology.type": '"ground_truth"'}))
    assert "declare it with run.supervised = true" in msg
    [msg] = errors(registry, with_(**{"run.supervised": "true"}))
    assert "run.supervised: true, but topology 'ring' is label-free" in msg


def test_every_mistake_is_reported_at_once(registry):
    problems = errors(registry, with_(**{"run.stepz": 1, "agents[0].optimizer.lr": -1, "eval.k": 0}))
    assert len(problems) == 3
    assert any(p.startswith("<recipe>: run.stepz") for p in problems)
    assert any("agents[0].optimizer.lr: invalid value -1.0: must be > 0" in p for p in problems)


def test_missing_required_and_unknown_section(registry):
    data = with_()
    del data["agents"][0]["model"]
    data["trainer"] = {}
    problems = errors(registry, data)
    assert "<recipe>: agents[0].model: missing required key" in problems
    assert any(p.startswith("<recipe>: trainer: unknown section") for p in problems)


def test_overrides(registry):
    spec = load_recipe(base_recipe(), ["agents[1].sampler.temperature=0.5", "run.name=x", "voting.type=weighted",
                              "voting.weight=self_consistency", "run.observers=['jsonl']"], registry=registry)
    assert spec.agents[1].sampler.config.temperature == 0.5
    assert spec.run.name == "x" and spec.run.observers == ("jsonl",)
    assert spec.voting.aggregator.config.weight == "self_consistency"
    with pytest.raises(ConfigError, match=r"--set agents\[5\].name: agents\[5\] does not exist"):
        load_recipe(base_recipe(), ["agents[5].name=z"], registry=registry)
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        load_recipe(base_recipe(), ["run.steps"], registry=registry)


def test_recipe_file_errors(registry, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nsteps = 1")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_recipe(bad, registry=registry)
    with pytest.raises(ConfigError, match="no such recipe file"):
        load_recipe(tmp_path / "missing.toml", registry=registry)


def cli(*args):
    # only the built-ins, so messages that list components do not depend on what else is installed
    return subprocess.run([sys.executable, "-m", "corl.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "CORL_DISABLE_PLUGIN_AUTOLOAD": "1"})


def test_cli_validate_reports_one_line_per_problem_exit_2_no_traceback():
    out = cli("validate", "recipes/three_agent_ring.toml", "--set", "agents[1].sampler.type=vlm",
              "--set", "voting.n_train=99")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [
        "corl: error: recipes/three_agent_ring.toml: voting.n_train: invalid value 99: must be <= voting.n_votes (16); "
        "trained samples are a subset of the voting ones",
        "corl: error: recipes/three_agent_ring.toml: agents[1].sampler.type: unknown sampler 'vlm'; available: hf, hf_static, hf_vision "
        "(is the plugin package installed? see `corl plugins`)",
    ]


def test_cli_validate_ok_and_does_not_import_torch():
    out = cli("validate", "recipes/three_agent_ring.toml")
    assert out.returncode == 0, out.stderr
    assert "ok: 3 agents" in out.stdout
    # with data files read too: jsonl, chat messages, parquet (verl's layout)
    code = ("import sys; from corl.cli import main; main(['validate', 'recipes/three_agent_ring.toml']); "
            "assert main(['validate', 'recipes/data_file.toml']) == 0; "
            "assert main(['validate', 'recipes/data_file.toml', '--set', 'task.train=../data/verl_sample.parquet', "
            "'--set', 'task.prompt_field=prompt', '--set', 'task.answer_field=reward_model.ground_truth', "
            "'--set', 'task.eval=../data/chat_sample.jsonl', '--set', 'task.seed=../data/chat_sample.jsonl', "
            "'--set', 'task.answers=math', '--set', 'task.template={prompt}']) == 2; "
            "assert 'torch' not in sys.modules, 'validate imported torch'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_reference_doc_is_generated_from_the_config_classes(registry):
    from corl.tools.reference import render

    assert (ROOT / "docs" / "reference" / "recipe-keys.md").read_text() == render(registry), "regenerate: corl recipes keys > docs/reference/recipe-keys.md"


def test_import_paths_are_refused_unless_enabled(registry, monkeypatch):
    data = with_(**{"voting.type": '"corl.builtin.voting:MajorityVote"'})
    [msg] = errors(registry, data)
    assert msg == ("<recipe>: voting.type: 'corl.builtin.voting:MajorityVote' is an import path; recipes name "
                   "registered components only (see `corl plugins`), or set CORL_ALLOW_IMPORT_PATHS=1 to allow import paths")
    monkeypatch.setenv("CORL_ALLOW_IMPORT_PATHS", "1")
    spec = load_recipe(data, registry=registry)
    from corl.builtin.voting import MajorityVote

    assert spec.voting.aggregator.factory is MajorityVote
    [msg] = errors(registry, with_(**{"voting.type": '"corl.nothing_here:X"'}))
    assert "voting.type: cannot import 'corl.nothing_here:X'" in msg


def test_odd_keys_stay_on_one_line(registry):
    data = with_()
    data["run"]["two\nlines"] = 1
    [msg] = errors(registry, data)
    assert msg.startswith('<recipe>: run."two\\nlines": unknown key') and "\n" not in msg


def test_model_paths_are_checked_before_anything_loads(registry, tmp_path):
    [msg] = errors(registry, with_(**{"agents[0].model": f'"{tmp_path / "nope"}"'}))
    assert msg == f"<recipe>: agents[0].model: invalid value '{tmp_path / 'nope'}': no such folder"
    [msg] = errors(registry, with_(**{"agents[0].model": f'"{tmp_path}"'}))
    assert "not a Hugging Face model folder (no config.json)" in msg
    [msg] = errors(registry, with_(**{"agents[0].model": '"zoo:llama"'}))
    assert ("unknown zoo model; available zoo:llama-add3, zoo:qwen2-add3, zoo:neox-add3, zoo:llama-add3-weak, "
            "zoo:qwen2-add3-weak, zoo:neox-add3-weak, zoo:qwen2-add3-strong, zoo:llama-tiny") in msg


def test_a_bad_recipe_leaves_no_run_dir(tmp_path):
    out = tmp_path / "run"
    res = cli("run", "recipes/three_agent_ring.toml", "--set", f"run.output_dir={out}", "--set", "eval.k=0")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().endswith("eval.k: invalid value 0: must be >= 1")
    assert not out.exists()


def test_judge_and_frozen_agents(registry):
    data = with_(**{"topology.type": '"judge"', "topology.judge": '"b"', "agents[1].frozen": "true"})
    spec = load_recipe(data, registry=registry)
    assert [a.frozen for a in spec.agents] == [False, True] and spec.topology.config.judge == "b"
    [msg] = errors(registry, with_(**{"topology.type": '"judge"', "topology.judge": '"z"'}))
    assert msg == "<recipe>: topology: judge 'z' is not an agent; agents: a, b"
    [msg] = errors(registry, with_(**{"agents[0].frozen": "true", "agents[1].frozen": "true"}))
    assert msg == "<recipe>: agents: every agent is frozen: nothing would train"


def test_output_dir_placeholders(registry):
    [msg] = errors(registry, with_(**{"run.output_dir": '"runs/{x}"'}))
    assert msg == ("<recipe>: run.output_dir: invalid value 'runs/{x}': the only placeholder allowed is {name}; "
                   "write {{ and }} for braces")


@pytest.mark.parametrize("name", ["", " ", "..", ".", "a/b", "../up", "a\\b"])
def test_a_run_name_is_one_folder_name(registry, name):
    """An empty name wrote into runs/ itself; '/' and '..' reach outside runs/{name}."""
    [msg] = errors(registry, base_recipe(), [f"run.name={name!r}".replace("'", '"')])
    assert msg.startswith(f"<recipe>: run.name: invalid value {name!r}: a run name is one folder name (not empty, "
                          "no '/' or")
    [msg] = errors(registry, base_recipe(), ['run.output_dir=""'])
    assert msg == "<recipe>: run.output_dir: invalid value '': give a folder (the default is runs/{name})"


def test_a_zoo_model_needs_a_seed_split_to_warm_start_on(registry):
    [msg] = errors(registry, base_recipe(), ["task.seed_size=0", "agents[1].zoo_steps=0"])
    assert msg == ("<recipe>: agents[0].model: zoo:llama-tiny needs a labeled seed split to warm-start on; the "
                   "arithmetic task has none: give task.seed_size > 0 or a model folder")
    load_recipe(base_recipe(), ["task.seed_size=0", "zoo.steps=0"], registry=registry)  # untrained models: asked for


def test_an_attached_observer_without_its_required_settings_is_named(registry):
    import attrs

    import corl

    @attrs.frozen
    class NeedsPath:
        path: str = attrs.field(metadata={"help": "where to write"})

    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("observer", "needy", lambda config, ctx: object(), NeedsPath)

    own = build_registry(make_plugin_manager([Plugin()], autoload=False))
    [msg] = errors(own, base_recipe(), ["run.observers=['needy']"])
    assert msg == ("<recipe>: observers.needy.path: missing required key (observer 'needy' is attached by "
                   "run.observers; give its settings in [observers.needy])")
    spec = load_recipe(base_recipe(), ["run.observers=['needy']", "observers.needy.path='x'"], registry=own)
    assert spec.observers[0].config == NeedsPath("x")


def test_resumable_changes_include_list_keys():
    from corl.recipe import differences

    old = {"run": {"observers": ["jsonl", "checkpoint"], "steps": 5}, "topology": {"type": "ring"}}
    new = {"run": {"observers": ["jsonl", "tensorboard"], "steps": 9}, "topology": {"type": "ring"}}
    assert differences(old, new) == []
    assert differences(old, new, ignore=()) == ["run.observers[1]: 'checkpoint' -> 'tensorboard'", "run.steps: 5 -> 9"]


def test_the_base_of_a_relative_path_is_stated_at_both_keys():
    """Data paths are relative to the recipe file, run.output_dir to the working directory: each key says which."""
    from corl.builtin.tasks.data import DataConfig
    from corl.recipe.schema import RunSection

    output_dir = attrs.fields(RunSection).output_dir.metadata["help"]
    assert "relative to the working directory" in output_dir and "not to the recipe file" in output_dir
    for split in ("train", "eval", "seed"):
        assert "relative to the recipe file" in getattr(attrs.fields(DataConfig), split).metadata["help"]
    assert "not the working directory" in attrs.fields(DataConfig).train.metadata["help"]


def test_cli_validate_reads_the_data_and_says_what_the_run_would(tmp_path):
    ok = cli("validate", "recipes/data_file.toml")
    assert ok.returncode == 0, ok.stderr
    bad = cli("validate", "recipes/data_file.toml", "--set", "task.prompt_field=q", "--set", "task.eval=nope.jsonl")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "corl: error: data/arith_seed.jsonl:1: missing field 'q' (fields: question, answer)",
        "corl: error: data/arith_train.jsonl:1: missing field 'q' (fields: question, answer)",
        "corl: error: task.eval: no such file: recipes/nope.jsonl"]
    assert cli("validate", "recipes/data_file.toml", "--rows", "0").stderr.strip() == "corl: error: --rows 0: must be at least 1"


def test_host_keys_are_checked_from_their_declaration_defaults_included(registry):
    # n_train's default (n_votes) obeys n_train's own rule, reported at its key
    one = with_(**{"voting.n_votes": 1})
    one["voting"].pop("n_train", None)
    assert list(errors(registry, one)) == ["<recipe>: voting.n_train: invalid value 1: must be >= 2 (group baselines need "
                                     "two samples)"]
    assert list(errors(registry, with_(**{"agents[0].frozen": '"yes"'}))) == [
        "<recipe>: agents[0].frozen: expected true or false, got 'yes'"]
    [msg] = errors(registry, with_(**{"agents[0].sampler": '"hf"'}))
    assert msg == "<recipe>: agents[0].sampler: expected a table, got 'hf'"
    six = with_(**{"voting.n_votes": 6})
    six["voting"].pop("n_train", None)
    spec = load_recipe(six, registry=registry)
    assert spec.voting.n_train == 6 and spec.agents[0].frozen is False and spec.agents[0].ranks == ()


def test_the_reference_lists_every_host_key_with_its_declared_default(registry):
    import attrs

    from corl.recipe.schema import AgentKeys, ShapingKeys, VotingKeys
    from corl.tools.reference import render

    text = render(registry)
    for cls in (VotingKeys, AgentKeys, ShapingKeys):
        for field in attrs.fields(cls):
            assert f"| `{field.name}` |" in text and field.metadata["help"] in text
    assert "| `n_train` | an integer | `n_votes` |" in text and "| `weight` | a number | `1.0` |" in text

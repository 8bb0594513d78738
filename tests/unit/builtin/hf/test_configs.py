"""The hf package's recipe tables: each sampler's table holds exactly the keys that sampler honours,
so a key it would ignore or refuse is a validation error at its key path (nothing loads)."""

import sys

import attrs
import pytest

from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.vision.config import VisionSamplerConfig
from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


def vision_recipe(**sampler):
    return {"run": {"steps": 1}, "task": {"type": "shapes"},
            "agents": [{"name": "llava", "type": "hf_vision", "model": "zoo:llava-tiny", "sampler": sampler},
                       {"name": "idefics3", "type": "hf_vision", "model": "zoo:idefics3-tiny"}],
            "voting": {"n_votes": 4, "n_train": 2}, "topology": {"type": "ring"}}


def test_the_vision_sampler_refuses_stop_strings_at_validation(registry):
    spec = load_recipe(vision_recipe(temperature=0.7, top_k=5, batch_size=8), registry=registry)
    assert type(spec.agents[0].sampler.config) is VisionSamplerConfig
    with pytest.raises(ConfigError) as info:
        load_recipe(vision_recipe(stop=["\nQuestion:"]), registry=registry)
    assert list(info.value.problems) == ["<recipe>: agents[0].sampler.stop: unknown key; valid keys here: batch_size, "
                                   "max_new_tokens, min_p, repetition_penalty, temperature, top_k, top_p"]


def test_the_text_sampler_keeps_its_stop_strings(registry):
    recipe = vision_recipe(stop=["\nQuestion:"])
    recipe["task"] = {"type": "arithmetic"}
    recipe["agents"] = [{"name": n, "model": f"zoo:{n}", "sampler": {"stop": ["\nQuestion:"]}}
                        for n in ("llama-tiny", "qwen2-tiny")]
    spec = load_recipe(recipe, registry=registry)
    assert spec.agents[0].sampler.config.stop == ("\nQuestion:",)


def test_the_two_sampler_tables_differ_only_by_stop():
    text = {f.name for f in attrs.fields(HFSamplerConfig)}
    assert text - {f.name for f in attrs.fields(VisionSamplerConfig)} == {"stop"}


def test_the_tables_validate_without_torch():
    import subprocess

    code = ("import sys; from corl.plugins import build_registry, make_plugin_manager; "
            "import corl.builtin.hf.vision.config, corl.builtin.hf.backend.config, corl.builtin.hf.models.config; "
            "assert not {'torch', 'transformers'} & set(sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

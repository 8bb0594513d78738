"""The `tempered` sampler, a wrapper of the built-in `hf` sampler, tested with corl.testing alone:
the contract on a real tiny agent, its schedule through a real resume, its mistakes named as its own."""

import pytest
from corl_gspo import tempered
from corl_gspo.tempered import TemperedConfig, TemperedSampler

from corl.testing import conformance, fails_naming, fake_recipe, run_tiny, tiny_agent


@pytest.fixture(scope="module")
def agent_and_ctx(tmp_path_factory):
    import os

    os.environ.setdefault("CORL_CACHE_DIR", str(tmp_path_factory.mktemp("zoo")))
    return tiny_agent()


def test_it_keeps_the_sampler_contract_around_hf(agent_and_ctx):
    agent, ctx = agent_and_ctx
    sampler = TemperedSampler(TemperedConfig(start=1.5, end=0.5, steps=4, inner_config={"max_new_tokens": 6}), ctx)
    prompts = ctx.task.split("train")[:3]
    rollout = conformance.check_sampler(agent, sampler, prompts)
    assert rollout.batch.temperature == 1.5 and sampler.temperature() == 1.25  # the schedule moved
    assert rollout.batch.max_new_tokens == 6


def test_its_schedule_resumes_bit_for_bit(tmp_path):
    recipe = fake_recipe(**{"run.steps": 4})
    for agent in recipe["agents"]:
        agent["sampler"] = {"type": "tempered", "inner": "fake", "steps": 3}
    conformance.check_resume(tmp_path, recipe, plugins=[tempered])


def test_what_the_wrapped_sampler_refuses_is_said_for_the_wrapper(tmp_path):
    recipe = fake_recipe()
    recipe["agents"][0]["sampler"] = {"type": "tempered"}  # hf, around a fake agent that has no tokenizer
    with fails_naming("agent 'fake0''s sampler 'tempered' (plugin ") as failure:
        run_tiny(tmp_path, recipe, plugins=[tempered])
    assert "'s sampler 'hf' (plugin corl.builtin.hf)" in str(failure.error)

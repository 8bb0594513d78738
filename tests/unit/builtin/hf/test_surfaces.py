"""What the hf samplers and the engine bridge need of an agent is declared (protocols), not probed:
a sampler given another agent says what it lacks, or which sampler that agent needs."""

import ast
import types
from pathlib import Path

import pytest

from corl.builtin.hf import engines
from corl.builtin.hf.backend.common import ImageTextAgent, TextAgent, sampler_key
from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.vision.config import VisionSamplerConfig
from corl.builtin.hf.vision.sampler import VisionSampler
from corl.errors import CorlError
from corl.protocols import LanguageModelAgent, missing_members
from corl.testing import FakeAgent, FakeAgentConfig, context

ROOT = Path(__file__).resolve().parents[4]


def stub(surface, **extra):
    """An object with every member of ``surface`` (values never read before a task is given)."""
    return types.SimpleNamespace(**{name: None for name in missing_members(object(), surface)}, **extra)


def test_each_sampler_serves_its_own_surface():
    HFSampler(HFSamplerConfig(), context(agent=stub(TextAgent)))
    VisionSampler(VisionSamplerConfig(), context(agent=stub(ImageTextAgent)))


def test_an_agent_of_the_other_surface_is_told_its_sampler():
    with pytest.raises(CorlError, match=r"^agent 'a': sampler 'hf' samples for text agents; give this agent's "
                                        r"sampler type = \"hf_vision\"$"):
        HFSampler(HFSamplerConfig(), context(agent=stub(ImageTextAgent)))
    with pytest.raises(CorlError, match=r"^agent 'a': sampler 'hf_vision' samples for vision-language agents; give "
                                        r"this agent's sampler type = \"hf\"$"):
        VisionSampler(VisionSamplerConfig(), context(agent=stub(TextAgent)))


def test_another_agent_is_told_what_it_lacks():
    agent = FakeAgent(FakeAgentConfig(), context())
    with pytest.raises(CorlError, match=r"sampler 'hf' samples for text hf agents; this agent has no .*autocast.*"
                                        r"\(corl.builtin.hf.backend.common.TextAgent\)"):
        HFSampler(HFSamplerConfig(), context(agent=agent))


def test_the_key_path_comes_from_a_recipe_that_lists_its_agents():
    spec = types.SimpleNamespace(agents=[types.SimpleNamespace(name="x"), types.SimpleNamespace(name="a")])
    ctx = context()
    assert sampler_key(ctx) == "sampler.max_new_tokens"  # a hand-made context's spec lists no agents
    assert sampler_key(type(ctx)(spec=spec, seed=0, agent_name="a"), "sleep") == "agents[1].sampler.sleep"


def test_the_engine_bridge_names_what_an_agent_lacks():
    ok = stub(LanguageModelAgent)
    assert engines.serves_hf_agent(context(agent=ok), "vllm") is ok
    with pytest.raises(CorlError, match=r"sampler 'vllm' samples for an hf agent .*this one has no device, weights\)"):
        engines.serves_hf_agent(context(agent=stub(ImageTextAgent)), "vllm")


def test_the_engine_api_is_what_the_plugins_import():
    assert all(hasattr(engines, name) for name in engines.__all__)
    used = set()
    for path in ROOT.glob("plugins/*/*/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "corl.builtin.hf.engines":
                used |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("corl.builtin"):
                pytest.fail(f"{path} imports {node.module}: engine plugins import only corl.builtin.hf.engines")
    assert used and used <= set(engines.__all__)

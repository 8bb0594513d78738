"""LoRA adapters on an hf agent (peft): only adapters train, the KL reference is the base model with
its adapters off, engines get merged weights, and the export round-trips (adapter and merged model)."""

import attrs
import pytest
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.scale.lora import LoraSettings
from corl.builtin.policy import GRPOConfig, grpo
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from corl.errors import ConfigError, CorlError
from corl.recipe import load_recipe
from tests.kit import zoo_context

peft = pytest.importorskip("peft")  # the co-rl[lora] extra (tox installs it)

LORA = LoraSettings(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj", "up_proj"))


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


def agent_for(task, **changes):
    return HFAgent(HFAgentConfig(model="zoo:llama-tiny", **changes), zoo_context(task, "llama-tiny", 5))


def trained(task, agent, kl=0.0, steps=2):
    """``steps`` GRPO updates on sampled rollouts with rewards that always carry a signal."""
    optimizer = grpo(GRPOConfig(lr=5e-2, kl=kl), attrs.evolve(zoo_context(task), agent=agent))
    sampler = HFSampler(HFSamplerConfig(max_new_tokens=6))
    torch.manual_seed(0)
    for _ in range(steps):
        rollout = sampler.sample(agent, task.split("train")[:4], 4)
        metrics = optimizer.step(rollout, [[1.0, 0.0, 1.0, 0.0]] * 4)
    return rollout, metrics


def logprobs(agent, rollout, reference=False):
    with torch.no_grad():
        return agent.token_logprobs(rollout.batch, torch.arange(len(rollout.batch.sequences)), reference=reference)[0]


def test_only_the_adapters_train_and_the_reference_is_the_base_model(task, cache_dir):
    agent, base = agent_for(task, lora=LORA), agent_for(task)
    before = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    assert {n for n, p in agent.model.named_parameters() if p.requires_grad} == {n for n in before if ".lora_" in n}
    rollout, metrics = trained(task, agent, kl=0.1)
    assert metrics["nonfinite"] == 0 and metrics["grad_norm"] > 0
    changed = {n for n, p in agent.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".lora_B." in n or ".lora_A." in n for n in changed)  # the base never moves
    assert any(".lora_B." in n for n in changed)  # (B starts at zero: the adapters now do something)
    policy, reference, plain = logprobs(agent, rollout), logprobs(agent, rollout, reference=True), logprobs(base, rollout)
    mask = rollout.batch.completion_mask.bool()
    assert torch.allclose(reference[mask], plain[mask], atol=1e-5)  # adapters off = the untouched base model
    assert (policy - plain)[mask].abs().max() > 1e-3  # and the policy did move away from it
    assert agent.reference is None  # no second copy of the model


def test_sampling_logprobs_match_the_update_with_adapters(task, cache_dir):
    agent = agent_for(task, lora=LORA)
    trained(task, agent, steps=1)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, task.split("train")[:4], 3)
    mask = rollout.batch.completion_mask.bool()
    assert (logprobs(agent, rollout) - rollout.batch.old_logprobs)[mask].abs().max() < 1e-4  # first ratio is 1


def test_export_round_trips_as_adapter_and_merged_model(task, cache_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    agent = agent_for(task, lora=attrs.evolve(LORA, export_merged=True))
    rollout, _ = trained(task, agent)
    agent.save(str(tmp_path / "export"))
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "export").iterdir()}
    ids, mask = rollout.batch.sequences, rollout.batch.attention_mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)

    def scores(model):
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.log_softmax(-1)

    ours = scores(agent.model)
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(agent.model.name_or_path),
                                        str(tmp_path / "export")).eval()
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "export" / "merged")).eval()
    assert torch.allclose(scores(adapter), ours, atol=1e-5)
    assert torch.allclose(scores(merged), ours, atol=1e-4)
    # what an engine receives: the merged weights under the base model's own names
    pushed = dict(agent.weights())
    assert set(pushed) == {n for n, _ in merged.named_parameters()}
    assert all(torch.allclose(pushed[n], p, atol=1e-6) for n, p in merged.named_parameters())


def test_a_checkpoint_holds_the_adapters_alone_and_restores_them(task, cache_dir, tmp_path):
    """A step checkpoint's agent folder is a peft adapter folder (PeftModel.from_pretrained(base, folder)
    loads it) naming its base as the recipe does, and resume restores the adapters exactly."""
    import json

    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    agent = agent_for(task, lora=LORA)
    rollout, _ = trained(task, agent)
    agent.save_state(str(tmp_path / "state"))
    saved = load_file(str(tmp_path / "state" / "adapter_model.safetensors"))
    assert saved and all(".lora_" in name for name in saved)
    config = json.loads((tmp_path / "state" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "zoo:llama-tiny"  # the recipe's name, no local path
    card = (tmp_path / "state" / "README.md").read_text()
    assert "base_model: zoo:llama-tiny" in card and str(agent.model.name_or_path) not in card
    fresh = agent_for(task, lora=LORA)
    fresh.load_state(str(tmp_path / "state"))
    assert torch.equal(logprobs(fresh, rollout), logprobs(agent, rollout))
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(agent.model.name_or_path),
                                       str(tmp_path / "state")).eval()
    ids, mask = rollout.batch.sequences, rollout.batch.attention_mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        theirs, ours = (m(input_ids=ids, attention_mask=mask, position_ids=positions).logits
                        for m in (loaded, agent.model))
    assert torch.allclose(theirs, ours, atol=1e-5)


def test_an_older_checkpoint_of_adapters_still_resumes(task, cache_dir, tmp_path):
    from safetensors.torch import save_file

    agent = agent_for(task, lora=LORA)
    rollout, _ = trained(task, agent)
    (tmp_path / "old").mkdir()
    save_file({n: p.detach().contiguous() for n, p in agent.model.named_parameters() if ".lora_" in n},
              str(tmp_path / "old" / "adapters.safetensors"))
    fresh = agent_for(task, lora=LORA)
    fresh.load_state(str(tmp_path / "old"))
    assert torch.equal(logprobs(fresh, rollout), logprobs(agent, rollout))
    other = agent_for(task, lora=attrs.evolve(LORA, target_modules=("q_proj",)))
    with pytest.raises(CorlError, match="does not match this agent's adapters"):
        _save_and_load(agent, other, tmp_path)


def _save_and_load(agent, other, tmp_path):
    agent.save_state(str(tmp_path / "new"))
    other.load_state(str(tmp_path / "new"))


def test_adapters_on_a_sharded_model(task, cache_dir, tmp_path):
    """LoRA under FSDP2 (one rank): the same training as without sharding, exported alike."""
    sharded, plain = agent_for(task, lora=LORA, shard="fsdp"), agent_for(task, lora=LORA)
    for name, p in sharded.model.named_parameters():  # the same random adapter init in both
        with torch.no_grad():
            p.to_local().copy_(dict(plain.model.named_parameters())[name])
    r1, m1 = trained(task, sharded, kl=0.1)
    r0, m0 = trained(task, plain, kl=0.1)
    assert r1.texts == r0.texts and m1.keys() == m0.keys()
    assert all(abs(m1[k] - m0[k]) <= 1e-6 * max(1.0, abs(m0[k])) for k in m0), (m1, m0)  # float rounding
    sharded.save(str(tmp_path / "sharded"))
    plain.save(str(tmp_path / "plain"))
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / d / "adapter_model.safetensors")) for d in ("sharded", "plain"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_recipe_mistakes_name_the_key(task, cache_dir):
    def errors(agent):
        with pytest.raises(ConfigError) as info:
            load_recipe({"agents": [{"name": "a", "model": "zoo:llama-tiny", **agent}], "topology": {"type": "self"}})
        return str(info.value)

    assert "agents[0].lora.rank: invalid value -1" in errors({"lora": {"rank": -1}})
    assert "agents[0].lora.tagret: unknown key" in errors({"lora": {"tagret": ["q_proj"]}})
    assert "with adapters only the adapters train already" in errors({"lora": {"rank": 4}, "freeze_embeddings": True})
    with pytest.raises(CorlError, match=r"agent 'llama-tiny': lora.target_modules: .*nope"):
        agent_for(task, lora=LoraSettings(rank=2, target_modules=("nope",)))


def test_loading_a_model_that_is_no_zoo_model_says_so(task, tmp_path):
    """A real model takes a while to load: the run says which (a zoo model's warm-start says so itself)."""
    from corl.builtin.hf.models.sources import resolve
    from tests.kit import context

    said = []
    folder = resolve("zoo:llama-add3")  # a local Hugging Face folder, as a user's own model is
    HFAgent(HFAgentConfig(model=folder), context(agent_name="mine", task=task, log=said.append))
    assert said == [f"agent 'mine': loading {folder}"]

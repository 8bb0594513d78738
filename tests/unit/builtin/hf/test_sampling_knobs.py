"""The hf sampler's TRL-style knobs: repetition_penalty, min_p (with top_k / top_p), max_prompt_length
with a truncation side, and a per-agent chat template."""

import pytest
import torch

from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.backend.static_decode import HFStaticSampler
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from tests.kit import hf_agent


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


@pytest.fixture(scope="module")
def agent(task, cache_dir):
    return hf_agent("llama-tiny", task, steps=0)  # untrained: long, repetitive completions


@pytest.mark.parametrize("sampler", [HFSampler, HFStaticSampler])
def test_greedy_with_a_repetition_penalty_is_what_generate_decodes(agent, task, sampler):
    """generate() applies the penalty also without sampling (a logits processor, not a warper): so does
    the sampler's greedy path, over the prompt and the completion so far; the static-cache decode too."""
    prompts = task.split("train")[:6]
    penalised = sampler(HFSamplerConfig(max_new_tokens=8, repetition_penalty=3.0)).sample(agent, prompts, 1,
                                                                                          greedy=True)
    plain = sampler(HFSamplerConfig(max_new_tokens=8)).sample(agent, prompts, 1, greedy=True)
    enc = agent.encode(prompts)
    tok = agent.tokenizer
    with torch.no_grad():
        ref = agent.model.generate(**enc, do_sample=False, max_new_tokens=8, repetition_penalty=3.0,
                                   pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    ref = ref[:, enc["input_ids"].shape[1]:]
    b = penalised.batch
    for row in range(len(prompts)):
        n = int(b.completion_mask[row].sum())
        assert b.sequences[row, b.prompt_len:b.prompt_len + n].tolist() == ref[row, :n].tolist()
    assert penalised.texts != plain.texts  # the penalty changed what was decoded


def test_min_p_of_one_keeps_only_the_likeliest_token(agent, task):
    prompts = task.split("train")[:4]
    greedy = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, prompts, 1, greedy=True)
    top = HFSampler(HFSamplerConfig(min_p=1.0, temperature=1.3, max_new_tokens=6)).sample(agent, prompts, 3)
    assert top.texts == tuple((t[0],) * 3 for t in greedy.texts)


def test_shaping_knobs_leave_the_recorded_logprobs_the_training_forwards(agent, task):
    """With every shaping knob on, what is recorded is still the model's own log-prob at the temperature
    (what the update recomputes): the knobs change which tokens are drawn, never that."""
    config = HFSamplerConfig(temperature=0.8, top_k=20, top_p=0.95, min_p=0.05, repetition_penalty=1.3,
                             max_new_tokens=6)
    rollout = HFSampler(config).sample(agent, task.split("train")[:6], 2)
    batch = rollout.batch
    with torch.no_grad():
        logp, _ = agent.token_logprobs(batch, torch.arange(12))
    assert float(((logp - batch.old_logprobs).abs() * batch.completion_mask).max()) < 1e-4


@pytest.mark.parametrize("bad, message", [({"min_p": 1.5}, "min_p"), ({"repetition_penalty": 0}, "repetition_penalty")])
def test_bad_knobs_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        HFSamplerConfig(**bad)


LONG = " ".join(["{prompt}"] * 12)  # ~100 characters: past the zoo models' 64 positions
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}=>{% endif %}")


def test_max_prompt_length_cuts_prompts_instead_of_refusing_them(task, cache_dir):
    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig
    from corl.errors import CorlError
    from tests.kit import zoo_context

    ctx = zoo_context(task, "cut", steps=0)
    with pytest.raises(CorlError, match="alone fills the model's context of 64 positions.*max_prompt_length"):
        HFAgent(HFAgentConfig(model="zoo:llama-tiny", prompt_template=LONG), ctx)
    prompts = task.split("train")[:3]
    encoded = {}
    for side in ("left", "right"):
        agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", prompt_template=LONG, max_prompt_length=24,
                                      truncation_side=side), ctx)
        assert agent.longest.tokens == 24
        encoded[side] = agent.encode(prompts)["input_ids"]
        assert encoded[side].shape[1] == 24
        texts, special = agent.render(prompts)
        k = len(agent.tokenizer("", add_special_tokens=special)["input_ids"])  # BOS: kept either way
        assert k == 1
        for row, text in zip(encoded[side].tolist(), texts):
            whole = agent.tokenizer(text, add_special_tokens=special)["input_ids"]
            assert row == (whole[:k] + whole[k - 24:] if side == "left" else whole[:24])  # left (TRL's): the end kept
        import attrs

        rollout = HFSampler(HFSamplerConfig(max_new_tokens=8), attrs.evolve(ctx, agent=agent)).sample(agent, prompts, 2)
        assert rollout.batch.prompt_len == 24
        from corl.builtin.hf.backend.preview import rendered

        shown = rendered(agent.config, ctx, prompts[:1])[0]  # corl data preview says what is cut
        first = len(agent.tokenizer(texts[0], add_special_tokens=special)["input_ids"])
        assert shown.startswith(f"[cut from {first} to 24 tokens on the {side} (max_prompt_length)")
        assert shown.endswith(agent.tokenizer.decode(encoded[side][0].tolist()))
    assert not torch.equal(encoded["left"], encoded["right"])


def test_a_chat_template_of_the_agents_own_renders_its_prompts_and_preview(task, cache_dir, tmp_path):
    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig
    from corl.builtin.hf.backend.preview import rendered
    from tests.kit import zoo_context

    ctx = zoo_context(task, "chat", steps=0)
    prompts = task.split("train")[:2]
    config = HFAgentConfig(model="zoo:llama-tiny", chat_template=TEMPLATE, system_prompt="be brief")
    agent = HFAgent(config, ctx)  # the zoo tokenizer has no template: auto is chat with this one
    expected = [f"[system] be brief\n[user] {p.text}\n=>" for p in prompts]
    assert agent.render(prompts) == (expected, False)
    assert rendered(config, ctx, prompts) == expected  # corl data preview shows what the agent tokenizes
    assert agent.tokenizer.chat_template == TEMPLATE  # and saves it with the tokenizer
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    from_file = HFAgentConfig(model="zoo:llama-tiny", chat_template=str(path))
    assert rendered(from_file, ctx, prompts) == [f"[user] {p.text}\n=>" for p in prompts]


def test_bad_chat_templates_are_one_line_naming_the_key(tmp_path):
    from corl.builtin.hf.backend.config import HFAgentConfig
    from corl.builtin.hf.backend.prompts import chat_template_text
    from corl.errors import CorlError

    with pytest.raises(ValueError, match="not a valid Jinja template"):
        HFAgentConfig(model="zoo:llama-tiny", chat_template="{% for m in messages %}")
    with pytest.raises(CorlError, match=r"agent 'a': chat_template 'nope.jinja': cannot read .*nope.jinja"):
        chat_template_text("nope.jinja", str(tmp_path / "recipe.toml"), "agent 'a'")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    assert chat_template_text("t.jinja", str(tmp_path / "recipe.toml"), "agent 'a'") == TEMPLATE  # beside the recipe


def test_a_short_run_with_every_new_knob(tmp_path, cache_dir):
    import json

    import corl
    from tests.kit import TINY

    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    recipe = {"run": {"name": "knobs"}, "topology": {"type": "ring"},
              "agents": [{"name": "a", "model": "zoo:llama-tiny", "chat_template": str(tmp_path / "chat.jinja"),
                          "max_prompt_length": 16, "truncation_side": "left",
                          "sampler": {"type": "hf", "min_p": 0.05, "repetition_penalty": 1.2, "top_k": 20,
                                      "top_p": 0.95, "temperature": 0.9}},
                         {"name": "b", "model": "zoo:qwen2-tiny", "prompt_template": LONG, "max_prompt_length": 40,
                          "truncation_side": "right"}]}
    summary = corl.run(recipe, [*TINY, f"run.output_dir={tmp_path / 'out'}", "run.steps=2", "run.threads=1"])
    assert set(summary["agents"]) == {"a", "b"}
    train = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["agents"]["a"]["completion_length"] > 0 for r in train)

"""The hf_static sampler (a fixed-shape decode step over a preallocated KV cache) against generate()
and the training forward, on all four zoo families."""

import functools

import pytest
import torch

from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.backend.decode import decode
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.backend.static_decode import HFStaticSampler, decode_static
from corl.builtin.hf.models import zoo
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from tests.kit import hf_agent


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


@pytest.mark.parametrize("name", sorted(zoo.FAMILIES))
def test_static_greedy_tokens_equal_generate_and_logprobs_equal_the_training_forward(name, task, cache_dir,
                                                                                     monkeypatch):
    agent = hf_agent(name, task)
    calls = []
    monkeypatch.setattr("corl.builtin.hf.backend.static_decode.decode_static",
                        lambda *a, **k: calls.append(1) or decode_static(*a, **k))
    prompts = task.split("train")[:6]
    ours = HFStaticSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, prompts, 1, greedy=True)
    assert calls == [1]  # the static step ran
    enc = agent.encode([p.text for p in prompts])
    tok = agent.tokenizer
    with torch.no_grad():
        ref = agent.model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id,
                                   eos_token_id=tok.eos_token_id)
    ref = ref[:, enc["input_ids"].shape[1]:]
    b = ours.batch
    for row in range(len(prompts)):
        n = int(b.completion_mask[row].sum())
        assert n > 0 and b.sequences[row, b.prompt_len:b.prompt_len + n].tolist() == ref[row, :n].tolist()
    # sampled, N copies of each prompt's cache, top-p shaping: the log-probs the update recomputes
    torch.manual_seed(0)
    rollout = HFStaticSampler(HFSamplerConfig(temperature=0.7, top_p=0.9, max_new_tokens=6)).sample(
        agent, task.split("train")[:8], 3)
    batch = rollout.batch
    with torch.no_grad():
        logp, _ = agent.token_logprobs(batch, torch.arange(24))
    assert float(((logp - batch.old_logprobs).abs() * batch.completion_mask).max()) < 1e-4
    # and the same draws as the dynamic loop from the same seed
    torch.manual_seed(0)
    again = HFSampler(HFSamplerConfig(temperature=0.7, top_p=0.9, max_new_tokens=6)).sample(
        agent, task.split("train")[:8], 3)
    assert len(calls) == 2  # (the dynamic run above did not go through the static step)
    assert again.texts == rollout.texts
    assert torch.allclose(again.batch.old_logprobs, batch.old_logprobs, atol=1e-5)


def test_the_decode_step_has_one_shape_and_the_cache_is_static(task, cache_dir):
    from transformers import StaticCache

    agent = hf_agent("llama-tiny", task)
    enc = agent.encode([p.text for p in task.split("train")[:4]])
    seen = []
    forward = agent.model.forward

    @functools.wraps(forward)
    def spy(*args, **kwargs):
        seen.append((tuple(kwargs["input_ids"].shape), tuple(kwargs["attention_mask"].shape),
                     type(kwargs.get("cache", kwargs.get("past_key_values")))))
        return forward(*args, **kwargs)

    agent.model.forward = spy
    with torch.no_grad():
        ids, logps, live = decode_static(agent.model, enc["input_ids"], enc["attention_mask"], 3, 5, 1.0, True, [],
                                         eos=-1, pad=agent.tokenizer.pad_token_id)
    width = enc["input_ids"].shape[1]
    assert ids.shape == logps.shape == live.shape == (12, 5)
    assert seen[0][0] == (4, width)  # one prefill per prompt
    steps = seen[1:]
    assert len(steps) == 4 and len(set(steps)) == 1  # every decode step the same shapes
    assert steps[0] == ((12, 1), (12, width + 5), StaticCache)


def test_the_decode_step_is_a_parameter_and_its_bucket_sizes_the_cache(task, cache_dir):
    # (bench/bounds.py passes torch.compile's step here): every decode step goes through `forward`,
    # a bucketed cache length changes no token, and the dynamic eager loop (equal to generate(), above) agrees
    agent = hf_agent("llama-tiny", task)
    enc = agent.encode([p.text for p in task.split("train")[:6]])
    calls, widths = [], []

    class Compiled:  # like torch.compile's module wrapper: callable, and no truth value (its len() raises)
        def __call__(self, **inputs):
            calls.append(1)
            widths.append(inputs["attention_mask"].shape[1])
            return agent.model(**inputs)

        def __len__(self):
            raise TypeError("LlamaForCausalLM does not support len()")

    forward = Compiled()

    args = (agent.model, enc["input_ids"], enc["attention_mask"], 2, 6, 1.0, True, [])
    with torch.no_grad():  # no EOS: the tiny models end at once, and every step should run
        ids, logps, live = decode_static(*args, eos=-1, pad=agent.tokenizer.pad_token_id, forward=forward,
                                          bucket=16)
        ref_ids, ref_logps, _ = decode(*args, eos=-1, pad=agent.tokenizer.pad_token_id)
    assert len(calls) == 5 and set(widths) == {-(-(enc["input_ids"].shape[1] + 6) // 16) * 16}
    assert ids.shape == (12, 6) and bool(live.all()) and torch.equal(ids, ref_ids)
    assert torch.allclose(logps, ref_logps, atol=1e-5)

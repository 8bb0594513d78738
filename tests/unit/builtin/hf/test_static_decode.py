"""The hf_static sampler (a fixed-shape decode step over a preallocated KV cache) against generate()
and the training forward, on all four zoo families."""

import functools

import pytest
import torch

from corl.builtin.hf.backend import static_decode
from corl.builtin.hf.backend.config import HFSamplerConfig, HFStaticSamplerConfig
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


def greedy_equals_eager(agent, forward, prompts, n=2, new_tokens=6):
    """The static loop through ``forward`` against the dynamic eager loop (itself equal to generate(): above
    and test_agent.py), greedy, no EOS (the tiny models end at once), every step run."""
    enc = agent.encode([p.text for p in prompts])
    args = (agent.model, enc["input_ids"], enc["attention_mask"], n, new_tokens, 1.0, True, [])
    with torch.no_grad():
        ids, logps, live = decode_static(*args, eos=-1, pad=agent.tokenizer.pad_token_id, forward=forward)
        ref_ids, ref_logps, _ = decode(*args, eos=-1, pad=agent.tokenizer.pad_token_id)
    assert ids.shape == (len(prompts) * n, new_tokens) and bool(live.all())
    assert torch.equal(ids, ref_ids)
    assert torch.allclose(logps, ref_logps, atol=1e-5)


def logprobs_equal_the_training_forward(agent, sampler, prompts, n=3):
    torch.manual_seed(0)
    batch = sampler.sample(agent, prompts, n).batch
    assert int(batch.completion_mask.sum(1).max()) > 2  # (decode steps ran)
    with torch.no_grad():
        logp, _ = agent.token_logprobs(batch, torch.arange(len(prompts) * n))
    assert float(((logp - batch.old_logprobs).abs() * batch.completion_mask).max()) < 1e-4
    return batch


def compiled_sampler_checks(agent, task, monkeypatch):
    logged, calls = [], []
    call = static_decode.CompiledStep.__call__
    monkeypatch.setattr(static_decode.CompiledStep, "__call__", lambda self, *a: calls.append(1) or call(self, *a))
    sampler = HFStaticSampler(HFStaticSamplerConfig(compile=True, temperature=1.5, max_new_tokens=6))
    sampler._log = logged.append
    logprobs_equal_the_training_forward(agent, sampler, task.split("train")[:8])
    step = sampler._steps[id(agent.model)]
    assert calls and step.failed is None and logged == []  # the compiled step ran, nothing fell back
    greedy_equals_eager(agent, step, task.split("train")[:6])
    with torch.no_grad():  # an update changes the weights in place: the compiled step reads them, not a frozen copy
        for p in agent.model.parameters():
            p.mul_(1.1)
    greedy_equals_eager(agent, step, task.split("train")[:6])
    # other shapes (rows, a longer cache): one more graph, its sizes symbolic, serves them all
    greedy_equals_eager(agent, step, task.split("train")[:5], n=3, new_tokens=23)
    greedy_equals_eager(agent, step, task.split("train")[:3], n=1, new_tokens=40)
    assert step.failed is None and logged == []


def test_the_compiled_step_is_one_whole_graph_with_eager_results(task, cache_dir, monkeypatch):
    # dynamo captures the whole decode step (fullgraph: a graph break would fail and fall back) and
    # runs it; the "eager" backend skips inductor's code generation (the slow test below runs it)
    from torch._dynamo.utils import counters

    monkeypatch.setattr(static_decode, "BACKEND", "eager")
    agent = hf_agent("llama-tiny", task)
    before = counters["stats"]["unique_graphs"]
    compiled_sampler_checks(agent, task, monkeypatch)
    # five shapes, three graphs: the first shape's, then the row count symbolic, then the cache length
    # too, which serves every later shape (no recompile per shape)
    assert counters["stats"]["unique_graphs"] - before == 3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-tiny", "gpt2-tiny"])
def test_the_inductor_compiled_step_equals_the_eager_loop_and_the_training_forward(name, task, cache_dir,
                                                                                   monkeypatch):
    compiled_sampler_checks(hf_agent(name, task), task, monkeypatch)


def test_a_step_that_does_not_compile_logs_once_and_decodes_eagerly(task, cache_dir, monkeypatch):
    agent = hf_agent("llama-tiny", task)
    tries = []

    def broken(fn, **options):
        def run(model, **inputs):  # runs part of the step (the cache written), then fails as a compiler can
            tries.append(1)
            model(**inputs)
            raise RuntimeError("C++ compile error: g++ not found\nmore detail")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    logged = []
    step = static_decode.CompiledStep(agent.model, logged.append)
    greedy_equals_eager(agent, step, task.split("train")[:6])  # the failed step's cache set back: same tokens
    assert tries == [1] and logged == ["hf_static: torch.compile of the decode step failed (RuntimeError: C++ compile "
                                       "error: g++ not found); decoding eagerly"]
    eager = HFStaticSampler(HFStaticSamplerConfig(temperature=1.5, max_new_tokens=6))
    sampler = HFStaticSampler(HFStaticSamplerConfig(compile=True, temperature=1.5, max_new_tokens=6))
    sampler._log = logged.append
    torch.manual_seed(0)
    ref = eager.sample(agent, task.split("train")[:8], 3)
    batch = logprobs_equal_the_training_forward(agent, sampler, task.split("train")[:8])
    assert tries == [1, 1] and len(logged) == 2  # tried once per sampler, never again for later steps
    assert torch.equal(batch.sequences, ref.batch.sequences)
    assert torch.allclose(batch.old_logprobs, ref.batch.old_logprobs, atol=1e-5)


def test_the_recipe_key_reaches_the_sampler_and_a_wrong_value_names_it():
    from corl.errors import ConfigError
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import apply_overrides, load_recipe
    from corl.testing import base_recipe

    registry = build_registry(make_plugin_manager(autoload=False))
    data = base_recipe()
    apply_overrides(data, ["agents[0].sampler.type=hf_static", "agents[0].sampler.compile=true"])
    sampler = load_recipe(data, registry=registry).agents[0].sampler
    assert sampler.type == "hf_static" and sampler.config.compile is True
    apply_overrides(data, ['agents[0].sampler.compile="yes"'])
    with pytest.raises(ConfigError, match=r"agents\[0\]\.sampler\.compile"):
        load_recipe(data, registry=registry)

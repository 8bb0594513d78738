"""The hf agent and sampler on real (tiny, untrained) zoo models of all four families."""

import attrs
import pytest
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.models import zoo
from corl.builtin.hf.models.config import ZooConfig
from corl.builtin.policy import GRPOConfig, grpo
from corl.builtin.policy.losses import grpo_advantages
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from corl.context import Context
from tests.kit import hf_agent, zoo_context


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


def make_agent(name, task):
    return hf_agent(name, task)


@pytest.mark.parametrize("name", sorted(zoo.FAMILIES))
def test_sampling_logprobs_match_the_training_forward(name, task, cache_dir):
    agent = make_agent(name, task)
    sampler = HFSampler(HFSamplerConfig(temperature=0.7, top_p=0.9, max_new_tokens=6))
    rollout = sampler.sample(agent, task.split("train")[:8], 3)
    batch = rollout.batch
    assert len(rollout.texts) == 8 and all(len(t) == 3 for t in rollout.texts)
    with torch.no_grad():
        logp, entropy = agent.token_logprobs(batch, torch.arange(24))
    # Left padding + temperature: the recomputed log-probs must equal the sampling ones
    # (GPT-2 is off by nats without explicit position ids).
    diff = ((logp - batch.old_logprobs).abs() * batch.completion_mask).max()
    assert float(diff) < 1e-4
    assert (entropy >= 0).all()


def test_completion_mask_stops_after_first_eos(task, cache_dir):
    agent = make_agent("llama-tiny", task)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, task.split("train")[:16], 4)
    b = rollout.batch
    eos = agent.tokenizer.eos_token_id
    completion = b.sequences[:, b.prompt_len:]
    for row in range(completion.shape[0]):
        toks = completion[row].tolist()
        n = toks.index(eos) + 1 if eos in toks else len(toks)
        assert b.completion_mask[row].tolist() == [1] * n + [0] * (len(toks) - n)
        assert (b.old_logprobs[row, n:] == 0).all()
    assert [list(x) for x in rollout.lengths] == [b.completion_mask[p * 4:(p + 1) * 4].sum(1).tolist() for p in range(16)]
    greedy = HFSampler(HFSamplerConfig()).sample(agent, task.split("train")[:4], 1, greedy=True)
    again = HFSampler(HFSamplerConfig()).sample(agent, task.split("train")[:4], 1, greedy=True)
    assert greedy.texts == again.texts


def test_grpo_step_follows_the_advantages(task, cache_dir):
    torch.manual_seed(0)
    agent = make_agent("qwen2-tiny", task)
    sampler = HFSampler(HFSamplerConfig(max_new_tokens=4))
    opt = grpo(GRPOConfig(lr=1e-3), Context(spec=None, seed=0, agent=agent))
    rollout = sampler.sample(agent, task.split("train")[:4], 4)
    rewards = [[1.0, 0.0, 0.0, 0.0] for _ in range(4)]
    rows = torch.arange(16)
    mask = rollout.batch.completion_mask.float()
    before = (rollout.batch.old_logprobs * mask).sum(1)
    metrics = opt.step(rollout, rewards)
    with torch.no_grad():
        after = (agent.token_logprobs(rollout.batch, rows)[0] * mask).sum(1)
    # One small step raises the advantage-weighted log-likelihood: the policy-gradient objective.
    adv = grpo_advantages(torch.tensor(rewards)).flatten()
    assert float((adv * (after - before)).sum()) > 0
    assert metrics["grad_norm"] > 0 and metrics["active_fraction"] == 1.0
    assert {"loss", "clip_frac", "entropy"} <= set(metrics) and "kl" not in metrics  # no reference: no KL measured


def test_kl_keeps_a_frozen_reference_only_when_asked(task, cache_dir):
    agent = make_agent("llama-tiny", task)
    grpo(GRPOConfig(), Context(spec=None, seed=0, agent=agent))
    assert agent.reference is None
    opt = grpo(GRPOConfig(kl=0.1, lr=1e-2), Context(spec=None, seed=0, agent=agent))
    ref_weights = [p.clone() for p in agent.reference.parameters()]
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=4)).sample(agent, task.split("train")[:4], 4)
    metrics = opt.step(rollout, [[1.0, 0.0, 1.0, 0.0]] * 4)
    assert all(torch.equal(a, b) for a, b in zip(ref_weights, agent.reference.parameters()))
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=4)).sample(agent, task.split("train")[:4], 4)
    metrics = opt.step(rollout, [[1.0, 0.0, 1.0, 0.0]] * 4)
    assert metrics["kl"] > 0  # the policy moved away from its reference


def test_zoo_tokenizer_round_trips(tmp_path):
    tok = zoo.build_tokenizer()
    ids = tok("12*3+4=")["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == 8
    assert tok.decode(ids, skip_special_tokens=True) == "12*3+4="
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("12*3+4=")["input_ids"] == ids and again.padding_side == "left"


def test_zoo_models_are_cached(task, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    examples = [(p.text, str(p.label)) for p in task.split("seed")]
    first = zoo.resolve("gpt2-tiny", examples, ZooConfig(steps=3), log=lambda m: None)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert zoo.resolve("gpt2-tiny", examples, ZooConfig(steps=3), log=lambda m: None) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    # anything that shapes the model gives another cache entry
    assert zoo.resolve("gpt2-tiny", examples, ZooConfig(steps=4), log=lambda m: None) != first
    assert not [p for p in (tmp_path / "zoo").iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_bad_models_are_clear_errors_naming_the_agent(task, cache_dir, tmp_path):
    from corl.errors import CorlError

    agent = make_agent("llama-tiny", task)
    agent.model.save_pretrained(tmp_path)
    tok = zoo.build_tokenizer()
    tok.pad_token = None
    tok.save_pretrained(tmp_path)
    ctx = zoo_context(task, "nopad")
    with pytest.raises(CorlError, match=r"agent 'nopad': the tokenizer of .* has no pad token; set pad_token .*'<eos>'"):
        HFAgent(HFAgentConfig(model=str(tmp_path)), ctx)
    ok = HFAgent(HFAgentConfig(model=str(tmp_path), pad_token="<pad>"), ctx)
    assert ok.tokenizer.pad_token == "<pad>"
    with pytest.raises(CorlError, match=r"agent 'nopad': prompt '\w+-\d+' is \d+ tokens; with sampler.max_new_tokens = "
                                        r"60 it exceeds the model's 64 positions; lower sampler.max_new_tokens to \d+ or "
                                        r"less, or drop the prompts that long"):
        HFSampler(HFSamplerConfig(max_new_tokens=60), attrs.evolve(ctx, agent=ok))
    with pytest.raises(CorlError, match="agent 'hub': model 'org/model' is not a local folder and could not be fetched"):
        HFAgent(HFAgentConfig(model="org/model"), attrs.evolve(ctx, agent_name="hub"))


def test_checkpoint_state_round_trips_exactly(task, cache_dir, tmp_path):
    agent = make_agent("gpt2-tiny", task)
    opt = grpo(GRPOConfig(lr=1e-2), Context(spec=None, seed=0, agent=agent))
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=4)).sample(agent, task.split("train")[:4], 4)
    opt.step(rollout, [[1.0, 0.0, 1.0, 0.0]] * 4)
    agent.save_state(str(tmp_path / "a"))
    opt.save_state(str(tmp_path / "o"))
    saved = {k: v.clone() for k, v in agent.model.state_dict().items()}
    other = make_agent("gpt2-tiny", task)
    other_opt = grpo(GRPOConfig(lr=1e-2), Context(spec=None, seed=0, agent=other))
    other.load_state(str(tmp_path / "a"))
    other_opt.load_state(str(tmp_path / "o"))
    assert all(torch.equal(saved[k], v) for k, v in other.model.state_dict().items())
    assert other.model.lm_head.weight.data_ptr() == other.model.transformer.wte.weight.data_ptr()  # still tied
    # the next update is identical too
    opt.step(rollout, [[0.0, 1.0, 1.0, 0.0]] * 4)
    other_opt.step(rollout, [[0.0, 1.0, 1.0, 0.0]] * 4)
    assert all(torch.equal(a, b) for a, b in zip(agent.model.parameters(), other.model.parameters()))


def test_chat_template_is_applied_where_the_tokenizer_has_one(task, cache_dir):
    agent = make_agent("llama-tiny", task)
    raw = agent.encode(["1+2="])["input_ids"][0].tolist()
    assert agent.tokenizer.decode(raw) == "<bos>1+2="
    agent.tokenizer.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}*"
    chat = agent.encode(["1+2="])["input_ids"][0].tolist()
    assert agent.tokenizer.decode(chat) == "<bos>1+2=*"  # auto: the template is used, BOS not doubled
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=3)).sample(agent, task.split("train")[:2], 2)
    first = rollout.batch.sequences[0, : rollout.batch.prompt_len].tolist()
    assert agent.tokenizer.decode(first, skip_special_tokens=True).endswith("*")
    raw_agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", prompt_format="raw"),
                        zoo_context(task, "r"))
    raw_agent.tokenizer.chat_template = agent.tokenizer.chat_template
    assert raw_agent.encode(["1+2="])["input_ids"][0].tolist() == raw


def test_micro_batching_does_not_change_the_update(task, cache_dir):
    """Gradient accumulation over micro-batches equals one big batch: the token-mean denominator
    covers the whole minibatch, whatever the micro-batch size."""
    torch.manual_seed(0)
    agent = make_agent("llama-tiny", task)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=4)).sample(agent, task.split("train")[:6], 4)
    rewards = [[1.0, 0.0, 0.0, 1.0], [0.0] * 4, [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [1.0] * 4, [0.0, 1.0, 0, 0]]
    start = {k: v.clone() for k, v in agent.model.state_dict().items()}
    results = []
    for micro in (1, 3, 256):
        agent.model.load_state_dict(start)
        opt = grpo(GRPOConfig(lr=1e-3, micro_batch_size=micro), Context(spec=None, seed=0, agent=agent))
        grads = []
        step = opt.optim.step
        opt.optim.step = lambda: (grads.append([p.grad.clone() for p in opt.params]), step())  # noqa: B023
        metrics = opt.step(rollout, rewards)
        results.append((grads[0], metrics))
    # (compare gradients, not weights: Adam's first step is ~lr * sign(g), which turns rounding
    # noise in near-zero gradients into lr-sized differences)
    for grads, metrics in results[:2]:
        assert all(torch.allclose(g, ref, rtol=1e-4, atol=1e-7) for g, ref in zip(grads, results[2][0]))
        assert metrics["loss"] == pytest.approx(results[2][1]["loss"], abs=1e-6)
    assert results[2][1]["frac_reward_zero_std"] == pytest.approx(2 / 6)
    assert results[2][1]["active_fraction"] == pytest.approx(16 / 24)


def test_zoo_seed_gives_a_second_warm_start_of_the_same_family(task, cache_dir):
    ctx = zoo_context(task, "x")
    a = HFAgent(HFAgentConfig(model="zoo:qwen2-tiny"), ctx)
    b = HFAgent(HFAgentConfig(model="zoo:qwen2-tiny", zoo_seed=1), ctx)
    again = HFAgent(HFAgentConfig(model="zoo:qwen2-tiny", zoo_seed=1), ctx)
    wa, wb, wc = (dict(m.model.named_parameters()) for m in (a, b, again))
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)
    assert all(torch.equal(wb[k], wc[k]) for k in wb)  # same seed, same cached model


@pytest.mark.parametrize("name", sorted(zoo.FAMILIES))
def test_decode_loop_matches_transformers_generate(name, task, cache_dir):
    """The shared-prefill decode loop draws what generate() would: greedy tokens agree exactly, and
    top_k=1 sampling with a repeated prompt cache is greedy for every one of the N copies."""
    agent = make_agent(name, task)
    prompts = task.split("train")[:6]
    ours = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, prompts, 1, greedy=True)
    enc = agent.encode([p.text for p in prompts])
    tok = agent.tokenizer
    with torch.no_grad():
        ref = agent.model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id,
                                   eos_token_id=tok.eos_token_id)
    ref = ref[:, enc["input_ids"].shape[1]:]
    b = ours.batch
    for row in range(len(prompts)):
        n = int(b.completion_mask[row].sum())
        assert b.sequences[row, b.prompt_len:b.prompt_len + n].tolist() == ref[row, :n].tolist()
    top1 = HFSampler(HFSamplerConfig(top_k=1, max_new_tokens=6, batch_size=8)).sample(agent, prompts, 4)
    assert top1.texts == tuple((t[0],) * 4 for t in ours.texts)  # batch_size 8: two prompts per decode call


def test_the_decode_loop_draws_tokens_with_their_probabilities():
    from corl.builtin.hf.backend.decode import draw

    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])  # zero: cut by top-k / top-p (-inf logits)
    logits = probs.log().expand(40000, 5)
    counts = torch.bincount(draw(logits), minlength=5) / 40000
    assert counts[1] == 0 and counts[4] == 0
    assert (counts - probs).abs().max() < 0.01  # 4 standard errors at 40k draws


def test_a_draw_at_the_cdf_total_falls_back_to_the_most_likely_token(monkeypatch):
    # u == the CDF's total (a uniform draw rounded up to 1) is past every entry: the row's argmax, not index V
    from corl.builtin.hf.backend.decode import draw

    monkeypatch.setattr(torch, "rand", lambda n, k, **kw: torch.ones(n, k, **kw))
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0], [3.0, 0.0, 0.0, 0.0]])
    assert draw(logits).tolist() == [1, 0]


def test_huge_prompts_are_refused_by_file_and_line_before_any_model_work(tmp_path, monkeypatch):
    """The 46-row file of megabyte prompts: refused in seconds, naming the file and line of the longest
    and what to change, before the zoo warm-start (nothing cached), without tokenizing whole prompts."""
    import json
    import time

    from corl.builtin.tasks.data import DataConfig, DataTask
    from corl.errors import CorlError

    rows = [{"question": "1+" * 500_000 + "1=", "answer": "2"} for _ in range(46)]
    rows[16]["question"] = "2" + rows[16]["question"]  # the longest: line 17
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "seed.jsonl").write_text("".join(json.dumps({"question": f"{i}+1=", "answer": i + 1}) + "\n"
                                                 for i in range(8)))
    task = DataTask(DataConfig(train=str(tmp_path / "train.jsonl"), seed=str(tmp_path / "seed.jsonl"),
                               answers="integer"))
    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path / "cache"))
    start = time.perf_counter()
    with pytest.raises(CorlError) as info:
        HFAgent(HFAgentConfig(model="zoo:llama-tiny"), zoo_context(task, "a", steps=5))
    assert time.perf_counter() - start < 10  # tokenizing the whole file took over a minute
    assert str(info.value) == (f"agent 'a': prompt {tmp_path}/train.jsonl:17 is more than 64 tokens (1000003 "
                               "characters): it alone fills the model's context of 64 positions (and 45 more "
                               "prompts); shorten or drop such prompts, or use a model with a longer context, or cut "
                               "them with the agent's max_prompt_length")
    assert not (tmp_path / "cache").exists()  # nothing warm-started, nothing cached


def test_a_prompt_near_the_context_is_counted_exactly(tmp_path, cache_dir):
    from corl.builtin.hf.backend.common import capped_texts, measure

    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))
    agent = make_agent("llama-tiny", task)
    texts = ["1+" * 30 + "1=", "1+" * 400 + "1="]  # 62 characters and <bos>; far past 64
    assert agent.token_counts([attrs.evolve(task.split("train")[0], text=t) for t in texts], limit=64)[0] == 63
    assert len(capped_texts(agent.tokenizer, texts, 64)[1]) < len(texts[1])  # counted only so far
    longest = measure(agent, task, 64)
    assert not longest.cut and longest.over == 0 and longest.tokens == max(agent.token_counts(task.split("train")
                                                                                              + task.split("eval")))


def test_a_zoo_model_never_warm_starts_on_nothing(tmp_path, monkeypatch):
    from corl.errors import CorlError

    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    with pytest.raises(CorlError, match=r"^zoo:llama-tiny: the task's labeled seed split is empty: nothing to "
                                        r"warm-start on; give the task labeled seed prompts, or a model folder"):
        zoo.resolve("llama-tiny", [], ZooConfig(steps=5), log=lambda m: None)
    assert not (tmp_path / "zoo").exists()  # no untrained model cached under a trained one's key
    untrained = zoo.resolve("llama-tiny", [], ZooConfig(steps=0), log=lambda m: None)  # asked for: fine
    assert (untrained / "config.json").exists()


def test_the_sampler_polls_the_runs_stop_at_every_decode_step(task, cache_dir):
    """An evaluation of a real model is abandoned inside its decode loop, not after it."""
    import signal

    from corl.context import StopToken
    from corl.errors import Stopping

    agent = make_agent("llama-tiny", task)
    stop = StopToken()
    sampler = HFSampler(HFSamplerConfig(max_new_tokens=6), attrs.evolve(zoo_context(task), agent=agent, stop=stop))
    stop.request(signal.SIGINT)
    assert sampler.sample(agent, task.split("eval"), 2).n == 2  # a training step: the stop waits for its end
    with stop.abandonable(), pytest.raises(Stopping):
        sampler.sample(agent, task.split("eval"), 2)


def test_a_model_folder_without_its_tokenizer_is_refused_in_one_line(task, cache_dir, tmp_path):
    """transformers loads such a folder as an empty tokenizer that encodes every prompt to nothing;
    the agent refuses it when it loads, not with a reshape error inside the sampler's forward."""
    from corl.errors import CorlError

    folder = tmp_path / "weights"
    hf_agent("qwen2-tiny", task).save(str(folder))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(CorlError, match=r"^agent 'a': model '.*weights' has no tokenizer \(its vocabulary has 1 "
                                        r"entries\): save the tokenizer beside the weights"):
        HFAgent(HFAgentConfig(model=str(folder)), Context(spec=None, seed=0, task=task, agent_name="a"))

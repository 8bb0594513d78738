"""Real pretrained models from the co-rl[real] extra: SmolLM2-135M-Instruct and Gemma 3 270M.

Installs nothing: skipped where the extra is missing (CI installs it, see tox.ini). One pass over
what a real run needs: resolve both packaged models (GGUF -> safetensors folder, cached and
reused), format a prompt for each in its own format, sample with stop strings, check the
sampling log-probs against the update's chunked forward, one Co-RL GRPO update on a micro-batch,
then save and reload the checkpoint.
"""

import os
import time
from pathlib import Path

import pytest
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.models import sources as models
from corl.builtin.policy import GRPOConfig, grpo
from corl.builtin.tasks.word_problems import WordProblemsConfig, WordProblemsTask
from corl.context import Context
from corl.errors import CorlError
from corl.recipe import load_recipe
from tests.kit import ROOT

RECIPE = ROOT / "recipes" / "real_smollm2_gemma3.toml"
NAMES = ("smollm2-135m-instruct", "gemma3-270m")
def _missing() -> str | None:
    for name in NAMES:
        try:
            models.check_source(f"pypi:{name}")
        except ValueError as exc:
            return str(exc)
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """The converted models: a persistent cache when the session has one (see conftest), else a fresh folder."""
    if not os.environ.get(models.MODELS_DIR_ENV):
        os.environ[models.MODELS_DIR_ENV] = str(tmp_path_factory.mktemp("models"))
    return Path(os.environ[models.MODELS_DIR_ENV])


@pytest.fixture(scope="module")
def task():
    return WordProblemsTask(WordProblemsConfig(train_size=2, eval_size=0, max_ops=1))


def test_packaged_models_convert_once_and_are_reused(models_dir):
    for name in NAMES:
        folder = Path(models.resolve(f"pypi:{name}", log=lambda m: None))
        assert folder.parent == models_dir and (folder / "model.safetensors").stat().st_size > 100e6
        assert "quantization_config" not in (folder / "config.json").read_text()
        stamp = (folder / "model.safetensors").stat().st_mtime_ns
        start = time.perf_counter()
        assert models.resolve(f"pypi:{name}", log=lambda m: None) == str(folder)
        assert time.perf_counter() - start < 1 and (folder / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("index", [0, 1], ids=["smollm2", "gemma3"])
def test_sample_update_save_reload(index, task, models_dir, tmp_path):
    spec = load_recipe(RECIPE).agents[index]  # the recipe's own prompt format, dtypes and stop strings
    ctx = Context(spec=None, seed=0, task=task, agent_name=spec.name, log=lambda m: None)
    agent = HFAgent(spec.agent.config, ctx)
    prompt = task.split("train")[0]
    text = agent.tokenizer.decode(agent.encode([prompt.text])["input_ids"][0])
    assert prompt.text in text
    if index == 0:  # instruct: the chat template's user turn, then the assistant's turn
        assert "<|im_start|>user" in text and text.rstrip().endswith("<|im_start|>assistant")
    else:  # base: the few-shot template, ending where the answer goes
        assert text.count("Question:") == 3 and "<|im_start|>" not in text

    sampler = HFSampler(attrs_evolve(spec.sampler.config, max_new_tokens=10), ctx)
    torch.manual_seed(0)
    rollout = sampler.sample(agent, [prompt], 4)
    batch = rollout.batch
    assert all(1 <= n <= 10 for n in rollout.lengths[0])
    assert not any(s in t for t in rollout.texts[0] for s in spec.sampler.config.stop)
    with torch.no_grad():  # sampling vs the update forward in the same dtype: the same weights, so close
        logp, entropy = agent.token_logprobs(batch, torch.arange(4))
    mask = batch.completion_mask.bool()
    assert ((logp - batch.old_logprobs).abs()[mask]).max() < 0.25 and (entropy[mask] > 0).all()

    optimizer = grpo(GRPOConfig(lr=1e-5, micro_batch_size=2), Context(spec=None, seed=0, agent=agent))
    before = {k: p.detach().clone() for k, p in agent.model.named_parameters()}
    metrics = optimizer.step(rollout, [[1.0, 0.0, 1.0, 0.0]])
    assert metrics["grad_norm"] > 0 and metrics["nonfinite"] == 0
    after = dict(agent.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)

    agent.save(str(tmp_path / "final"))
    again = HFAgent(HFAgentConfig(model=str(tmp_path / "final"), prompt_format=spec.agent.config.prompt_format,
                                  prompt_template=spec.agent.config.prompt_template), ctx)
    for k, p in again.model.named_parameters():
        assert torch.equal(p, after[k].detach()), k
    assert again.tokenizer.decode(again.encode([prompt.text])["input_ids"][0]) == text


def attrs_evolve(config, **changes):
    import attrs

    return attrs.evolve(config, **changes)


def test_unknown_or_unavailable_sources_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown packaged model; available pypi:smollm2-135m-instruct, pypi:gemma3-270m"):
        models.check_source("pypi:gpt-5")
    with pytest.raises(ValueError, match="no such GGUF file"):
        models.check_source(f"gguf:{tmp_path}/none.gguf")
    with pytest.raises(CorlError, match="could not be fetched from the hub"):
        HFAgent(HFAgentConfig(model="someone/not-here"), Context(spec=None, seed=0, agent_name="a", log=print))

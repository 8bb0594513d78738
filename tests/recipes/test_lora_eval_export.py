"""A LoRA run evaluates and exports through the CLI: `corl eval RUN_DIR` (final and `--step N`,
with and without `export_merged`), from a copy of the run folder whose original path is gone, and
`corl export` writes a folder that transformers alone loads; a run with an import-path reward term
evaluates without CORL_ALLOW_IMPORT_PATHS."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]

RECIPE = """
[run]
name = "lora_run"
steps = 2
seed = 0
prompts_per_step = 4
threads = 1
checkpoint_every = 1
keep_checkpoints = 3

[task]
type = "addition"
train_size = 32
eval_size = 16

[[agents]]
name = "llama"
model = "zoo:llama-add3"
sampler = { type = "hf", temperature = 1.0, max_new_tokens = 6 }
optimizer = { type = "grpo", lr = 0.05, scale_rewards = false }
lora = { rank = 4, alpha = 16.0, export_merged = MERGED }

[voting]
type = "majority"
n_votes = 4
n_train = 4

[topology]
type = "self"

[eval]
size = 16
k = 2
every = 1

[[shaping]]
type = "tests.recipes.test_lora_eval_export:short_answers"
weight = 0.5
"""


def short_answers(completions, **kwargs):
    """A reward term named by import path (the run needs CORL_ALLOW_IMPORT_PATHS; evaluation must not)."""
    return [float(len(c) < 5) for c in completions]


def corl(*args, cache_dir, allow=False):
    env = {k: v for k, v in os.environ.items() if k != "CORL_ALLOW_IMPORT_PATHS"}
    env.update(CORL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), **({"CORL_ALLOW_IMPORT_PATHS": "1"} if allow else {}))
    return subprocess.run([sys.executable, "-m", "corl.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)


def evals_of(run_dir):
    return {r["step"]: r["agents"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if r["kind"] == "eval"}


@pytest.fixture(scope="module", params=[False, pytest.param(True, marks=pytest.mark.slow)], ids=["adapter", "export_merged"])
def moved_run(request, tmp_path_factory, cache_dir):
    """A finished LoRA run, then moved: its recorded paths (recipe.json's output_dir) name nothing now."""
    root = tmp_path_factory.mktemp("lora")
    recipe = root / "lora.toml"
    recipe.write_text(RECIPE.replace("MERGED", str(request.param).lower()))
    res = corl("run", str(recipe), "--set", f"run.output_dir={root / 'run'}", cache_dir=cache_dir, allow=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "evaluating 1 agent(s) on 16 held-out prompts (greedy, and k=2 samples each)" in res.stderr
    assert "Warning" not in res.stderr  # transformers' and peft's are off in runs
    moved = root / "elsewhere" / "run"
    moved.parent.mkdir()
    shutil.move(str(root / "run"), moved)
    recipe.unlink()
    return moved


def test_eval_reads_a_lora_runs_adapters_final_and_at_a_step(moved_run, cache_dir):
    evals = evals_of(moved_run)
    assert evals[2]["llama"] != evals[0]["llama"]  # the adapters did change the model: the check below means something
    final = json.loads((moved_run / "checkpoints" / "final" / "llama" / "adapter_config.json").read_text())
    assert final["base_model_name_or_path"] == "zoo:llama-add3"  # the recipe's name, not a local folder
    for folder in (moved_run / "checkpoints" / "final" / "llama", moved_run / "checkpoints" / "step-000001" / "agents" / "llama"):
        assert all("base_model: zoo:llama-add3" in (folder / "README.md").read_text() and "/" not in line
                   for line in (folder / "adapter_config.json").read_text().splitlines() if "base_model" in line)
    res = corl("eval", str(moved_run), "--json", "--samples", "2", cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["results"]["llama"] == evals[2]["llama"]  # what the run measured with the adapters in memory
    assert out["settings"]["step"] == 2 and {s["step"] for s in out["samples"]} == {2}
    assert out["settings"]["models"]["llama"] == str(moved_run / "checkpoints" / "final" / "llama")
    step1 = json.loads(corl("eval", str(moved_run), "--json", "--step", "1", cache_dir=cache_dir).stdout)
    assert step1["results"]["llama"] == evals[1]["llama"] and step1["settings"]["step"] == 1
    missing = corl("eval", str(moved_run), "--step", "7", cache_dir=cache_dir)
    assert missing.returncode == 2 and "--step 7:" in missing.stderr and "kept: 1, 2" in missing.stderr


def test_a_step_checkpoint_of_adapters_loads_with_peft(moved_run, cache_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from corl.builtin.hf.models.sources import resolve

    folder = moved_run / "checkpoints" / "step-000001" / "agents" / "llama"
    base = AutoModelForCausalLM.from_pretrained(resolve("zoo:llama-add3"))
    model = PeftModel.from_pretrained(base, str(folder))
    assert any(".lora_B." in n and p.abs().sum() > 0 for n, p in model.named_parameters())


def test_export_writes_portable_folders_with_a_model_card(moved_run, cache_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    out = tmp_path / "export"
    res = corl("export", str(moved_run), str(out), cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == [str(out / "llama")]
    folder = out / "llama"
    assert not (folder / "adapter_config.json").exists()  # merged: no base, no peft needed
    for name in ("config.json", "README.md"):
        assert str(moved_run.parent.parent) not in (folder / name).read_text()  # no path of this machine
    card = (folder / "README.md").read_text()
    assert "recipe `lora_run`, seed 0" in card and "LoRA rank 4 adapters merged in" in card
    evals = evals_of(moved_run)
    assert f"| 2 | {evals[2]['llama']['greedy']:.3f} | {evals[2]['llama']['pass@1']:.3f}" in card
    model, tokenizer = AutoModelForCausalLM.from_pretrained(str(folder)), AutoTokenizer.from_pretrained(str(folder))
    generate = pipeline("text-generation", model=model, tokenizer=tokenizer)
    assert generate("123+459=", max_new_tokens=4, do_sample=False)[0]["generated_text"].startswith("123+459=")
    # the same model corl trained: equal to the base with the run's final adapters
    from peft import PeftModel

    from corl.builtin.hf.models.sources import resolve

    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(resolve("zoo:llama-add3")),
                                        str(moved_run / "checkpoints" / "final" / "llama")).eval()
    ids = tokenizer(["123+459=", "7+8="], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.allclose(model.eval()(**ids).logits, adapted(**ids).logits, atol=1e-4)
    again = corl("export", str(moved_run), str(out), cache_dir=cache_dir)
    assert again.returncode == 2 and "exists and is not empty" in again.stderr
    step1 = corl("export", str(moved_run), str(tmp_path / "step1"), "--step", "1", cache_dir=cache_dir)
    assert step1.returncode == 0, step1.stderr[-3000:]
    assert f"| 1 | {evals[1]['llama']['greedy']:.3f}" in (tmp_path / "step1" / "llama" / "README.md").read_text()

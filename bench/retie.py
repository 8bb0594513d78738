"""What re-tying Qwen2.5-Coder-0.5B-Instruct's output matrix changes (pypi:qwen2.5-coder-0.5b-instruct).

The packaged GGUF stores ``output.weight`` apart from ``token_embd.weight`` (the same matrix quantised
another way); corl ties them again, as the model was released. This prints, on the `max` drill's
prompts with the recipe's two-shot template: the relative difference of the two matrices, the
next-token KL(untied || tied) at every prompt position and greedy maj accuracy of both. Never a test.

  python bench/retie.py [PROMPTS] [--threads 1]
"""
import json
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import torch

from corl.builtin.hf.models import sources
from corl.builtin.tasks.drills import DrillsConfig, DrillsTask

THREADS = int(sys.argv.pop(sys.argv.index("--threads") + 1)) if "--threads" in sys.argv else 1
if "--threads" in sys.argv:
    sys.argv.remove("--threads")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 32
torch.set_num_threads(THREADS)
ROOT = Path(__file__).resolve().parents[1]
recipe = tomllib.loads((ROOT / "recipes" / "real" / "max3_pooled.toml").read_text())
template = next(a for a in recipe["agents"] if a["name"] == "qwen_coder")["prompt_template"]

from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

entry = sources.PACKAGED["qwen2.5-coder-0.5b-instruct"]
folder = sources.packaged_folder("qwen2.5-coder-0.5b-instruct", log=print)
with tempfile.TemporaryDirectory() as scratch:
    path = sources.join_parts(entry, Path(scratch) / "q.gguf")
    reader = GGUFReader(str(path))
    t = {x.name: x for x in reader.tensors}
    out_w = torch.from_numpy(dequantize(t["output.weight"].data, t["output.weight"].tensor_type).copy()).float()
    emb_w = torch.from_numpy(dequantize(t["token_embd.weight"].data, t["token_embd.weight"].tensor_type).copy()).float()
tok = AutoTokenizer.from_pretrained(folder)
tied = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
vocab = tied.get_input_embeddings().weight.shape[0]
out_w = out_w.reshape(vocab, -1)
print(json.dumps({"output_vs_embedding_rel_diff": ((out_w - emb_w.reshape(vocab, -1)).norm() / emb_w.norm()).item()}))
untied = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
untied.config.tie_word_embeddings = False
untied.lm_head = torch.nn.Linear(out_w.shape[1], vocab, bias=False)
untied.lm_head.weight = torch.nn.Parameter(out_w)
assert untied.lm_head.weight.data_ptr() != untied.get_input_embeddings().weight.data_ptr()

task = DrillsTask(DrillsConfig(forms=("max",), train_size=1, eval_size=N, seed=2026))
prompts = task.split("eval")
kls, right = [], {"tied": 0, "untied": 0}
start = time.time()
for p in prompts:
    ids = tok(template.format(prompt=p.text), return_tensors="pt")
    with torch.no_grad():
        lt = torch.log_softmax(tied(**ids).logits[0].float(), -1)
        lu = torch.log_softmax(untied(**ids).logits[0].float(), -1)
        kls.append((lu.exp() * (lu - lt)).sum(-1).mean().item())
        for name, model in (("tied", tied), ("untied", untied)):
            out = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.eos_token_id)
            text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
            answer = task.verifier.extract(text.split("Question:")[0])
            right[name] += answer is not None and task.verifier.equivalent(answer, p.label)
print(json.dumps({"prompts": N, "mean_kl_untied_vs_tied_nats": sum(kls) / N, "max_kl": max(kls),
                  "greedy_tied": right["tied"] / N, "greedy_untied": right["untied"] / N,
                  "seconds": round(time.time() - start)}))

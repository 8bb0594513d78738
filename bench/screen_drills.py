"""Screen drill forms on the two packaged real models (SmolLM2 chat, Gemma 3 two-shot: two solved
drills of each form):
pass@1, maj@k and pass@k per form and model, as JSON lines on stdout and appended to OUT. Never a test.

  python bench/screen_drills.py PROMPTS K MAX_NEW_TOKENS FORMS OUT [SMOLLM2_FORMAT] [--threads 2]
  python bench/screen_drills.py 32 8 16 add,max,add1,count,word screen.jsonl        # docs/how-to/real-models.md
  python bench/screen_drills.py 32 8 16 add0,max2,next screen.jsonl raw            # second screen
  python bench/screen_drills.py 96 8 16 max2+next screen.jsonl raw                  # the mixed form

SMOLLM2_FORMAT: chat (default: its chat template, no examples) or raw (the two-shot prompt Gemma gets).

The agents are recipes/real_headroom.toml's (T = 0.7, bf16 sampling), with max_new_tokens and the
Gemma template replaced per form.
"""
import collections
import json
import sys
import time
from pathlib import Path

import attrs
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.tasks.drills import DrillsConfig, DrillsTask, generate
from corl.context import Context
from corl.recipe import load_recipe

THREADS = int(sys.argv.pop(sys.argv.index("--threads") + 1)) if "--threads" in sys.argv else 2
if "--threads" in sys.argv:
    sys.argv.remove("--threads")
N, K, TOK = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
forms = sys.argv[4].split(",")  # a form, or forms mixed with "+" (max2+next: one task drawing both)
out = open(sys.argv[5], "a")
smol_format = sys.argv[6] if len(sys.argv) > 6 else "chat"
spec = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "real_headroom.toml")
torch.set_num_threads(THREADS)
agents = {}
for s in spec.agents:
    ctx = Context(spec=None, seed=0, task=None, agent_name=s.name, log=lambda m: None)
    agents[s.name] = (s, HFAgent(s.agent.config, ctx),
                      HFSampler(attrs.evolve(s.sampler.config, max_new_tokens=TOK, batch_size=N * K), None))
for form in forms:
    task = DrillsTask(DrillsConfig(forms=tuple(form.split("+")), train_size=1, eval_size=N, seed=1234))
    prompts, ver = task.split("eval"), task.verifier
    shots = [shot for f in form.split("+") for shot in generate(2, 99, (f,))]  # two solved drills of each form
    for name, (_, agent, sampler) in agents.items():
        raw = name == "gemma3" or smol_format == "raw"
        if raw:  # two solved drills of each form, then the question
            tpl = "".join(f"Question: {q} End with 'Answer: <number>'.\nAnswer: {a}\n\n" for q, a in shots)
            tpl += "Question: {prompt}\n"
            agent.config = attrs.evolve(agent.config, prompt_template=tpl, prompt_format="raw")
            sampler.config = attrs.evolve(sampler.config, stop=("Question:",))
        t = time.time()
        torch.manual_seed(0)
        r = sampler.sample(agent, prompts, K, temperature=0.7)
        right, maj = [], []
        for p, texts in zip(prompts, r.texts):
            ans = [ver.extract(x) for x in texts]
            truth = ver.label(p.label)
            ok = [a is not None and ver.equivalent(a, truth) for a in ans]
            right.append(sum(ok) / K)
            votes = collections.Counter(a for a in ans if a is not None)
            top = votes.most_common(1)[0][0] if votes else None
            maj.append(top is not None and ver.equivalent(top, truth))
        row = {"form": form, "model": name, "format": "raw" if raw else "chat", "n": N, "k": K, "max_new_tokens": TOK, "pass@1": sum(right) / N,
               "maj@k": sum(maj) / N, "pass@k": sum(x > 0 for x in right) / N, "seconds": round(time.time() - t),
               "examples": [[prompts[i].text, r.texts[i][0], prompts[i].label] for i in range(2)]}
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()

"""Write tests/fixtures/real_completions.jsonl: real completions of SmolLM2-135M-Instruct and Gemma 3 270M
on word problems, each with the answer a person reads in it (or none), for the ``math`` extractor's test.

    CORL_CACHE_DIR=/work/cache OMP_NUM_THREADS=1 python scripts/make_answer_fixture.py [--per-prompt-set 60]

Needs the real extra (docs/how-to/real-models.md). Sampling at temperature 0.7, up to 80 new tokens, seeded
(each finished set is kept beside the fixture as a hidden part file, so an interrupted run resumes).
The ``reads`` field comes from :func:`person_reads`: hand-written rules, independent of the extractor,
reviewed by hand on a sample (a wrong one is corrected in ``OVERRIDES``, keyed by the line's id).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real_completions.jsonl"
INSTRUCTION = "End with 'Answer: <number>'."
# GSM8K-style problems written for this fixture (the built-in generator's stories are one family).
GSM8K_STYLE = [
    ("Bob had 25 stickers. He gave away 4 stickers to his sister. How many stickers does Bob have now?", 21),
    ("Anna picks 10 apples in the morning and 11 apples in the afternoon. How many apples does she pick?", 21),
    ("A pen costs 3 dollars. How much do 7 pens cost?", 21),
    ("Tom has 48 marbles and shares them equally among 4 friends. How many marbles does each friend get?", 12),
    ("A class has 14 girls and 17 boys. How many students are in the class?", 31),
    ("Sara bakes 36 cookies and eats 9 of them. How many cookies are left?", 27),
    ("A train travels 60 miles every hour. How far does it travel in 3 hours?", 180),
    ("Leo saves 5 dollars a week for 8 weeks. How much money has he saved?", 40),
    ("There are 9 birds on a tree. 6 more birds land on it. How many birds are on the tree now?", 15),
    ("A box holds 6 eggs. How many eggs are in 5 boxes?", 30),
    ("Mia had 50 dollars. She spent 18 dollars on a book. How much money does she have left?", 32),
    ("A farmer has 7 rows of corn with 8 plants in each row. How many corn plants are there?", 56),
]
FEW_SHOT = ("Question: Sam has 12 pens. He buys 5 more pens. How many pens does Sam have now? {instruction}\n"
            "12 + 5 = 17. Answer: 17\n\n"
            "Question: A shop has 30 cups. It sells 8 cups. How many cups does the shop have now? {instruction}\n"
            "30 - 8 = 22. Answer: 22\n\nQuestion: {prompt}\n")
# (model, prompt form, stop): the chat model as the user turn, the base model few-shot and zero-shot.
SETS = [("pypi:smollm2-135m-instruct", "chat", None), ("pypi:gemma3-270m", "few_shot", "Question:"),
        ("pypi:gemma3-270m", "zero_shot", "Question:")]

_NUM = r"-?\d[\d,]*(?:\.\d+)?"
_TAGS = re.compile(r"</?[A-Za-z][^<>\n]*>")  # markup and placeholders (<strong>, an echoed <number>)
_ANCHOR = re.compile(r"answer\s+is\b|answer\s*:|\\boxed\{|####", re.IGNORECASE)
# A number, or a sum of numbers, right after the anchor ("Answer: 21 apples", "The answer is 45 / 4 (about)").
_FIRST = re.compile(rf"[\s*:$\"'`]*({_NUM}(?:\s*[-+*/x×=]\s*{_NUM})*)")
_CALC = re.compile(r"<<[^<>]*>>")
_WHY = re.compile(r"\(|\bbecause\b|\bsince\b|,\s*which\b", re.IGNORECASE)
_FINISHED = re.compile(r"(?:[.!?)\]}\"'$`]|\S\*)[ \t]*$")  # (a dangling "2 *" is unfinished)
_NAMED = re.compile(rf"({_NUM})\s+is\s+the\s+(?:final\s+)?answer", re.IGNORECASE)  # "6 is the answer"
# Overrides after review: {id: the answer a person reads, or None}.
OVERRIDES: dict[str, str | None] = {
    "gemma3-zero_shot-4": "6, 8, 10, 12, 14, 16",  # "<strong>Answer</strong>: 6, 8, 10, ...": a list is stated
    "gemma3-zero_shot-56": "D",  # "<strong>Answer:</strong>\n\n<strong>D</strong>": the choice it made up
    # Finished texts without a marker whose last number a person does not read as an answer (rule 2's
    # flexible reading takes it all the same; the extractor's fallback reads none, by its general rules):
    "smollm2-chat-25": None,  # "... would add 1.5 boxes, and the original question is about the number of boxes"
    "smollm2-chat-31": None,  # "... the same amount as the night before, which is 5 times more than ..."
    "smollm2-chat-52": None,  # "If there are 5 boxes, there are 6 eggs in 1 box."
    "smollm2-chat-62": None,  # "... the puzzle \"A pen costs 3 dollars. How much does a pen cost?\" ..."
    "smollm2-chat-73": None,  # "... which is 45% of the total eggs."
    "smollm2-chat-93": None,  # "3. Omar earns 2 dollars washing cars." (restating the problem)
    "smollm2-chat-119": None,  # "... Maya has an additional apple." (after "Maya's original apples = 4")
    "gemma3-zero_shot-8": None,  # a list of options "a. 12. ... j. 72.", none chosen
    "gemma3-zero_shot-16": None,  # "Answers:\n2\n1\n3\n5\n(40, 3)\n(3, 4)\n(40, 5)"
    "gemma3-zero_shot-55": None,  # questions of its own, numbered "5. ... 6."
    "gemma3-zero_shot-62": None,  # a list of options "a) 3,933 girls ... h) 3,943 girls", none chosen
}


def _number(s: str) -> str:
    """A number as a person writes it down; a sum as its result's expression ("45 / 4"; "2 + 3 = 5" -> "5")."""
    s = s.split("=")[-1].strip().replace(",", "").rstrip(".").replace("x", "*").replace("×", "*")
    return s[:-2] if s.endswith(".0") else s


def person_reads(text: str) -> str | None:
    """What a person reads as the stated answer, by hand-written rules (not the extractor's code):

    1. after the last "the answer is" / "Answer:" / ``\\boxed{`` / ``####`` that states a number (or before
       the last "is the answer": "The number 6 is the answer"): the number
       right after it, or, where words come first, the last number of that sentence before any "(",
       "because" or "since" ("the answer is the total, 12 + 5 = 17" -> 17); placeholders and markup
       (an echoed "<number>", "</strong>") state nothing, so an earlier marker counts then;
    2. no marker states a number: the last number of the text (GSM8K's flexible reading), unless the text
       stops mid-sentence (no closing punctuation, no line ended) after a finished sentence (cut off
       by the token limit while still working: it states nothing); none without a number.
    """
    text = _CALC.sub(" ", _TAGS.sub(" ", text))
    named = list(_NAMED.finditer(text))
    for anchor in reversed(list(_ANCHOR.finditer(text))):
        if named and named[-1].start() > anchor.start():
            return _number(named[-1].group(1))
        first = _FIRST.match(text, anchor.end())
        if first:
            return _number(first.group(1))
        sentence = re.split(r"\.(?:\s|$)|\n\n", text[anchor.end():].lstrip(" :*\n"), maxsplit=1)[0]
        why = _WHY.search(sentence)
        numbers = re.findall(_NUM, sentence[: why.start()] if why else sentence)
        if numbers:
            return _number(numbers[-1])
    if named:
        return _number(named[-1].group(1))
    ended = _FINISHED.search(text) or text.rstrip(" \t").endswith("\n")
    if text.strip() and not ended and re.search(r"[.!?]\s|\n", text.strip()):
        return None
    numbers = re.findall(_NUM, text)
    return _number(numbers[-1]) if numbers else None


def _prompts(n: int, rng: random.Random) -> list[tuple[str, int]]:
    from corl.builtin.tasks.word_problems import generate

    built = generate(n, seed=rng.randrange(10**6), min_ops=1, max_ops=2)
    pool = built[: n - n // 4] + [rng.choice(GSM8K_STYLE) for _ in range(n // 4)]
    rng.shuffle(pool)
    return pool


def _generate(model_source: str, form: str, stop: str | None, problems, seed: int, batch: int = 16,
              max_new_tokens: int = 80):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from corl.builtin.hf.models.sources import resolve

    folder = resolve(model_source)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    texts = []
    for question, _ in problems:
        asked = f"{question} {INSTRUCTION}"
        if form == "chat":
            texts.append(tok.apply_chat_template([{"role": "user", "content": asked}], tokenize=False,
                                                 add_generation_prompt=True))
        elif form == "few_shot":
            texts.append(FEW_SHOT.format(instruction=INSTRUCTION, prompt=asked))
        else:
            texts.append(f"Question: {asked}\n")
    torch.manual_seed(seed)
    out = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i: i + batch], return_tensors="pt", padding=True, add_special_tokens=form != "chat")
        with torch.no_grad():
            gen = model.generate(**enc, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                                 stop_strings=[stop] if stop else None, tokenizer=tok)
        for row in gen[:, enc["input_ids"].shape[1]:]:
            completion = tok.decode(row, skip_special_tokens=True)
            if stop and stop in completion:
                completion = completion[: completion.index(stop)]
            out.append(completion)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-set", type=int, nargs=3, default=[128, 96, 64],
                        help="completions per (model, prompt form), in the order of SETS")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--relabel", action="store_true", help="only recompute 'reads' of the existing fixture")
    args = parser.parse_args(argv)
    if args.relabel:
        rows = [json.loads(line) for line in OUT.read_text().splitlines()]
    else:
        rows = []
        rng = random.Random(args.seed)
        for s, ((source, form, stop), count) in enumerate(zip(SETS, args.per_set)):
            problems = _prompts(count, rng)
            name = source.split(":")[1].split("-")[0]
            part = OUT.with_name(f".{OUT.stem}.{name}-{form}.jsonl")  # a finished set is kept: a rerun resumes
            if part.exists():
                rows += [json.loads(line) for line in part.read_text().splitlines()]
                continue
            started = time.process_time()
            completions = _generate(source, form, stop, problems, args.seed + s)
            print(f"{source} {form}: {len(completions)} completions in {time.process_time() - started:.0f} s of CPU",
                  flush=True)
            done = [{"id": f"{name}-{form}-{i}", "question": question, "label": str(answer), "completion": completion}
                    for i, ((question, answer), completion) in enumerate(zip(problems, completions))]
            part.parent.mkdir(parents=True, exist_ok=True)
            part.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done))
            rows += done
    for row in rows:
        row["reads"] = OVERRIDES.get(row["id"], person_reads(row["completion"]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} lines to {OUT}")


if __name__ == "__main__":
    main()

"""Write small sample files in the layouts real data sets come in, under data/ (a few rows each,
deterministic), so that each layout is tested end to end (tests/unit/builtin/tasks/test_layouts.py)
and docs/how-to/data-and-evaluation.md can show how to bring such a file in.

    python scripts/make_layout_samples.py [OUT_DIR]      # needs pyarrow (pip install 'corl[data]')

* ``math500_sample.jsonl``: MATH-500's columns (``problem``, ``solution``, ``answer``, ``subject``,
  ``level``, ``unique_id``); ``answer`` is bare LaTeX with no marker, of every kind that data set
  has: fractions, radicals, powers, polynomials, points, intervals, unions, lists, text.
* ``chat_sample.jsonl``: a ``messages`` column (system, user, assistant turns); the assistant turn
  is a worked solution ending in ``\\boxed{}``.
* ``trl_sample.jsonl``: TRL's conversational layout: ``prompt`` is a list of messages (system and
  user), ``solution`` the bare answer.
* ``verl_sample.parquet``: verl's layout: ``data_source``, ``prompt`` (a list of messages),
  ``ability``, ``reward_model`` (a table with ``style`` and ``ground_truth``), ``extra_info``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# (problem, worked solution, bare answer, subject, level): answers as MATH-500 writes them
MATH500 = [
    (r"Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer in the "
     r"form $(r,\theta),$ where $r > 0$ and $0 \le \theta < 2 \pi.$",
     r"We have that $r = \sqrt{0^2 + 3^2} = 3.$  The point lies on the positive $y$-axis, so "
     r"$\theta = \frac{\pi}{2}.$  Therefore, the polar coordinates are $\boxed{\left( 3, \frac{\pi}{2} \right)}.$",
     r"\left( 3, \frac{\pi}{2} \right)", "Precalculus", 2),
    (r"Simplify $\frac{18}{36}.$", r"Both are multiples of $18$, so $\frac{18}{36} = \boxed{\frac{1}{2}}.$",
     r"\frac{1}{2}", "Prealgebra", 1),
    (r"Write $\frac{54}{42}$ in lowest terms.", r"Dividing both by $6$ gives $\boxed{\dfrac{9}{7}}.$",
     r"\dfrac{9}{7}", "Prealgebra", 1),
    ("A right triangle has a hypotenuse of length $4$ and a leg of length $2$.  How long is the other leg?",
     r"By the Pythagorean theorem the other leg is $\sqrt{4^2 - 2^2} = \sqrt{12} = \boxed{2\sqrt{3}}.$",
     r"2\sqrt{3}", "Geometry", 2),
    ("Expand and simplify $(x+1)^2 - 2x$.", r"We have $(x+1)^2 - 2x = x^2 + 2x + 1 - 2x = \boxed{x^2+1}.$",
     "x^2+1", "Algebra", 2),
    ("What is the vertex of the parabola $y = (x-3)^2 + 4$?  Enter your answer as an ordered pair.",
     r"The parabola is in vertex form, so its vertex is $\boxed{(3, 4)}.$", "(3, 4)", "Algebra", 2),
    ("How many subsets does a set with $10$ elements have?  Express your answer as a power of $2$.",
     r"Each element is either in a subset or not, so there are $\boxed{2^{10}}$ subsets.",
     "2^{10}", "Counting & Probability", 2),
    (r"Find the domain of $f(x) = \sqrt{x - 2} + \frac{1}{x - 5}$.  Express your answer in interval notation.",
     r"We need $x \ge 2$ and $x \ne 5$, so the domain is $\boxed{[2, 5) \cup (5, \infty)}.$",
     r"[2, 5) \cup (5, \infty)", "Algebra", 4),
    ("Find all real solutions of $x^2 - 4x + 3 = 0$.  Enter all the solutions, separated by commas.",
     r"Factoring gives $(x - 1)(x - 3) = 0$, so the solutions are $\boxed{1, 3}.$", "1, 3", "Algebra", 1),
    ("Evelyn ran a mile in $7$ minutes, Briana in $8$ and Carla in $9$.  Which student had the greatest "
     "average speed?", r"The fastest runner took the least time, so the answer is $\boxed{\text{Evelyn}}.$",
     r"\text{Evelyn}", "Algebra", 1),
]

SYSTEM = "You are a careful mathematician. Reason step by step and put the final answer in \\boxed{}."

GSM8K = [
    ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
     "clips did Natalia sell altogether in April and May?",
     "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in "
     "April and May.\n#### 72", "72"),
    ("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did "
     "she earn?", "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
     "$<<0.2*50=10>>10.\n#### 10", "10"),
    ("Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her "
     "parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. How "
     "much more money does Betty need to buy the wallet?",
     "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty's grandparents gave her 15 * 2 = "
     "$<<15*2=30>>30.\nThis means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5", "5"),
    ("James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
     "He writes each friend 3*2=<<3*2=6>>6 pages a week\nSo he writes 6*2=<<6*2=12>>12 pages every week\nThat "
     "means he writes 12*52=<<12*52=624>>624 pages a year\n#### 624", "624"),
]
VERL_INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."


def math500() -> list[dict]:
    return [{"problem": p, "solution": s, "answer": a, "subject": subject, "level": level,
             "unique_id": f"test/{subject.lower().split()[0]}/{i}.json"}
            for i, (p, s, a, subject, level) in enumerate(MATH500)]


def chat() -> list[dict]:
    return [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p},
                          {"role": "assistant", "content": s}]} for p, s, *_ in MATH500[:5]]


def trl() -> list[dict]:
    return [{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}], "solution": a}
            for p, _, a, *_ in MATH500[5:]]


def verl() -> list[dict]:
    rows = []
    for i, (q, solution, answer) in enumerate(GSM8K):
        rows.append({"data_source": "openai/gsm8k",
                     "prompt": [{"role": "user", "content": f"{q} {VERL_INSTRUCTION}"}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
                     "extra_info": {"split": "train", "index": i, "answer": solution, "question": q}})
    for i, (p, _, answer, *_) in enumerate(MATH500[:4]):
        rows.append({"data_source": "HuggingFaceH4/MATH-500",
                     "prompt": [{"role": "user", "content": f"{p} Let's think step by step and output the final "
                                                           "answer within \\boxed{}."}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
                     "extra_info": {"split": "test", "index": i, "answer": answer, "question": p}})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows):3d} rows to {path}")


def write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    print(f"wrote {len(rows):3d} rows to {path}")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "math500_sample.jsonl", math500())
    write_jsonl(out / "chat_sample.jsonl", chat())
    write_jsonl(out / "trl_sample.jsonl", trl())
    write_parquet(out / "verl_sample.parquet", verl())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data")

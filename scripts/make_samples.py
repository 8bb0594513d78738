"""Write the sample data files under data/ (deterministic: same files on every run).

    python scripts/make_samples.py [OUT_DIR]

* ``gsm8k_sample.jsonl``: GSM8K-style word problems, ``question`` / ``answer`` (a short worked
  solution with ``<<a*b=c>>`` calculator notes, ending in ``#### N``).
* ``math_sample.jsonl``: MATH-style problems, ``problem`` / ``solution`` ending in ``\\boxed{...}``
  (integers, fractions, radicals, a nested-brace answer).
* ``arith_{train,eval,seed}.jsonl``: prompts in the synthetic arithmetic task's own style
  (``12+34=``, ``3*4+5=``; answers are the integer), disjoint, so the tiny char-level zoo models
  can run on a data-file recipe (recipes/data_file.toml).
"""

from __future__ import annotations

import json
import math
import random
import sys
from fractions import Fraction
from pathlib import Path

SEED = 20240601
ARITH_SIZES = {"seed": 2000, "train": 512, "eval": 200}


def gsm8k(rng: random.Random) -> list[dict]:
    names = ["Natalia", "Betty", "Julie", "Tina", "Alexis", "Maria", "Hannah", "Sofia", "Emma", "Grace"]
    rows = []
    for i in range(40):
        name = names[i % len(names)]
        kind = i % 5
        if kind == 0:
            a, b = rng.randint(12, 80), rng.randint(2, 9)
            q = (f"{name} sold clips to {a} of her friends in April, and then she sold {b} times as many clips in May. "
                 "How many clips did she sell altogether in April and May?")
            steps = [f"In May she sold {a}*{b} = <<{a}*{b}={a * b}>>{a * b} clips.",
                     f"Altogether she sold {a}+{a * b} = <<{a}+{a * b}={a + a * b}>>{a + a * b} clips."]
            ans = a + a * b
        elif kind == 1:
            rate, hours = rng.randint(8, 30), rng.randint(3, 12)
            q = (f"{name} earns ${rate} an hour for babysitting. Yesterday, {name} did {hours} hours of babysitting. "
                 f"How much did {name} earn?")
            steps = [f"{name} earned {rate}*{hours} = $<<{rate}*{hours}={rate * hours}>>{rate * hours}."]
            ans = rate * hours
        elif kind == 2:
            price, count, paid = rng.randint(3, 15), rng.randint(2, 6), 100
            cost = price * count
            q = (f"{name} buys {count} notebooks that cost ${price} each and pays with a ${paid} bill. "
                 "How much change does the cashier give back?")
            steps = [f"The notebooks cost {count}*{price} = $<<{count}*{price}={cost}>>{cost}.",
                     f"The change is {paid}-{cost} = $<<{paid}-{cost}={paid - cost}>>{paid - cost}."]
            ans = paid - cost
        elif kind == 3:
            per_day, days, weeks = rng.randint(120, 450), 7, rng.randint(2, 5)
            total = per_day * days * weeks
            q = (f"A bakery makes {per_day} loaves of bread every day. How many loaves does it make in {weeks} weeks?")
            steps = [f"A week is {days} days, so it bakes {per_day}*{days} = <<{per_day}*{days}={per_day * days}>>"
                     f"{per_day * days} loaves a week.",
                     f"In {weeks} weeks it bakes {per_day * days}*{weeks} = <<{per_day * days}*{weeks}={total}>>"
                     f"{total:,} loaves."]
            ans = total
        else:
            pages, read = rng.randint(120, 400) // 4 * 4, rng.randint(10, 30)
            half = pages // 2
            q = (f"{name} is reading a {pages}-page book. She read half of it last week and {read} pages today. "
                 "How many pages are left to read?")
            steps = [f"Last week she read {pages}/2 = <<{pages}/2={half}>>{half} pages.",
                     f"So far she read {half}+{read} = <<{half}+{read}={half + read}>>{half + read} pages.",
                     f"She has {pages}-{half + read} = <<{pages}-{half + read}={pages - half - read}>>"
                     f"{pages - half - read} pages left."]
            ans = pages - half - read
        # GSM8K writes large final answers without commas in a few rows and with them in others.
        final = f"{ans:,}" if ans >= 1000 and i % 2 else str(ans)
        rows.append({"question": q, "answer": "\n".join(steps) + f"\n#### {final}"})
    return rows


def _tex(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    return f"{sign}\\frac{{{abs(x.numerator)}}}{{{x.denominator}}}"


def _radical(n: int) -> tuple[int, int]:
    """sqrt(n) = k * sqrt(m) with m square-free."""
    k = 1
    for f in range(2, int(math.isqrt(n)) + 1):
        while n % (f * f) == 0:
            n //= f * f
            k *= f
    return k, n


def math_problems(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(30):
        kind = i % 5
        if kind == 0:
            b, d = rng.randint(2, 9), rng.randint(2, 9)
            a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
            x = Fraction(a, b) + Fraction(c, d)
            p = f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$. Express your answer as a common fraction."
            s = (f"With the common denominator ${b * d}$ the sum is $\\frac{{{a * d} + {c * b}}}{{{b * d}}}"
                 f" = \\boxed{{{_tex(x)}}}$.")
        elif kind == 1:
            a, b, c = rng.randint(2, 9), rng.choice([*range(-20, 0), *range(1, 21)]), rng.randint(-20, 20)
            x = Fraction(c - b, a)
            p = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}$."
            s = f"Moving the constant to the right gives ${a}x = {c - b}$, so $x = \\boxed{{{_tex(x)}}}$."
        elif kind == 2:
            k0, m0 = rng.randint(2, 6), rng.choice([2, 3, 5, 6, 7])
            k, m = _radical(k0 * k0 * m0)
            p = f"Simplify $\\sqrt{{{k0 * k0 * m0}}}$."
            n = k0 * k0 * m0
            s = f"Since ${n} = {k * k} \\cdot {m}$, $\\sqrt{{{n}}} = \\boxed{{{k}\\sqrt{{{m}}}}}$."
        elif kind == 3:
            r1 = r2 = 0
            while r1 + r2 == 0 or r1 * r2 == 0:  # no "+ 0x" or "- 0" terms
                r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
            b, c = -(r1 + r2), r1 * r2
            p = (f"What is the sum of the roots of $x^2 {'+' if b >= 0 else '-'} {abs(b)}x "
                 f"{'+' if c >= 0 else '-'} {abs(c)} = 0$?")
            s = f"By Vieta's formulas the sum of the roots is $-\\frac{{b}}{{a}} = \\boxed{{{r1 + r2}}}$."
        else:
            # Nested braces in the boxed answer: \boxed{\frac{\sqrt{3}}{2}} and friends.
            sines = [(30, "\\frac{1}{2}"), (60, "\\frac{\\sqrt{3}}{2}"), (45, "\\frac{\\sqrt{2}}{2}")]
            angle, value = sines[i // 5 % 3]
            p = f"Compute $\\sin {angle}^\\circ$."
            s = f"From the special right triangle, $\\sin {angle}^\\circ = \\boxed{{{value}}}$."
        rows.append({"problem": p, "solution": s})
    return rows


def arithmetic(rng: random.Random) -> dict[str, list[dict]]:
    """The arithmetic task's problems (a+b with a, b < 100; a*b+c with a, b < 10, c < 100), split disjointly."""
    pool = [(f"{a}+{b}=", a + b) for a in range(100) for b in range(100)]
    pool += [(f"{a}*{b}+{c}=", a * b + c) for a in range(10) for b in range(10) for c in range(100)]
    rng.shuffle(pool)
    out, start = {}, 0
    for split, size in ARITH_SIZES.items():
        out[split] = [{"question": q, "answer": str(a)} for q, a in pool[start: start + size]]
        start += size
    return out


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows):5d} rows to {path}")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write(out / "gsm8k_sample.jsonl", gsm8k(random.Random(SEED)))
    write(out / "math_sample.jsonl", math_problems(random.Random(SEED + 1)))
    for split, rows in arithmetic(random.Random(SEED + 2)).items():
        write(out / f"arith_{split}.jsonl", rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data")

"""The docs' examples and figures agree with the files they name: a `corl eval` example compares with
the recipe's own base, README's quick-start figures are its table's and name the threads the recipe
runs with, and every extra is documented in the form that keeps an editable checkout editable."""

import re
import tomllib

import pytest

from tests.unit.test_doc_paths import PAGES, ROOT

README = (ROOT / "README.md").read_text()
RING = tomllib.loads((ROOT / "recipes" / "three_agent_ring.toml").read_text())
EVAL_WITH_BASE = re.compile(r"corl eval (?P<recipe>recipes/\S+\.toml)(?P<args>.*?--model base=(?P<base>\S+).*)")


def eval_examples() -> list[tuple[str, str, str, str]]:
    """(page:line, recipe, base, the rest of the command) of each `corl eval RECIPE ... --model base=X`."""
    out = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if m := EVAL_WITH_BASE.search(line):
                out.append((f"{page.relative_to(ROOT)}:{n}", m["recipe"], m["base"].strip("`'\""), m["args"]))
    return out


def test_an_eval_example_compares_with_the_recipes_own_base():
    examples = eval_examples()
    assert examples  # docs/how-to/data-and-evaluation.md's
    for where, recipe, base, args in examples:
        agents = {a["name"]: a["model"] for a in tomllib.loads((ROOT / recipe).read_text())["agents"]}
        tuned = re.search(r"--model \w+=\S*/final/(\w+)", args)
        expected = {agents[tuned[1]]} if tuned else set(agents.values())
        assert base in expected, f"{where}: base={base}, but {recipe}'s base is one of {sorted(expected)}"


TABLE_ROW = re.compile(r"│ (?P<agent>\w+)\s+│[^│]*│ (?P<pass1>[\d.]+) -> [\d.]+ \((?P<gain>[+-][\d.]+) ± (?P<se>[\d.]+)\) "
                       r"│ (?P<maj>[\d.]+) ->")


def _range(values) -> str:
    rounded = [int(v + 0.5) for v in values]  # as a person rounds: 65.5 -> 66
    return f"{min(rounded)}-{max(rounded)}"


def test_readme_quick_start_figures_are_its_tables():
    rows = [m.groupdict() for m in TABLE_ROW.finditer(README)]
    assert [r["agent"] for r in rows] == [a["name"] for a in RING["agents"]]
    base_pass1 = _range(100 * float(r["pass1"]) for r in rows)
    base_maj = _range(100 * float(r["maj"]) for r in rows)
    stated = f"pass@1 {base_pass1}%, maj@8 {base_maj}%"
    quick_start = " ".join(README.split("## Quick start", 1)[1].split("```", 1)[0].split())
    assert stated in quick_start, f"README's quick start should say {stated!r}"
    recipe_comment = " ".join((ROOT / "recipes" / "three_agent_ring.toml").read_text().replace("#", " ").split())
    assert stated in recipe_comment
    gains = _range(float(r["gain"]) for r in rows)
    errors = _range(float(r["gain"]) / float(r["se"]) for r in rows)
    assert f"each agent gains {gains} points of held-out pass@1, {errors} times the evaluation's standard error" \
        in quick_start


def test_readme_says_which_threads_its_table_used_and_they_are_the_recipes():
    after_table = " ".join(README.split("changes in points; pass@1's ± is", 1)[1].split("Under `runs/", 1)[0].split())
    threads = re.findall(r"`run\.threads = (\d+)`", after_table)
    assert threads == [str(RING["run"]["threads"])], "the paragraph under README's table names the recipe's threads"
    title = re.search(r"(\w+): held-out accuracy before -> after (\d+) steps \((\d+) prompts, k=(\d+), (\d+)s\)", README)
    assert title and title[1] == RING["run"]["name"] and int(title[2]) == RING["run"]["steps"]
    assert int(title[3]) == RING["task"]["eval_size"] and f"its {title[5]} s were on" in after_table


EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
INSTALL_FROM_CHECKOUT = re.compile(r"pip install (?P<flags>(?:-\S+ )*)'\.\[(?P<extras>[\w,-]+)\]'")


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_extra_is_documented(extra):
    extras_paragraph = README.split("Extras, each installed in a checkout as", 1)[1].split("\n\n", 1)[0]
    installed = any(re.search(rf"pip install [^\n`]*\[(?:[\w-]+,)*{re.escape(extra)}[],]", page.read_text())
                    for page in PAGES)
    assert f"`{extra}`" in extras_paragraph or installed, f"the {extra!r} extra is in no doc"


def test_a_checkout_installs_its_extras_in_the_editable_form():
    assert "`pip install -e '.[NAME]'`" in README  # README's Extras paragraph
    found = []
    for page in PAGES:
        text = " ".join(page.read_text().split())
        for m in INSTALL_FROM_CHECKOUT.finditer(text):
            found.append(m["extras"])
            # a plain '.[X]' only where the docs warn against it ("a plain `pip install '.[X]'` after -e .")
            warned = "plain" in text[max(m.start() - 20, 0): m.start()]
            assert "-e" in m["flags"].split() or warned, f"{page.relative_to(ROOT)}: {text[m.start() - 60: m.end() + 60]}"
    assert {"data", "real"} <= set(found)

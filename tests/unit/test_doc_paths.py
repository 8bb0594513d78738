"""Every repository path the docs and README.md quote exists: a link (``[text](../corl/x.py)``,
relative to its page) or a quoted path (```corl/runtime/step.py```, ```recipes/real/x.toml```,
relative to the repository root). A page that cites a file which moved or was deleted fails here."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: the repository's top-level folders a quoted path starts with
TOP = ("corl", "recipes", "docs", "bench", "tests", "scripts", "examples", "plugins", "data", ".ci")
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP)})/[^\s`'\",;:()]*)")
PLACEHOLDER = re.compile(r"[*{}<>\[\]]|\.\.\.|NAME|RUN|OUT")
#: quoted on a page but not meant as files of this repository
NOT_FILES = {
    "corl/run/",  # architecture.md: the name the run package does not take
    "data/charts_train.jsonl", "data/img/0012.png",  # vision.md: an error message about a user's own data
    "data/partNN.bin",  # how-to/real-models.md: a file inside third-party packages
}


def quoted_paths(page: Path) -> list[tuple[int, str, Path]]:
    """(line, as written, the file it names) for each repository path on ``page``."""
    out = []
    for n, line in enumerate(page.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            target = target.split("#")[0]
            if target and not re.match(r"[a-z]+:", target):  # not http:, mailto:
                out.append((n, target, (page.parent / target).resolve()))
        for code in re.findall(r"`([^`]+)`", line):
            for path in QUOTED.findall(code):
                path = path.rstrip(".")
                if not PLACEHOLDER.search(path) and path not in NOT_FILES:
                    out.append((n, path, ROOT / path.rstrip("/")))
    return out


def test_the_pages_quote_paths():
    assert sum(len(quoted_paths(p)) for p in PAGES) > 100  # the patterns still find them


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_path_a_page_quotes_exists(page):
    missing = [f"{page.relative_to(ROOT)}:{n}: {text}" for n, text, path in quoted_paths(page) if not path.exists()]
    assert not missing, "no such file:\n" + "\n".join(missing)


def test_every_page_sits_on_a_shelf_and_readme_lists_it():
    """docs/ by purpose: how-to guides, reference, explanation and measured results (the tutorial is
    README's quick start); README.md links every page."""
    readme = (ROOT / "README.md").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        rel = page.relative_to(ROOT).as_posix()
        assert page.parent.name in ("how-to", "reference", "explanation", "results"), f"{rel}: on no shelf"
        assert f"]({rel})" in readme, f"README.md does not list {rel}"


def test_every_page_the_code_and_recipes_cite_exists():
    """Messages, docstrings, recipe comments and scripts that send a reader to a page name one that exists."""
    cited = re.compile(r"(?<![\w/.-])docs/[\w/.-]*?\.md")
    missing = []
    for folder in ("corl", "recipes", "bench", "scripts", "plugins", "examples", "tests"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".toml", ".md") or "__pycache__" in path.parts or path == Path(__file__):
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                missing += [f"{path.relative_to(ROOT)}:{n}: {m}" for m in cited.findall(line) if not (ROOT / m).exists()]
    assert not missing, "no such page:\n" + "\n".join(missing)


#: words a user page must not carry: our tracker's issue numbers (a project's own, such as "TRL issue
#: 5312", is a reference and stays) and notes on who ran what, when
TRACKER = re.compile(r"(?<!TRL )(?<!vLLM )(?<!SGLang )(?<!transformers )(?<!peft )(?<!torch )\bissue\s+#?\d+", re.I)
NOTES = re.compile(r"\b(next|this|later|earlier) session\b|\bengineers?\b", re.I)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_carries_issue_numbers_or_notes(page):
    """A reader understands every page without our tracker: no "issue 38", no "in this session", no
    "the other engineers"."""
    found = [f"{page.relative_to(ROOT)}:{n}: {m.group(0)!r}"
             for n, line in enumerate(page.read_text().splitlines(), 1)
             for pattern in (TRACKER, NOTES) for m in pattern.finditer(line)]
    assert not found, "say what happened instead:\n" + "\n".join(found)


def test_the_note_patterns_still_match():
    assert TRACKER.search("as issue 38 saw") and TRACKER.search("Issue #39") and NOTES.search("the engineers")
    assert NOTES.search("What the next session runs") and not NOTES.search("its own session")
    assert not TRACKER.search("the check for TRL issue 5312") and not TRACKER.search("a vLLM issue 12")

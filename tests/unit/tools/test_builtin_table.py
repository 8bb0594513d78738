"""The built-ins table of docs/explanation/architecture.md is generated from the registry, like docs/reference/recipe-keys.md."""

import pytest

from corl.plugins import BUILTIN_PLUGINS
from corl.tools.builtin_table import BEGIN, DOC, END, builtins_registry, main, render, splice


@pytest.fixture(scope="module")
def table():
    return render(builtins_registry())


def test_the_committed_table_is_the_generated_one(table):
    text = DOC.read_text()
    assert splice(text, table) == text, "regenerate: python -m corl.tools.builtin_table"


def test_every_builtin_component_has_a_row(table):
    registry = builtins_registry()
    names = {c.name for c in registry if c.plugin in BUILTIN_PLUGINS}
    assert {"drills", "hf_vision", "early_stop", "length_penalty"} <= names
    assert all(f"`{name}`:" in table for name in names)
    assert "| task | `drills`:" in table and "`builtin/tasks/drills.py`" in table
    assert "| sampler | `hf_vision`:" in table and "`builtin/hf/vision/`" in table
    assert "| section | `[zoo]`:" in table


def test_installed_plugins_are_not_builtins(table):
    assert "vllm" not in table and "wandb" not in table


def test_a_stale_table_is_found_and_rewritten(tmp_path, table, capsys):
    doc = tmp_path / "architecture.md"
    doc.write_text(f"# Title\n\n{BEGIN}\n| kind | names | module |\n| task | `addition` | x |\n{END}\n\nAfter.\n")
    assert main([str(doc), "--check"]) == 1
    assert "out of date" in capsys.readouterr().out
    assert main([str(doc)]) == 0
    assert doc.read_text() == f"# Title\n\n{BEGIN}\n{table}{END}\n\nAfter.\n"
    assert main([str(doc), "--check"]) == 0


def test_missing_markers_are_an_error():
    with pytest.raises(ValueError, match="markers"):
        splice("no markers here", "| table |\n")

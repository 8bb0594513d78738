"""corl.manifest: a folder's digests, written last and checked before loading; one per block."""

import pytest

from corl import manifest
from corl.manifest import ManifestError


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "BLOCK", 1024)  # several blocks per file, in a test-sized folder
    (tmp_path / "agents" / "a").mkdir(parents=True)
    (tmp_path / "agents" / "a" / "model.safetensors").write_bytes(bytes(range(256)) * 20)  # 5 blocks
    (tmp_path / "state.json").write_text('{"step": 1}')
    (tmp_path / "empty").write_bytes(b"")
    manifest.write(tmp_path)
    return tmp_path


def test_a_folder_as_written_verifies(folder):
    manifest.verify(folder)
    listed = manifest.read(folder)["files"]
    assert sorted(listed) == ["agents/a/model.safetensors", "empty", "state.json"]
    assert len(listed["agents/a/model.safetensors"]["sha256"]) == 5 and listed["empty"]["size"] == 0
    assert manifest.size_of(folder) == 5120 + 11


@pytest.mark.parametrize("at", [0, 3000, 5119])
def test_one_flipped_byte_anywhere_is_named_with_its_block(folder, at):
    path = folder / "agents" / "a" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))
    block = at // 1024
    with pytest.raises(ManifestError) as info:
        manifest.verify(folder)
    assert str(info.value) == (f"{folder}: agents/a/model.safetensors does not match its digest (bytes {block * 1024}-"
                               f"{block * 1024 + 1023}): the file changed after the checkpoint was written")


def test_a_missing_added_or_truncated_file_is_named(folder):
    (folder / "extra.pt").write_bytes(b"x")
    with pytest.raises(ManifestError, match="extra.pt is not listed in manifest.json"):
        manifest.verify(folder)
    (folder / "extra.pt").unlink()
    (folder / "state.json").write_text('{"st')
    with pytest.raises(ManifestError, match=r"state.json has 4 bytes, 11 when written \(truncated or replaced\)"):
        manifest.verify(folder)
    (folder / "state.json").unlink()
    with pytest.raises(ManifestError, match=r"state.json is missing \(listed in manifest.json\)"):
        manifest.verify(folder)


def test_no_manifest_or_a_broken_one_is_named(folder):
    (folder / "manifest.json").write_text("{")
    with pytest.raises(ManifestError, match="manifest.json: unreadable"):
        manifest.verify(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="no manifest.json"):
        manifest.verify(folder)
    assert manifest.size_of(folder) is None

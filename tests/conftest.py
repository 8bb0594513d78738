import os
from pathlib import Path

import pytest

pytest_plugins = ["corl.testing"]  # the plugin authors' kit: corl_run, installed_plugin, broken_plugin

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Converted real models (corl.builtin.hf.models.sources) outlive a test session when a cache is given (tox passes
# CORL_CACHE_DIR on): converting both packaged models takes a minute or more.
if os.environ.get("CORL_CACHE_DIR"):
    os.environ.setdefault("CORL_MODELS_DIR", str(Path(os.environ["CORL_CACHE_DIR"]) / "models"))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One zoo cache for the whole session, so tiny warm-starts are built once."""
    path = tmp_path_factory.mktemp("corl-cache")
    os.environ["CORL_CACHE_DIR"] = str(path)
    return path

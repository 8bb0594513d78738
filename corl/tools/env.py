"""``corl env``: what a bug report needs to say about this machine, as ``trl env`` does.

Versions of Python, torch, transformers, corl and every corl plugin, the optional packages corl
talks to, and the devices: CPU threads, CUDA devices with their memory, and whether bubblewrap
(the code sandbox's outer layer) is here.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from typing import Any

from corl.plugins import DISTRIBUTION, corl_version, describe, make_plugin_manager, registry_of

#: Packages corl uses, besides torch and transformers, whose versions matter in a report.
PACKAGES = ("tokenizers", "safetensors", "math-verify", "numpy", "pillow", "pluggy", "attrs", "tensorboard",
            "pyarrow", "datasets", "gguf", "vllm", "sglang", "wandb", "mlflow-skinny", "mlflow")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _devices() -> dict[str, Any]:
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "torch_threads": None, "cuda": None, "cuda_devices": []}
    try:
        import torch
    except ImportError as exc:
        out["torch_error"] = str(exc)
        return out
    out["torch_threads"] = torch.get_num_threads()
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out["cuda_devices"].append({"index": i, "name": props.name,
                                        "memory_gib": round(props.total_memory / 2**30, 1),
                                        "capability": f"{props.major}.{props.minor}"})
    return out


def _bubblewrap() -> dict[str, Any]:
    path = shutil.which("bwrap")
    if path is None:
        return {"path": None, "version": None}
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        text = ""
    return {"path": path, "version": text.split()[-1] if text else None}


def _packaged_models() -> list[dict[str, Any]]:
    """The ``pypi:`` models installed here, with where they come from (their provenance and licence):
    the fact the hf built-in adds (``RegistryView.add_fact``); none where it is not loaded."""
    found = registry_of(make_plugin_manager()).facts().get("packaged_models")
    return found if isinstance(found, list) else []


def collect() -> dict[str, Any]:
    """Everything ``corl env`` prints, as plain data (``corl env --json``)."""
    plugins = [{"name": r["name"], "distribution": r["distribution"], "version": r["version"], "error": r["error"]}
               for r in describe(make_plugin_manager()) if not r["name"].startswith("corl.")]
    return {
        "corl": {"version": corl_version(), "distribution": DISTRIBUTION},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "platform": platform.platform(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "packages": {name: v for name in PACKAGES if (v := _version(name)) is not None},
        "plugins": plugins,
        "devices": _devices(),
        "bubblewrap": _bubblewrap(),
        "packaged_models": _packaged_models(),
    }


def render(info: dict[str, Any]) -> str:
    dev, bw = info["devices"], info["bubblewrap"]
    rows = [("corl", f"{info['corl']['version']} (distribution {info['corl']['distribution']})"),
            ("Python", f"{info['python']['version']} ({info['python']['implementation']})"),
            ("platform", info["platform"]),
            ("torch", f"{info['torch'] or 'not installed'}" + (f" (CUDA {dev['cuda']})" if dev.get("cuda") else
                                                                 " (CPU build)" if info["torch"] else "")),
            ("transformers", info["transformers"] or "not installed")]
    rows += [(name, version) for name, version in info["packages"].items()]
    plugins = [f"{p['name']} ({p['distribution']} {p['version']})" + (f" FAILED: {p['error']}" if p["error"] else "")
               for p in info["plugins"]]
    rows.append(("plugins", "; ".join(plugins) or "none"))
    rows.append(("pypi: models", "; ".join(f"{m['name']}: {m['about']}" for m in info.get("packaged_models", []))
                 or "none installed"))
    threads = f"{dev['cpu_count']} CPUs" + (f", torch uses {dev['torch_threads']} threads" if dev["torch_threads"] else "")
    rows.append(("CPU", threads))
    gpus = [f"cuda:{d['index']} {d['name']} {d['memory_gib']} GiB (sm {d['capability']})" for d in dev["cuda_devices"]]
    rows.append(("CUDA devices", "; ".join(gpus) or "none"))
    rows.append(("bubblewrap", f"{bw['path']} {bw['version'] or ''}".strip() if bw["path"] else
                 "not found (the code sandbox runs with fewer layers, see docs/how-to/code-tasks.md)"))
    width = max(len(name) for name, _ in rows) + 2
    return "\n".join(f"{name + ':':<{width}}{value}" for name, value in rows)


def cmd_env(args) -> int:
    import json

    info = collect()
    print(json.dumps(info, indent=2) if args.json else render(info))
    return 0

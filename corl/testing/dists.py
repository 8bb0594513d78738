"""Plugin distributions made from source text, found through entry points as if pip had
installed them: for testing plugin loading, allow-lists and broken packages."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path


def install_plugin(root: str | Path, name: str, source: str, *, entry_point: str | None = None,
                   version: str = "0.1.0") -> Path:
    """Write an installed-looking distribution ``name`` under ``root`` whose module ``source`` is
    registered in the ``corl`` entry-point group, and put ``root`` on ``sys.path``, so
    ``importlib.metadata`` (and corl's plugin loader) find it as if ``pip install`` had put it there.
    Undo with ``uninstall_plugin(root)``."""
    import importlib

    root, module = Path(root), name.replace("-", "_")
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[corl]\n{entry_point or module} = {module}\n")
    (info / "top_level.txt").write_text(f"{module}\n")  # which distribution the module belongs to
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    sys.modules.pop(module, None)
    return root


def uninstall_plugin(root: str | Path) -> None:
    root = str(root)
    if root in sys.path:
        sys.path.remove(root)
    for module in [m for m, mod in sys.modules.items() if (getattr(mod, "__file__", None) or "").startswith(root)]:
        del sys.modules[module]


BROKEN_PLUGIN = '''
raise ImportError("corl-broken-example: a dependency is missing")
'''

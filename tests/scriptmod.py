"""Load a script of ``scripts/`` or a tool of ``tools/`` as a module (neither folder is a
package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
TOOLS = ROOT / "tools"


def _load(folder: Path, name: str):
    """``<folder>/<name>.py``, executed as a fresh module named ``name`` and registered
    under that name in ``sys.modules``: Numba's disk cache records the module of a
    compiled function and imports it again when it loads the function, so a script's or
    tool's ``njit(cache=True)`` function loaded from the cache by a later test run needs a
    module that ``inspect.getmodule`` finds (without one Numba names it ``<dynamic>``,
    which no later run can import)."""
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_script(name: str):
    """``scripts/<name>.py`` (a paper reproduction or study) as a module, see
    :func:`_load`."""
    return _load(SCRIPTS, name)


def load_tool(name: str):
    """``tools/<name>.py`` (a diagnostic of the DRAM engine) as a module, see
    :func:`_load`."""
    return _load(TOOLS, name)

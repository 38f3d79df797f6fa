"""Load a script of ``scripts/`` as a module (the scripts are not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    """``scripts/<name>.py``, executed as a fresh module named ``name`` and registered
    under that name in ``sys.modules``: Numba's disk cache records the module of a
    compiled function and imports it again when it loads the function, so a script's
    ``njit(cache=True)`` function loaded from the cache by a later test run needs a module
    that ``inspect.getmodule`` finds (without one Numba names it ``<dynamic>``, which no
    later run can import)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

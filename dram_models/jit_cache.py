"""Where Numba keeps the compiled engine: a user cache directory, never the package.

Numba's default (``cache=True``) writes compiled functions into ``__pycache__`` folders
beside their source. For an installed package that is ``site-packages``, where the
files outlive ``pip uninstall`` (pip removes only what it installed): the leftover
folders then make an empty namespace package that shadows a later editable install.
:func:`configure` points Numba at ``$XDG_CACHE_HOME/h2m2sim/numba`` (default
``~/.cache/h2m2sim/numba``) unless ``NUMBA_CACHE_DIR`` is set. Numba files each
function under the path of its source inside that directory, so installs in different
places never share entries.

It must run before the first ``@njit(cache=True)`` decorator executes: the package
``__init__`` modules of :mod:`dram_models` and :mod:`h2m2sim` call it, and it does not
import Numba itself (importing either package stays light).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/h2m2sim/numba``, or ``~/.cache/h2m2sim/numba``."""
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "h2m2sim" / "numba"


def configure() -> str:
    """Set Numba's cache directory to :func:`default_dir` unless the user chose one;
    returns the directory in use. Numba reads ``NUMBA_CACHE_DIR`` when it is first
    imported; when it already was, its configuration is updated as well."""
    chosen = os.environ.get(ENV)
    if not chosen:
        chosen = str(default_dir())
        os.environ[ENV] = chosen          # inherited by worker processes too
    cfg = sys.modules.get("numba.core.config")
    if cfg is not None and not getattr(cfg, "CACHE_DIR", ""):
        cfg.CACHE_DIR = chosen
    return chosen

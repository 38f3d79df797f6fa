"""Where Numba keeps the compiled engine: a user cache directory, never the package.

Numba's default (``cache=True``) writes compiled functions into ``__pycache__`` folders
beside their source. For an installed package that is ``site-packages``, where the
files outlive ``pip uninstall`` (pip removes only what it installed): the leftover
folders then make an empty namespace package that shadows a later editable install.
:func:`configure` points Numba at ``$XDG_CACHE_HOME/h2m2sim/numba`` (default
``~/.cache/h2m2sim/numba``) unless ``NUMBA_CACHE_DIR`` is set. Numba files each
function under the path of its source inside that directory, so installs in different
places never share entries.

Numba checks a cached function against its own source file only, not against the files
of the functions it calls and compiles into itself: after a change to one engine module,
a caller in another module would load its stale machine code (a ``git pull`` that
changes ``engine/general.py`` but not ``engine/run.py`` would run the old controller,
silently). So the directory in use is a subdirectory named for a digest of every engine
source (:func:`engine_digest`): a changed engine compiles afresh, an unchanged one finds
its cache.

It must run before the first ``@njit(cache=True)`` decorator executes: the package
``__init__`` modules of :mod:`dram_models` and :mod:`h2m2sim` call it, and it does not
import Numba itself (importing either package stays light).
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
#: The sources compiled together into the engine's entry points
ENGINE_SOURCES = (Path(__file__).parent / "engine", Path(__file__).parent / "_jit.py")


def engine_digest(sources=ENGINE_SOURCES) -> str:
    """12 hex digits of a digest of the engine's sources (the ``.py`` files of
    ``sources``, folders searched one level deep)."""
    h = hashlib.sha256()
    for src in map(Path, sources):
        for path in sorted(src.glob("*.py")) if src.is_dir() else [src]:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/h2m2sim/numba``, or ``~/.cache/h2m2sim/numba``."""
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "h2m2sim" / "numba"


def configure() -> str:
    """Set Numba's cache directory to the engine digest's subdirectory of
    :func:`default_dir`, or of the directory the user chose in ``NUMBA_CACHE_DIR``;
    returns the directory in use. Numba reads ``NUMBA_CACHE_DIR`` when it is first
    imported; when it already was, its configuration is updated as well."""
    sub = f"engine-{engine_digest()}"
    chosen = os.environ.get(ENV) or str(default_dir())
    if Path(chosen).name != sub:          # worker processes inherit it, already set
        chosen = str(Path(chosen) / sub)
    os.environ[ENV] = chosen
    cfg = sys.modules.get("numba.core.config")
    if cfg is not None and getattr(cfg, "CACHE_DIR", "") != chosen:
        cfg.CACHE_DIR = chosen
    return chosen

"""h2m2sim: a cycle-level simulator of accelerator memory systems for LLM inference.

Layers (bottom up): :mod:`dram_models` (DRAM timing), :mod:`h2m2sim.memory`
(address translation, allocators), :mod:`h2m2sim.npu` (chip model), :mod:`h2m2sim.model`
(LLM kernel graphs), :mod:`h2m2sim.mapping`, :mod:`h2m2sim.system`, :mod:`h2m2sim.serving`,
and the command line in :mod:`h2m2sim.cli`. See docs/ for the tutorial.

The Python interface (:mod:`h2m2sim.api`) is available from the package itself:
``h2m2sim.run``, ``h2m2sim.sweep``, ``h2m2sim.serve``, ``h2m2sim.explore``,
``h2m2sim.load_results``, ``h2m2sim.load``. It is imported on first use, so ``import
h2m2sim`` stays fast and does not load Numba.
"""
import importlib

from dram_models.jit_cache import configure as _configure_jit_cache

_configure_jit_cache()      # Numba's cache outside the installed package

from h2m2sim.version import __version__

#: Names of :mod:`h2m2sim.api` offered here.
API = ("run", "sweep", "serve", "explore", "load_results", "load", "Result", "SweepResults")

__all__ = ["__version__", *API]


def __getattr__(name: str):
    # the api loads Numba and every layer: it comes on first use, so that importing a
    # lower layer (which imports this package first) stays light
    if name in API:
        return getattr(importlib.import_module("h2m2sim.api"), name)
    raise AttributeError(f"module 'h2m2sim' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *API])

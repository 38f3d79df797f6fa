"""h2m2sim: a cycle-level simulator of accelerator memory systems for LLM inference.

Layers (bottom up): :mod:`dram_models` (DRAM timing), :mod:`h2m2sim.memory`
(address translation, allocators), :mod:`h2m2sim.npu` (chip model), :mod:`h2m2sim.model`
(LLM kernel graphs), :mod:`h2m2sim.mapping`, :mod:`h2m2sim.system`, :mod:`h2m2sim.serving`,
and the command line in :mod:`h2m2sim.cli`. See docs/ for the tutorial.

The Python interface (:mod:`h2m2sim.api`) is available from the package itself:
``h2m2sim.run``, ``h2m2sim.sweep``, ``h2m2sim.serve``, ``h2m2sim.load_results``,
``h2m2sim.load``. It is imported on first use, so ``import h2m2sim`` stays fast and does
not load Numba.
"""
import importlib

from dram_models.jit_cache import configure as _configure_jit_cache

_configure_jit_cache()      # Numba's cache outside the installed package

try:  # written by setuptools-scm when the package is built (not tracked by git)
    from h2m2sim._version import __version__
except ImportError:  # a source tree that was never built
    __version__ = "0.1.0"

#: Names of :mod:`h2m2sim.api` offered here.
API = ("run", "sweep", "serve", "load_results", "load", "Result", "SweepResults")

__all__ = ["__version__", *API]


def __getattr__(name: str):
    # the api sits above every layer, which all import this package for its version:
    # importing it here at load time would be a cycle, so it comes on first use
    if name == "sweep":   # the subpackage, which is callable (h2m2sim/sweep/__init__.py)
        return importlib.import_module("h2m2sim.sweep")
    if name in API:
        return getattr(importlib.import_module("h2m2sim.api"), name)
    raise AttributeError(f"module 'h2m2sim' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *API])

"""dram_models: DRAM standards as data and a Numba-compiled cycle-level controller engine.

Usable on its own: ``python -m dram_models.bench`` and ``python -m dram_models.replay``.
"""
from .jit_cache import configure as _configure_jit_cache

_configure_jit_cache()      # before any Numba function of the package is defined

from .errors import ConfigError, SimError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ConfigError", "SimError"]

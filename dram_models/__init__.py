"""dram_models: DRAM standards as data and a Numba-compiled cycle-level controller engine.

Usable on its own: ``python -m dram_models.bench`` and ``python -m dram_models.replay``.
"""
from .errors import ConfigError, SimError

__version__ = "0.1.0"
__all__ = ["ConfigError", "SimError"]

"""The decode-iteration job: one decode iteration of a fixed batch on a whole system.

* :mod:`.iteration` -- one layer across the sides from a mapping, cycle-level, and the
  per-sublayer time tables the mappers decide from;
* :mod:`.job` -- decide a mapping with a mapper and simulate (the ``iteration`` job of
  ``h2m2sim run``);
* :mod:`.hierarchical` -- the strict hierarchy baseline (the first side caches the
  second), over :mod:`.page_cache` (Belady, LRU and FIFO replacement of a page string);
* :mod:`.dynamic` -- iterations whose sequence lengths change (H2M2 Figure 17).
"""
from .job import run_iteration, simulate

__all__ = ["run_iteration", "simulate"]

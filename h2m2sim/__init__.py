"""h2m2sim: a cycle-level simulator of accelerator memory systems for LLM inference.

Layers (bottom up): :mod:`dram_models` (DRAM timing), :mod:`h2m2sim.memory`
(address translation, allocators), :mod:`h2m2sim.npu` (chip model), :mod:`h2m2sim.model`
(LLM kernel graphs), :mod:`h2m2sim.mapping`, :mod:`h2m2sim.system`, :mod:`h2m2sim.serving`,
and the command line in :mod:`h2m2sim.cli`. See docs/ for the tutorial.
"""
__version__ = "0.1.0"

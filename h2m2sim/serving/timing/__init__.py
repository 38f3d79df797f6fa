"""Iteration times and energies for the serving loop: tables built from a point
evaluator (cached on disk), bilinear interpolation with a measured error, and a
clearly-labelled analytic placeholder evaluator. Every table of times (s) has an energy
table (J per iteration) on the same grid, from the same evaluator call
(:meth:`~h2m2sim.compute.evaluator.PointEvaluator.cost`).

The serving loop cannot afford a cycle-level simulation per iteration. Instead a
*point evaluator* (:class:`~h2m2sim.compute.evaluator.PointEvaluator`) is sampled over a
grid of (batch, mean tokens per request) for every KV layout the run
uses, and the loop interpolates. Phases:

* ``"decode"``: one decode iteration of ``batch`` requests; ``context_tokens_per_request``
  holds the KV tokens each request has already (attention reads them all); the iteration
  also writes one new KV token per request.
* ``"prefill"``: one prefill iteration of ``batch`` prompts with the given token counts.
* ``"kv_copy"``: ``batch = 1``, ``context_tokens_per_request = [n]``: a contiguous copy
  of ``n`` tokens of KV (read + write), the price of an ODMA migration.
* ``"mixed"`` (chunked prefill, only when the grid has ``chunk_tokens``): one iteration
  of ``batch`` decode requests and a prefill chunk of ``T`` tokens together
  (:meth:`~h2m2sim.compute.evaluator.PointEvaluator.mixed_cost`), sampled over (batch,
  mean KV tokens per decode request, T) for every layout and interpolated trilinearly.
  The grid's chunk starts a prompt (no earlier tokens) and is one prompt; the error
  samples mix several chunks with earlier tokens, so the reported error includes both.
* ``"verify"`` (speculative decoding, only when the grid has ``verify_tokens`` = k + 1):
  the target's step that scores k + 1 tokens of each of ``batch`` requests, sampled over
  (batch, mean KV tokens per request) like a decode table and priced by the evaluator's
  ``mixed_cost`` (see :func:`verify_point`).

``kv_layout`` is the allocator's :class:`~h2m2sim.memory.kv_layout.KVLayout`
(contiguous, or paged with its block size). The cycle-level evaluator turns it into an
address pattern (see :mod:`h2m2sim.allocators.traffic`).

The package's modules: :mod:`.analytic` (the placeholder evaluator), :mod:`.interp`
(bilinear and trilinear interpolation, Numba), :mod:`.tables` (the grid and
:class:`~.tables.IterationTables`), :mod:`.build` (sampling an evaluator into tables,
cached), :mod:`.windows` (a decode window of identical-batch steps, plain,
block-granting or speculative, in one Numba call), :mod:`.cycle_eval` and
:mod:`.mapped_eval` (the cycle-level evaluators).
"""
from .analytic import AnalyticEvaluator
from .build import CHUNK_COST_RATIO, TABLES_NS, build_tables, default_batched_tokens
from .build import fill_unreachable, verify_point
from .interp import interp2, interp2_pair, interp3_pair
from .tables import IterationTables, TableGrid
from .windows import advance_blocks, advance_running, decode_window, speculative_window

__all__ = ["AnalyticEvaluator", "TableGrid", "IterationTables", "build_tables", "interp2",
           "interp2_pair", "interp3_pair", "decode_window", "advance_running",
           "advance_blocks", "default_batched_tokens", "CHUNK_COST_RATIO", "verify_point",
           "fill_unreachable", "TABLES_NS", "speculative_window"]

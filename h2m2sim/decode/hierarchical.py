"""Strict hierarchical memory (H2M2 Figure 4c): the bandwidth-centric side (HBM) caches
the capacity-centric side (LPDDR) at page granularity, and all compute sits next to the
cache. "Computation units are exclusively attached to the bandwidth-centric memory"
(H2M2 Sec. 2.3) and every compared configuration "consist[s] of two accelerator chips
that provide the same computational power" (Sec. 5.1), so the cache side runs with the
cores of both chips; the capacity side only serves migrations.

An iteration is a page reference string: every layer in order, and in each layer every
sublayer's weight pages, its KV-cache pages and its activation pages. Weights and KV are
distinct pages per layer; the activation buffers of a sublayer are the same pages in
every layer (reused buffers). The string runs twice through a cache of the cache side's
capacity (:mod:`.page_cache`; ``belady``, ``lru`` or ``fifo``); the second pass is the
steady state measured. Every missed page migrates from the capacity side over the
chip-to-chip link at the smaller of the link's bandwidth and the capacity side's
measured sequential read bandwidth, plus ``fault_ns`` per page.

Iteration time = the cycle-level time of every layer run from the cache side (compute)
combined with the migration time: ``max(compute, migration)`` when migration overlaps
compute (``overlap: true``; pages stream in while earlier pages are computed on) or
``compute + migration`` when each kernel waits for its pages (``overlap: false``).
Dirty-page write-back (a decode step appends one token of KV per request) and the HBM
write bandwidth migrations take from compute are not modeled; both are small next to
the read stream.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dram_models.schema import param
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import SUBLAYERS, Mapping
from h2m2sim.memory.dram import stream_bandwidth_gbps
from h2m2sim.model import ModelSpec, footprint, normalize_batch

from .iteration import IterationResult, layer_kinds, run_layer
from .page_cache import miss_flags

#: page references per iteration the cache simulation accepts (two passes of int64 ids
#: plus Belady's next-use and heap arrays: about 64 bytes per reference)
MAX_REFERENCES = 20_000_000

_PAPER = ("H2M2 (Hwang et al., arXiv 2025) Sec. 2.3 and 5.2: strict hierarchical memory, "
          "policy not named")


@dataclass(frozen=True)
class HierarchicalOptions:
    """``policy.mapper_params.hierarchical``: the page cache of the hierarchical mapper."""

    replacement: Literal["belady", "lru", "fifo"] = param(
        "lru", doc="Page replacement of the cache side: lru (least recently used), fifo, "
                   "or belady (farthest next use; the fewest misses possible).",
        source=_PAPER + "; lru is the reading that matches its Figures 12-13 (see "
               "docs/validation/h2m2.md)")
    overlap: bool = param(
        True, doc="Migration overlapped with compute (iteration = max of the two) or "
                  "added to it (each kernel waits for its missing pages).",
        source=_PAPER + "; overlapped is the reading that matches its Figures 12-13")
    fault_ns: float = param(0.0, ge=0, le=1e9, unit="ns", doc="Cost of each page fault "
                            "on top of its migration time.",
                            source="assumed 0: H2M2 gives no fault cost")


@dataclass(frozen=True)
class HierarchicalResult:
    """One hierarchical iteration; times in ns, sizes in bytes."""

    iteration_ns: float
    compute_ns: float
    migration_ns: float
    footprint_bytes: float
    resident_bytes: float     # bytes referenced in the measured pass that hit
    migrated_bytes: float
    hit_rate: float           # of page references in the measured pass
    layer: object
    options: HierarchicalOptions

    @property
    def policy(self) -> str:
        o = self.options
        return f"{o.replacement}, {'overlapped' if o.overlap else 'added'} migration"


def cache_system(system, sides: tuple[str, str] | None = None):
    """A one-sided system: the cache side with the compute of both chips."""
    first, _ = sides or system.side_names
    hbm = system.side(first)
    cores = sum(s.chip.cores for s in system.sides)
    side = dataclasses.replace(hbm, chip=dataclasses.replace(hbm.chip, cores=cores))
    return dataclasses.replace(system, sides=(side,))


def _page_counts(model: ModelSpec, batch: int, lens, page: int, dtype: str | None):
    """Per layer kind: (layer count, {sublayer: (weight + KV pages, activation pages)})."""
    out = []
    for _, view, n in layer_kinds(model):
        fp = footprint(view, batch, lens, dtype=dtype)
        out.append((n, {sl: (-(-int(fp[sl]["weight"]) // page) - (-int(fp[sl]["kv"]) // page),
                             -(-int(fp[sl]["activation"]) // page)) for sl in SUBLAYERS}))
    return out


def reference_string(model: ModelSpec, batch: int, lens, page: int,
                     dtype: str | None = None) -> tuple[np.ndarray, float]:
    """Page ids one iteration references, in order (int64), and its footprint in bytes
    (distinct pages x page size). ConfigError (naming ``system.mmu.page_size``) when the
    string would exceed :data:`MAX_REFERENCES`."""
    counts = _page_counts(model, batch, lens, page, dtype)
    total = sum(n * sum(own + act for own, act in c.values()) for n, c in counts)
    if total > MAX_REFERENCES:
        raise ConfigError("system.mmu.page_size", f"{total:,} page references per "
                          f"iteration of {page:,}-byte pages exceed the hierarchical "
                          f"cache's limit of {MAX_REFERENCES:,}; use larger pages")
    segments, next_id = [], 0
    for n, c in counts:
        shared = {}
        for sl in SUBLAYERS:   # activation buffers: one set of pages per sublayer
            shared[sl] = np.arange(next_id, next_id + c[sl][1], dtype=np.int64)
            next_id += c[sl][1]
        for _ in range(n):
            for sl in SUBLAYERS:
                k = c[sl][0]
                segments += [np.arange(next_id, next_id + k, dtype=np.int64), shared[sl]]
                next_id += k
    refs = np.concatenate(segments) if segments else np.zeros(0, np.int64)
    return refs, float(next_id) * page


def run_hierarchical(system, model: ModelSpec, batch: int, seq_lens,
                     options: HierarchicalOptions = HierarchicalOptions(),
                     dtype: str | None = None, fidelity: str = "sampled",
                     translate: str | None = None, cache: dict | None = None, sides=None,
                     attention: str = "per-request") -> HierarchicalResult:
    """One decode iteration of ``model`` on ``system`` as a strict hierarchy (the first
    of ``sides`` caches the second)."""
    first, second = sides or system.side_names
    batch, lens = normalize_batch(batch, seq_lens)
    page = system.mmu.page_size
    refs, F = reference_string(model, batch, lens, page, dtype)
    capacity = (system.side(first).capacity_bytes - system.mmu.table_bytes) // page
    miss = miss_flags(np.concatenate([refs, refs]), int(capacity), options.replacement)
    missed_pages = int(miss[refs.size:].sum())
    missed = float(missed_pages) * page
    rate = min(stream_bandwidth_gbps(system.side(second)), system.interconnect.bandwidth_gbps)
    migration = missed / rate + missed_pages * options.fault_ns
    csys = cache_system(system, (first, second))
    split = {sl: 0 for sl in SUBLAYERS}
    lay = run_layer(csys, model, batch, lens, split, (first,), dtype, fidelity, translate,
                    cache, attention)
    compute = lay.time_ns * model.layers
    total = max(compute, migration) if options.overlap else compute + migration
    hits = refs.size - missed_pages
    return HierarchicalResult(total, compute, migration, F, float(hits) * page, missed,
                              hits / refs.size if refs.size else 1.0, lay, options)


def as_iteration(h: HierarchicalResult, model: ModelSpec) -> IterationResult:
    return IterationResult(h.iteration_ns, h.layer, model.layers,
                           Mapping({sl: 0 for sl in SUBLAYERS}, "hierarchical",
                                   granularity="hierarchical"),
                           note=f"all layers from the HBM cache ({h.policy}); "
                                f"{h.migrated_bytes / 1e9:.1f} GB migrated on demand")

"""Strict hierarchical memory (H2M2 Figure 4c): the bandwidth-centric side (HBM) caches
the capacity-centric side (LPDDR) at page granularity, and all compute sits next to the
cache (both chips' cores, since every compared system has the same compute).

Each iteration sweeps every layer's weights and KV cache once, in the same order: a
cyclic reference string of ``F`` bytes through a cache of ``C`` bytes. Two replacement
policies, both exact for that string:

* ``lru`` -- least recently used. Every page's reuse distance is the whole footprint, so
  when ``F > C`` every access misses (LRU's cyclic thrashing) and when ``F <= C`` every
  access hits after the first iteration;
* ``optimal`` (default) -- Belady's policy, which for a cyclic sweep keeps a fixed resident
  set: ``C`` bytes hit, ``F - C`` miss every iteration. It is the best any demand-paged
  cache can do here, which is the fair comparison for H2M2's claim.

Misses are migrated on demand: the kernel waits while the missing pages stream from the
LPDDR side over the chip-to-chip link (rate = the smaller of LPDDR's measured sequential
read bandwidth and the link), plus ``fault_ns`` per page. Iteration time = the
cycle-level time of running every layer from HBM + the migration time.
"""
from __future__ import annotations

import dataclasses

from h2m2sim.errors import ConfigError
from h2m2sim.mapping import SUBLAYERS, Mapping
from h2m2sim.memory.dram import stream_bandwidth_gbps
from h2m2sim.model import ModelSpec, footprint, normalize_batch

from .iteration import IterationResult, layer_kinds, run_layer


@dataclasses.dataclass(frozen=True)
class HierarchicalResult:
    iteration_ns: float
    compute_ns: float
    migration_ns: float
    footprint_bytes: float
    resident_bytes: float
    migrated_bytes: float
    hit_rate: float
    layer: object
    policy: str


def cache_system(system, sides: tuple[str, str] | None = None):
    """A one-sided system: the cache side with the compute of both chips."""
    first, _ = sides or system.side_names
    hbm = system.side(first)
    cores = sum(s.chip.cores for s in system.sides)
    side = dataclasses.replace(hbm, chip=dataclasses.replace(hbm.chip, cores=cores))
    return dataclasses.replace(system, sides=(side,))


def run_hierarchical(system, model: ModelSpec, batch: int, seq_lens, policy: str = "optimal",
                     fault_ns: float = 0.0, dtype: str | None = None,
                     fidelity: str = "sampled", translate: str | None = None,
                     cache: dict | None = None, sides=None,
                     attention: str = "per-request") -> HierarchicalResult:

    first, second = sides or system.side_names
    batch, lens = normalize_batch(batch, seq_lens)
    F = 0
    for _, view, n in layer_kinds(model):  # one footprint per layer kind
        fp = footprint(view, batch, lens, dtype=dtype)
        F += n * sum(fp[sl]["weight"] + fp[sl]["kv"] + fp[sl]["activation"]
                     for sl in SUBLAYERS)
    C = system.side(first).capacity_bytes - system.mmu.table_bytes
    if policy == "lru":
        resident = F if F <= C else 0.0
    elif policy == "optimal":
        resident = min(F, C)
    else:
        raise ConfigError("policy.mapper_params.policy", f"must be lru or optimal, got "
                          f"{policy!r}")
    missed = F - resident
    rate = min(stream_bandwidth_gbps(system.side(second)), system.interconnect.bandwidth_gbps)
    page = system.mmu.page_size
    migration = missed / rate + (missed / page) * fault_ns
    csys = cache_system(system, (first, second))
    split = {sl: 0 for sl in SUBLAYERS}
    lay = run_layer(csys, model, batch, lens, split, (first,), dtype, fidelity, translate,
                    cache, attention)
    compute = lay.time_ns * model.layers
    return HierarchicalResult(compute + migration, compute, migration, F, resident, missed,
                              resident / F if F else 1.0, lay, policy)


def as_iteration(h: HierarchicalResult, model: ModelSpec) -> IterationResult:
    return IterationResult(h.iteration_ns, h.layer, model.layers,
                           Mapping({sl: 0 for sl in SUBLAYERS}, "hierarchical",
                                   granularity="hierarchical"),
                           note=f"all layers from the HBM cache ({h.policy} replacement); "
                                f"{h.migrated_bytes / 1e9:.1f} GB migrated on demand")

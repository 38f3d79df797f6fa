"""Energy of a side's work: the activity a run counts, priced by the chip's, the MMU's
and the DRAM standard's energy parameters.

An :class:`Activity` holds what a side did (MACs per unit, vector operations, scratchpad
bytes, TLB lookups and walks) and the DRAM energy of its engine runs
(:func:`dram_models.energy.dram_energy`, already priced: it depends on the run's
command counts and duration, which the activity does not keep). Activities add and
scale like the times they go with (kernel counts, layers, sampled extrapolation).

Counting (the same at every fidelity, see docs/validation/energy-system.md):

* MACs = FLOPs / 2 of each matrix kernel, on the unit its tile plan chose (``mm`` or
  ``mv``); vector operations = the FLOPs of each vector kernel;
* scratchpad: every byte the DMA brings in is written to the scratchpad once and read by
  a unit once; every byte a kernel writes back is written by a unit once and read by the
  DMA once (page-table entries bypass it);
* TLB lookups and misses as the engine counts them; a miss is one walk.

At ``estimate`` fidelity no engine runs: :func:`stream_stats` builds the statistics of
an ideal sequential stream (one ACT per row, refresh at tREFI) for
:func:`~dram_models.energy.dram_energy` to price.

Units: energies in nJ inside (as the DRAM model), J in results; bytes are bytes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from dram_models.commands import CMDS
from dram_models.energy import Additive, DramEnergy, dram_energy
from dram_models.spec import DramSpec
from dram_models.stats import DramStats

__all__ = ["Activity", "ZERO_DRAM", "COUNT_FIELDS", "result_counts", "kernel_counts",
           "activity", "stream_stats", "stream_energy", "side_energy_j", "MATRIX_OPS",
           "MV_OPS"]

ZERO_DRAM = DramEnergy(0.0, 0.0, 0.0, 0.0, 0.0)
#: counts of an activity that a cache may store (all floats)
COUNT_FIELDS = ("mm_macs", "mv_macs", "vector_ops", "spm_read_bytes", "spm_write_bytes",
                "tlb_lookups", "walks")
MATRIX_OPS = ("gemm", "gemv", "attention", "attn_score", "attn_value")
#: matrix ops an analytic count puts on the MV unit (one query row per request)
MV_OPS = ("gemv", "attention", "attn_score", "attn_value")


@dataclasses.dataclass(frozen=True)
class Activity(Additive):
    """What one side did (adds and scales field by field). ``dram`` is its DRAM energy
    (nJ); ``unpriced_dram_bytes`` the DRAM bytes of runs whose standard has no power
    parameters (priced 0)."""

    mm_macs: float = 0.0
    mv_macs: float = 0.0
    vector_ops: float = 0.0
    spm_read_bytes: float = 0.0
    spm_write_bytes: float = 0.0
    tlb_lookups: float = 0.0
    walks: float = 0.0
    dram: DramEnergy = ZERO_DRAM
    unpriced_dram_bytes: float = 0.0


def _macs(units_flops: Iterable[tuple[str, str, float]]) -> dict[str, float]:
    """MM MACs, MV MACs and vector ops of (op, unit, flops) triples."""
    out = {"mm_macs": 0.0, "mv_macs": 0.0, "vector_ops": 0.0}
    for op, unit, flops in units_flops:
        if op not in MATRIX_OPS:
            out["vector_ops"] += flops
        else:
            out["mv_macs" if unit == "mv" else "mm_macs"] += flops / 2
    return out


def _spm(read_bytes: float, write_bytes: float) -> dict[str, float]:
    # a loaded byte: DMA writes it, a unit reads it; a result byte: the reverse
    return {"spm_read_bytes": read_bytes + write_bytes,
            "spm_write_bytes": read_bytes + write_bytes}


def result_counts(result) -> dict[str, float]:
    """The counts of a simulated :class:`~h2m2sim.npu.simulate.KernelResult` (its DRAM
    statistics already cover the whole kernel list, sampled runs extrapolated)."""
    per = result.kernels or ({"op": result.op, "unit": result.unit, "flops": result.flops},)
    d = result.dram
    burst = d.bytes / (d.reads + d.writes) if d.reads + d.writes else 0.0
    read = (d.reads - d.pte_reads) * burst
    return {**_macs((k["op"], k["unit"], float(k["flops"])) for k in per),
            **_spm(read, d.writes * burst),
            "tlb_lookups": float(d.tlb_hits + d.tlb_misses), "walks": float(d.tlb_misses)}


def kernel_counts(kernels: Iterable, page_size: int) -> dict[str, float]:
    """Analytic counts of graph kernels (no simulation): matrix kernels on the unit
    :data:`MV_OPS` names, one TLB lookup per page of bytes moved and no walks (the TLB
    is warm in a steady iteration)."""
    ks = list(kernels)
    rd = float(sum(k.read_bytes for k in ks))
    wr = float(sum(k.write_bytes for k in ks))
    return {**_macs((k.op, "mv" if k.op in MV_OPS else "mm", float(k.flops)) for k in ks),
            **_spm(rd, wr), "tlb_lookups": (rd + wr) / page_size, "walks": 0.0}


def activity(counts: Mapping[str, float], spec: DramSpec, stats: DramStats | None
             ) -> Activity:
    """An activity from stored ``counts`` and the DRAM run ``stats`` (None: no DRAM
    access) priced on ``spec``."""
    dram, unpriced = ZERO_DRAM, 0.0
    if stats is not None:
        e = dram_energy(spec, stats)
        dram, unpriced = (ZERO_DRAM, float(stats.bytes)) if e is None else (e, 0.0)
    return Activity(*(float(counts[f]) for f in COUNT_FIELDS), dram=dram,
                    unpriced_dram_bytes=unpriced)


def stream_stats(spec: DramSpec, nbytes: float, time_ns: float,
                 write_fraction: float = 0.0) -> DramStats:
    """Statistics of an ideal sequential stream of ``nbytes`` over ``time_ns``: every
    burst a row hit but the first of each row (one ACT and one PRE per row), all-bank
    refresh every tREFI on every rank of every (pseudo-)channel. ``nbytes`` 0 gives an
    idle interval (background and refresh only)."""
    o = spec.organization
    bursts = int(round(nbytes / spec.burst_bytes))
    writes = int(round(bursts * write_fraction))
    rows = int(round(nbytes / o.row_bytes))
    refs = 0
    if spec.controller.refresh != "none":
        refs = int(time_ns / (spec.timing.tREFI * spec.tck_ns)) * o.channels \
            * o.pseudo_channels * o.ranks
    cmds = dict.fromkeys(CMDS, 0)
    cmds.update(ACT=rows, PRE=rows, RD=bursts - writes, WR=writes, REF=refs)
    nb = bursts * spec.burst_bytes
    bw = nb / time_ns if time_ns > 0 else 0.0
    return DramStats(
        standard=spec.name, channels=o.channels, mapping="sequential",
        sim_cycles=time_ns / spec.tck_ns, sim_ns=float(time_ns), reads=bursts - writes,
        writes=writes, bytes=nb, bandwidth_gbps=bw, peak_gbps=spec.peak_gbps,
        efficiency=bw / spec.peak_gbps, avg_read_latency_ns=0.0, p50_read_latency_ns=0.0,
        p99_read_latency_ns=0.0, row_hits=max(bursts - rows, 0), row_misses=rows,
        row_conflicts=0, row_hit_rate=1 - rows / bursts if bursts else 0.0, commands=cmds)


def stream_energy(spec: DramSpec, nbytes: float, time_ns: float,
                  write_fraction: float = 0.0) -> Activity:
    """An activity holding only the DRAM energy of :func:`stream_stats`."""
    return activity(dict.fromkeys(COUNT_FIELDS, 0.0), spec,
                    stream_stats(spec, nbytes, time_ns, write_fraction))


def side_energy_j(a: Activity, chip, mmu) -> dict[str, float]:
    """Energy of one side's activity by component, J: the DRAM model's five parts,
    compute (MM + MV MACs and vector ops), scratchpad, translation (lookups + walks)."""
    pj = 1e-12
    return {
        "dram_act_j": a.dram.act_nj * 1e-9, "dram_rdwr_j": a.dram.rdwr_nj * 1e-9,
        "dram_refresh_j": a.dram.refresh_nj * 1e-9,
        "dram_background_j": a.dram.background_nj * 1e-9, "dram_io_j": a.dram.io_nj * 1e-9,
        "compute_j": pj * (a.mm_macs * chip.mm_mac_pj + a.mv_macs * chip.mv_mac_pj
                           + a.vector_ops * chip.vector_op_pj),
        "scratchpad_j": pj * (a.spm_read_bytes * chip.spm_read_pj_per_byte
                              + a.spm_write_bytes * chip.spm_write_pj_per_byte),
        "translation_j": pj * (a.tlb_lookups * mmu.tlb_lookup_pj + a.walks * mmu.walk_pj),
    }

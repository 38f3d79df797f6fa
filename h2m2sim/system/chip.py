"""The accelerator chip attached to a memory side (H2M2 Table 2 defaults).

A chip is ``cores`` identical cores at ``freq_ghz``. A core has an MM unit (an
``mm_rows`` x ``mm_cols`` weight-stationary systolic array), an MV unit (``mv_lanes``
lanes, each a ``mv_width``-wide dot product per cycle), a vector unit and an SFU
(``vector_width`` wide ALU, ``adder_tree`` adders, ``sfu_rate`` lookups per cycle), a
scratchpad of ``spm_buffers`` x ``spm_buffer_bytes`` (double buffering) and a DMA engine
with at most ``dma_outstanding`` bursts in flight.

Units: cycles are core clock cycles (1 ns at the default 1 GHz); bytes are bytes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

from dram_models.errors import ConfigError
from dram_models.schema import deep_merge, load, param
from h2m2sim.registry import Registry

__all__ = ["NpuChipConfig", "CHIP_PRESETS", "resolve_chip", "ENERGY_FIELDS"]

_T2 = "H2M2 Table 2"
#: Energy figures: Horowitz, "Computing's energy problem (and what we can do about it)",
#: ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V). Used as published, not scaled to another node
#: (the H2M2 paper names none): a chip at a newer node would spend less per operation.
_HOROWITZ = "Horowitz ISSCC 2014 (45 nm)"
#: Energy fields: they price a run's activity but do not change its timing, so the
#: simulation caches leave them out of their keys.
ENERGY_FIELDS = ("mm_mac_pj", "mv_mac_pj", "vector_op_pj", "spm_read_pj_per_byte",
                 "spm_write_pj_per_byte")
#: Bound of a unit's pipeline latency, cycles. The cycle-level run lets the DRAM engine
#: idle through every latency refresh by refresh, so a latency of 2^53 cycles would run
#: for days; real pipelines are tens of cycles deep.
MAX_LATENCY_CYCLES = 2**16


#: The compute data types a chip may declare
COMPUTE_DTYPES = ("int8", "fp8", "fp16", "bf16", "fp32")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NpuChipConfig:
    """One accelerator chip (all cores identical)."""

    name: str = param("h2m2", doc="chip name")
    cores: int = param(4, ge=1, le=1024, doc="cores per chip", source="H2M2 Sec. 4.1, Fig. 11")
    freq_ghz: float = param(1.0, ge=1e-3, le=10, unit="GHz", doc="core clock", source=_T2)
    # ---- MM unit: weight-stationary systolic array
    mm_rows: int = param(128, ge=1, le=4096, doc="systolic array rows (the reduction (K) "
                         "dimension of the stationary weight block)", source=_T2)
    mm_cols: int = param(128, ge=1, le=4096, doc="systolic array columns (output columns "
                         "(N) of the stationary weight block)", source=_T2)
    mm_dataflow: Literal["weight_stationary"] = param(
        "weight_stationary", doc="systolic dataflow (only weight stationary is modelled)",
        source=_T2)
    mm_weight_double_buffer: bool = param(
        True, doc="each PE holds a second weight register, so the next weight block is "
        "shifted in while the current one computes (TPU v1 style)",
        source="assumed, as in the TPU the paper cites for its MM unit (Jouppi et al., "
        "ISCA 2017)")
    mm_preload_rows_per_cycle: int = param(
        1, ge=1, le=4096, doc="weight rows shifted into the array per cycle (preload of a "
        "block takes mm_rows / this cycles)", source="assumed (one row per cycle)")
    # ---- MV unit
    mv_lanes: int = param(32, ge=1, le=4096, doc="MV lanes (independent dot products)",
                          source=_T2)
    mv_width: int = param(128, ge=1, le=4096, doc="elements per lane per cycle (1-D array "
                          "of multipliers + adder tree)", source=_T2)
    mv_latency: int = param(10, ge=0, le=MAX_LATENCY_CYCLES, unit="cycles",
                            doc="MV pipeline latency (multiply + log2(width) adder-tree "
                            "levels + accumulate)", source="assumed: 1 + log2(128) + 2")
    # ---- vector unit and SFU
    vector_width: int = param(128, ge=1, le=4096, doc="vector ALU lanes "
                              "(ADD/SUB/MUL/DIV)", source=_T2)
    adder_tree: int = param(128, ge=1, le=4096, doc="adder-tree inputs per cycle "
                            "(reductions)", source=_T2)
    sfu_rate: int = param(128, ge=1, le=4096, doc="SFU lookup-table requests per cycle "
                          "(exp, rsqrt, GELU/SiLU)", source=_T2)
    vector_latency: int = param(12, ge=0, le=MAX_LATENCY_CYCLES, unit="cycles",
                                doc="vector/SFU pipeline latency per tile (adder tree "
                                "depth + SFU lookup)",
                                source="assumed: log2(128) + 5")
    # ---- scratchpad and DMA
    spm_buffer_bytes: int = param(16 * 2**20, ge=4096, unit="bytes",
                                  doc="bytes of one scratchpad buffer", source=_T2)
    spm_buffers: int = param(2, ge=1, le=16, doc="scratchpad buffers per core (2 = double "
                             "buffering: reads of tile i wait for compute of tile i-2)",
                             source=_T2)
    acc_bytes: int = param(4, ge=1, le=8, unit="bytes", doc="bytes per accumulator "
                           "element of a partial output block kept in the scratchpad",
                           source="assumed: INT32 accumulation of INT8 products")
    dma_outstanding: int = param(
        2048, ge=1, doc="memory requests (bursts) one core's DMA may have in flight "
        "(the chip's total, cores x this, is split evenly over its DMA queues)",
        unit="bursts", source="chosen (Little's law): 3.3 TB/s x ~100 ns loaded latency / "
        "32 B / 4 cores = ~2.6k")
    dma_queues: int = param(
        0, ge=0, le=1024, doc="DMA request queues of the chip, shared by its cores (each "
        "queue serves the cores round-robin, tile by tile); a queue blocks only itself when "
        "its memory channel is full. 0 = one per memory channel",
        source="chosen: a NoC with per-channel buffers and fair arbitration")
    dma_chunk_bytes: int = param(
        0, ge=0, unit="bytes", doc="bytes per DMA descriptor; 0 = the channel-interleave "
        "granularity of the side's address mapping (at least 256 B, at most 64 KiB and "
        "one page)", source="chosen: one descriptor per channel-interleave unit")
    # ---- energy (INT8 operands, as the H2M2 chip computes)
    mm_mac_pj: float = param(
        0.3, ge=0, le=1e3, unit="pJ", doc="energy of one multiply-accumulate in the MM "
        "unit: an 8-bit multiply and a 32-bit accumulate",
        source=f"{_HOROWITZ}: 8-bit mult 0.2 pJ + 32-bit add 0.1 pJ")
    mv_mac_pj: float = param(
        0.25, ge=0, le=1e3, unit="pJ", doc="energy of one multiply-accumulate in the MV "
        "unit: an 8-bit multiply and its share of the adder tree (one add per product)",
        source=f"{_HOROWITZ}: 8-bit mult 0.2 pJ + 16-bit add 0.05 pJ")
    vector_op_pj: float = param(
        1.1, ge=0, le=1e4, unit="pJ", doc="energy of one vector-unit or SFU operation "
        "(the kernel's vector op count: FP16 adds, multiplies, lookups)",
        source=f"{_HOROWITZ}: 16-bit FP mult 1.1 pJ (the costlier of FP16 add 0.4 pJ and "
        "mult)")
    spm_read_pj_per_byte: float = param(
        2.5, ge=0, le=1e4, unit="pJ/byte", doc="energy per byte read from the scratchpad "
        "(a bank of the banked buffer)",
        source=f"{_HOROWITZ}: 64-bit read of a 32 KB SRAM 20 pJ, / 8 bytes")
    spm_write_pj_per_byte: float = param(
        2.5, ge=0, le=1e4, unit="pJ/byte", doc="energy per byte written to the scratchpad",
        source=f"{_HOROWITZ}: as a read (the paper gives one SRAM figure per access)")
    compute_dtypes: tuple[str, ...] = param(
        COMPUTE_DTYPES,
        doc="data types the matrix and vector units compute in, all at the rates above; a "
        "model whose dtype is not here is refused (its weights and KV may be stored "
        "narrower, widened on chip)",
        source="assumed: the cycle model's rates do not depend on the data type")
    tile_overhead_cycles: int = param(0, ge=0, le=MAX_LATENCY_CYCLES, unit="cycles",
                                      doc="fixed cycles added to each tile's compute "
                                      "(instruction issue)",
                                      source="assumed 0")

    def _check(self) -> None:
        for i, dt in enumerate(self.compute_dtypes):
            if dt not in COMPUTE_DTYPES:
                raise ConfigError(f"compute_dtypes[{i}]", f"unknown data type {dt!r}; known: "
                                  f"{', '.join(COMPUTE_DTYPES)}")
        if not self.compute_dtypes:
            raise ConfigError("compute_dtypes", "needs at least one data type")
        if self.mm_preload_rows_per_cycle > self.mm_rows:
            raise ConfigError("mm_preload_rows_per_cycle",
                              f"must be <= mm_rows ({self.mm_rows}), got "
                              f"{self.mm_preload_rows_per_cycle}")

    # ---- derived -------------------------------------------------------------------
    @property
    def cycle_ns(self) -> float:
        return 1.0 / self.freq_ghz

    @property
    def mm_peak_tops(self) -> float:
        """Peak MM throughput of the chip, 1e12 ops/s (2 ops per multiply-add)."""
        return 2.0 * self.mm_rows * self.mm_cols * self.cores * self.freq_ghz / 1e3

    @property
    def mv_peak_tops(self) -> float:
        """Peak MV throughput of the chip, 1e12 ops/s."""
        return 2.0 * self.mv_lanes * self.mv_width * self.cores * self.freq_ghz / 1e3

    @property
    def peak_tflops(self) -> float:
        """Peak dense throughput of the chip (the MM unit), 1e12 ops/s."""
        return self.mm_peak_tops

    @property
    def spm_bytes(self) -> int:
        return self.spm_buffer_bytes * self.spm_buffers


#: Named chip configurations (``chip: h2m2`` or ``chip: {preset: h2m2, cores: 8}``): the
#: fields each preset changes from the defaults above.
CHIP_PRESETS: Registry[dict[str, Any]] = Registry("chip preset")
CHIP_PRESETS.register("h2m2", {}, description="H2M2 Table 2 NPU: 4 cores at 1 GHz, 128x128 "
                      "MM unit, 32x128 MV unit, 2 x 16 MB scratchpad")


def resolve_chip(raw: Any, key: str = "chip") -> NpuChipConfig:
    """A chip from a preset name, ``{preset: NAME, ...overrides}`` or a full mapping
    (missing fields take the H2M2 Table 2 defaults)."""
    if isinstance(raw, NpuChipConfig):
        return raw
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        raw = {"preset": raw}
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a chip preset name or a mapping, got {raw!r}")
    data = dict(raw)
    if "preset" in data:
        name = data.pop("preset")
        data = deep_merge(dict(CHIP_PRESETS.get(name, f"{key}.preset"), name=name), data)
    return load(NpuChipConfig, data, key)


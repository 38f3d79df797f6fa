"""A GPU attached to a memory side: the figures the GPU kernel model prices kernels with.

A side whose ``gpu`` is set is a GPU: its DRAM is simulated as for any side, but its
steps are priced kernel by kernel (:mod:`h2m2sim.compute.gpu`) instead of by the NPU chip
model. Every figure is either a datasheet number or a microbenchmark of the GPU itself
(``scripts/measure_gpu_steps.py``, ``scripts/measure_gpu_memory.py``); the ``sources`` of a
preset say which. None is fitted to step times.

Units: ns, TFLOP/s (1e12 FLOP/s, a multiply-accumulate counts 2), bytes, GHz.
"""
from __future__ import annotations

import dataclasses
import math

from dram_models.errors import ConfigError
from dram_models.schema import param

__all__ = ["GpuSpec", "MATRIX_DTYPES"]

#: Data types a GPU may declare a matrix peak for (the model zoo's dtypes).
MATRIX_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU (all of its SMs), as the kernel model sees it."""

    name: str = param(doc="GPU name, e.g. NVIDIA H200 SXM")
    sms: int = param(ge=1, le=4096, doc="streaming multiprocessors", source="datasheet")
    sm_clock_ghz: float = param(gt=0, le=10, unit="GHz", doc="SM clock the peaks assume "
                                "(boost)", source="datasheet")
    peak_tflops: dict[str, float] = param(doc="dense tensor-core peak per data type "
                                          "(fp16, bf16, fp8, int8, ...), TFLOP/s "
                                          "(TOPS for integers), without sparsity",
                                          unit="TFLOP/s", source="datasheet")
    matrix_efficiency: float = param(gt=0, le=1, doc="fraction of the peak a large GEMM "
                                     "reaches (the compute-bound limit of a projection)",
                                     source="measured: GEMM microbenchmarks")
    sustained_matrix_efficiency: float = param(
        gt=0, le=1, doc="fraction of the peak a GEMM reaches when tensor-core work goes on "
        "for a whole step (prefill): the card lowers its SM clock to stay in its power "
        "limit", source="measured: GEMMs run back to back for a second, SM clock sampled")
    attention_efficiency: float = param(gt=0, le=1, doc="fraction of the peak the "
                                        "attention kernel reaches on the tile work of a "
                                        "long prompt, in short runs like matrix_efficiency "
                                        "(a whole prefill scales it by sustained / burst "
                                        "matrix efficiency: the same clock drop)",
                                        source="measured: attention microbenchmarks")
    attention_tile: int = param(128, ge=1, le=4096, unit="tokens", doc="query and key "
                                "tile of the FlashAttention-style kernel: causal attention "
                                "computes whole tiles, the diagonal ones included",
                                source="FlashAttention-2 (Dao, ICLR 2024): 128 x 128 "
                                "blocks for head dimension 128")
    attention_tile_overhead: float = param(ge=0, le=1e3, unit="tiles", doc="fixed work "
                                           "of one query tile (loading Q, the softmax "
                                           "rescale, writing O), in key-tile equivalents",
                                           source="measured: attention microbenchmarks")
    launch_ns: float = param(ge=0, le=1e6, unit="ns", doc="time one kernel adds to a "
                             "step replayed from a CUDA graph when it does almost nothing "
                             "(launch gap and the smallest kernel)",
                             source="measured: 200 tiny kernels in one CUDA graph")
    stream_kernel_ns: float = param(ge=0, le=1e7, unit="ns", doc="fixed time of a "
                                    "kernel that streams a large operand from DRAM (a "
                                    "projection's weights, attention's KV): launch, the "
                                    "ramp to full bandwidth and the uneven last wave",
                                    source="measured: GEMM and attention microbenchmarks "
                                    "(intercept of time against bytes)")
    norm_kernel_ns: float = param(ge=0, le=1e6, unit="ns", doc="fixed time of a "
                                  "normalization kernel (RMSNorm: one reduction per row, "
                                  "then the scaled row written)",
                                  source="measured: kernel profile of a decoder layer")
    strided_elements_per_ns: float = param(gt=0, le=1e6, unit="elements/ns", doc="rate "
                                           "of the element-wise kernels that read or write "
                                           "strided views (the activation on halves of "
                                           "the gate/up output, K/V scattered into the "
                                           "cache): they run unvectorized, below bandwidth",
                                           source="measured: kernel profile of a decoder "
                                           "layer")
    attention_cta_ns: float = param(ge=0, le=1e6, unit="ns", doc="fixed work of one "
                                    "(request, query head) block of the decode attention "
                                    "kernel; blocks run sms at a time, which bounds short "
                                    "contexts at large batch",
                                    source="measured: decode attention microbenchmarks")
    l2_bytes: int = param(gt=0, unit="bytes", doc="L2 cache", source="device query")
    l2_fetch_bytes: int = param(64, ge=32, le=128, unit="bytes", doc="bytes the L2 "
                                "fetches from DRAM per miss (an access smaller than this "
                                "moves this much)",
                                source="device query: cudaLimitMaxL2FetchGranularity")
    l2_hit_ns: float = param(ge=0, le=1e5, unit="ns", doc="load-to-use latency of an L2 "
                             "hit (the on-chip path a DRAM access also travels)",
                             source="measured: pointer chase")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")

    def _check(self) -> None:
        if not self.peak_tflops:
            raise ConfigError("peak_tflops", "needs the peak of at least one data type")
        for dt, v in self.peak_tflops.items():
            if dt not in MATRIX_DTYPES:
                raise ConfigError(f"peak_tflops.{dt}", f"unknown data type; known: "
                                  f"{', '.join(MATRIX_DTYPES)}")
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1e6):
                raise ConfigError(f"peak_tflops.{dt}", f"must be a finite number in "
                                  f"(0, 1e6] TFLOP/s, got {v!r}")

    @property
    def sustained_ratio(self) -> float:
        """Throughput of tensor-core work in a whole step relative to a short run."""
        return self.sustained_matrix_efficiency / self.matrix_efficiency

    def peak(self, dtype: str, key: str = "dtype") -> float:
        """Dense matrix peak (TFLOP/s) in ``dtype``; a type the GPU has no peak for is
        a ConfigError naming ``key``."""
        if dtype not in self.peak_tflops:
            raise ConfigError(key, f"GPU {self.name!r} declares no matrix peak for "
                              f"{dtype!r}; it has {', '.join(self.peak_tflops)}")
        return float(self.peak_tflops[dtype])

    @property
    def peak_tflops_max(self) -> float:
        """The highest declared peak (TFLOP/s), for summaries."""
        return max(self.peak_tflops.values())

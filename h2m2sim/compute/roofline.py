"""Roofline compute device: a peak FLOP/s figure, an achieved efficiency, and the
memory of one system side *measured* with the DRAM engine.

A kernel that performs ``flops`` of matrix work (plus optional ``vector_flops`` of
element-wise work) and moves ``read_bytes`` / ``write_bytes`` through DRAM takes::

    max(flops / (peak * efficiency) + vector_flops / (peak * vector_efficiency),
        read_bytes / BW_read + write_bytes / BW_write) + kernel_overhead_ns

Reads and writes share the DRAM bus, so their times add. ``BW_*`` are not datasheet
numbers: they are measured by running the access pattern through the side's
:class:`dram_models.memory.MemorySystem` (:func:`h2m2sim.memory.dram.measure_stream` for
sequential streams, a :mod:`dram_models.patterns` trace otherwise) and cached on disk with
:func:`h2m2sim.cache.cached`. A copy (``copy_ns``) is measured as such: every DMA queue
reads a chunk of the source and writes it to the destination, so read/write turnarounds
of the bus are in the price.

Units: FLOP/s in TFLOP/s = 1e12 FLOP/s (a multiply-accumulate is 2 FLOPs), bandwidth in
GB/s = 1e9 B/s, times in ns.

Defaults per system preset are in :data:`ROOFLINE_PRESETS` (a ``cpu-ddr5`` server socket
modelled on the AMD EPYC 9654 of the BMC paper); any other system gets the peak of its
side's NPU chip (:func:`default_spec`).
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dram_models import patterns
from dram_models.memory import Streams
from dram_models.schema import load, param, to_dict
from h2m2sim.cache import cached, code_digest, hash_key
from h2m2sim.errors import ConfigError
from h2m2sim.memory.dram import channel_granularity, measure_stream, memory_system
from h2m2sim.registry import Registry
from h2m2sim.system import SideSpec, SystemSpec, resolve_system

__all__ = ["RooflineSpec", "RooflineDevice", "ROOFLINE_PRESETS", "default_spec",
           "load_roofline_spec"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RooflineSpec:
    """Compute side of a roofline device (memory comes from the system side's DRAM)."""

    peak_tflops: float = param(gt=0, unit="TFLOP/s", doc="dense peak at the data type "
                               "(1e12 FLOP/s, a multiply-accumulate counts 2)")
    efficiency: float = param(0.7, gt=0, le=1, doc="achieved fraction of the peak for "
                              "GEMM-like (matrix) work", source="assumed")
    vector_efficiency: float = param(0.1, gt=0, le=1, doc="achieved fraction of the peak "
                                     "for element-wise work (softmax, masks, norms)",
                                     source="assumed")
    kernel_overhead_ns: float = param(0.0, ge=0, unit="ns", doc="fixed cost of one kernel "
                                      "call (launch, thread fork/join)", source="assumed")
    alloc_ns: float = param(0.0, ge=0, unit="ns", doc="fixed cost of allocating one "
                            "tensor (the BMC paper's C0)", source="assumed")
    zero_fill_alloc: bool = param(False, doc="a fresh allocation is zero-filled before "
                                  "use (an OS handing out new pages, or an explicit zeros()): "
                                  "priced as a DRAM write stream of its bytes")
    fault_ns_per_page: float = param(0.0, ge=0, unit="ns", doc="first-touch cost per page "
                                     "of a fresh allocation (page-fault trap, amortized over "
                                     "the threads that fault concurrently)", source="assumed")
    page_bytes: int = param(4096, ge=1, unit="bytes", doc="page size for fault_ns_per_page")
    measure_bytes: int = param(4 * 2**20, ge=4096, unit="bytes", doc="size of the DRAM "
                               "engine runs that measure bandwidths (steady state)")
    description: str = param("", doc="free text")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")


#: Roofline defaults of the chips of some system presets, by system name (merged over the
#: fields' defaults); other systems take their side's NPU chip peak.
ROOFLINE_PRESETS: Registry[dict[str, Any]] = Registry("roofline preset")
ROOFLINE_PRESETS.register("cpu-ddr5", dict(
        # AMD EPYC 9654 (the BMC paper's "Genoa" server, Sec. VII): 96 Zen 4 cores at
        # 2.4 GHz base. Zen 4 runs AVX-512 on two 256-bit FMA pipes: 32 FP32 FLOP/cycle
        # per core, twice that with AVX512_BF16 dot products (64 BF16 FLOP/cycle):
        # 96 x 2.4e9 x 64 = 14.7 TFLOP/s. The paper itself only says "a few TeraFLOPS"
        # (Sec. IV).
        peak_tflops=14.75,
        efficiency=0.6,            # oneDNN BF16 GEMM on a full socket: assumed 60 %
        vector_efficiency=0.05,    # softmax/mask: exp and reductions, assumed 5 %
        kernel_overhead_ns=2000.0,  # OpenMP fork/join over 96 threads per call: assumed
        alloc_ns=5000.0,           # malloc/mmap of a large tensor (no page faults): assumed
        description="one socket of a 96-core Genoa-class server (BMC paper Sec. VII)",
        sources={"peak_tflops": "AMD EPYC 9654: 96 cores x 2.4 GHz x 64 BF16 FLOP/cycle "
                 "(2 x 256-bit AVX512_BF16 pipes, derived); BMC paper Sec. IV: 'a few "
                 "TeraFLOPS'",
                 "memory": "system preset cpu-ddr5: 12 x DDR5-4800 (460.8 GB/s, the paper's "
                 "Sec. VIII-E figure), measured with the DRAM engine"}))
ROOFLINE_PRESETS.register("h2m2", dict(
        peak_tflops=131.072,       # Table 2 chip: 4 cores x 128x128 MACs x 2 x 1 GHz
        efficiency=0.8,            # assumed (the tile search reaches 80-95 % on big GEMMs)
        vector_efficiency=0.25,    # 32x128 vector unit per core of 128x128 array: 1/4
        kernel_overhead_ns=0.0,    # H2M2 Sec. 4.1: kernels are pre-launched
        alloc_ns=1000.0,           # device-side pool allocator: assumed 1 us
        description="one H2M2 chip (Table 2) on its side's DRAM",
        sources={"peak_tflops": "H2M2 Table 2: 4 cores, 128x128 MM units, 1 GHz",
                 "vector_efficiency": "H2M2 Table 2: 32x128 MV unit beside the 128x128 MM"}))


def load_roofline_spec(data: Any, key: str = "roofline") -> RooflineSpec:
    """Build a :class:`RooflineSpec` from a mapping (or return a spec unchanged); errors
    are :class:`ConfigError` naming ``key``."""
    if isinstance(data, RooflineSpec):
        return data
    return load(RooflineSpec, data, key)


def default_spec(system: SystemSpec, side: SideSpec | None = None) -> RooflineSpec:
    """The roofline defaults of ``system``: :data:`ROOFLINE_PRESETS` for a system named
    there, else the peak of the side's (default: the first side's) NPU chip with the
    field defaults."""
    if system.name in ROOFLINE_PRESETS:
        return load(RooflineSpec, ROOFLINE_PRESETS[system.name], f"roofline[{system.name}]")
    side = side or system.sides[0]
    return RooflineSpec(peak_tflops=float(side.chip.peak_tflops),
                        description=f"chip of side {side.name}",
                        sources={"peak_tflops": "the side's NPU chip (chip.peak_tflops)"})


def _measure_pattern(side: Any, pattern: str, is_write: bool, nbytes: int) -> float:
    """Bandwidth (GB/s) of ``pattern`` through the side's DRAM engine."""
    if pattern == "seq":
        return float(measure_stream(side, is_write, nbytes=nbytes).gbps)
    ms = memory_system(side)
    bb = ms.spec.burst_bytes
    try:
        tr = patterns.make(pattern, max(1, nbytes // bb), bb, seed=0)
    except ConfigError as err:
        raise err.prefixed("roofline") from None
    if is_write:
        tr = dataclasses.replace(tr, is_write=np.ones(len(tr.addr), dtype=bool))
    res = ms.run_trace(tr)
    return float(res.stats.bandwidth_gbps)


def _measure_copy(side: Any, nbytes: int) -> dict:
    """Copy ``nbytes`` from one region to another with one DMA queue per channel, each
    queue alternating a read of a source chunk and the write of that chunk to the
    destination. Returns the copy rate (bytes copied per second, GB/s) and the bus
    bandwidth (read + write bytes, GB/s)."""
    ms = memory_system(side)
    gran = max(channel_granularity(ms), ms.spec.burst_bytes)
    ch = ms.channels
    chunk = min(gran, 2**16)
    n = max(1, -(-int(nbytes) // chunk))
    nbytes = n * chunk
    idx = np.arange(n, dtype=np.int64)
    src = idx * chunk
    # destination: the next whole interleave period after the source, so that source
    # and destination chunks start on the same channel (a page-aligned allocation)
    period = gran * ch
    dst = -(-nbytes // period) * period + src
    addr = np.empty(2 * n, np.int64)
    addr[0::2], addr[1::2] = src, dst
    is_write = np.zeros(2 * n, bool)
    is_write[1::2] = True
    queue = (addr // gran) % ch
    order = np.argsort(queue, kind="stable")
    counts = np.bincount(queue, minlength=ch)
    last = np.cumsum(counts)
    st = Streams(first=last - counts, last=last, addr=addr[order].astype(np.uint64),
                 nbytes=np.full(2 * n, chunk, dtype=np.int64), is_write=is_write[order])
    res = ms.run(st)
    return {"copy_gbps": nbytes / res.stats.sim_ns, "bus_gbps": res.stats.bandwidth_gbps,
            "nbytes": int(nbytes), "sim_ns": float(res.stats.sim_ns)}


def _salt() -> str:
    return code_digest("dram_models", "h2m2sim.memory.dram", "h2m2sim.compute.roofline")


#: What the engine measured in this process, by the hash its cache entry has: a device
#: made again (another evaluator, sweep point or test) with another cache folder, or
#: one not holding it yet, gets it without running the engine (and still stores it)
_MEASURED: dict[str, dict] = {}
_MEASURED_LOCK = threading.Lock()


def _once(namespace: str, key: dict, measure: Callable[[], dict]) -> Callable[[], dict]:
    """``measure`` run at most once per process for (``namespace``, ``key``)."""
    h = f"{namespace}/{hash_key(key, _salt())}"

    def compute() -> dict:
        with _MEASURED_LOCK:
            hit = _MEASURED.get(h)
        if hit is None:
            hit = measure()
            with _MEASURED_LOCK:
                hit = _MEASURED.setdefault(h, hit)
        return dict(hit)        # the caller's own copy
    return compute


class RooflineDevice:
    """A roofline compute device on one side of a system.

    ``system`` is a :class:`~h2m2sim.system.SystemSpec`, a preset name or a YAML path;
    ``side`` a side name (default: the first side); ``spec`` a :class:`RooflineSpec` or a
    mapping of its fields (merged over the system's defaults, see :func:`default_spec`).
    ``cache`` switches the on-disk cache of the bandwidth measurements (``cache_dir``
    defaults to ``$H2M2SIM_CACHE``)."""

    def __init__(self, system: Any, side: str | None = None,
                 spec: RooflineSpec | Mapping | None = None, *, cache: bool = True,
                 cache_dir: Any = None):
        self.system = resolve_system(system, "system")
        self.side = self.system.side(side if side is not None else self.system.sides[0].name,
                                     "side")
        base = default_spec(self.system, self.side)
        if spec is None:
            self.spec = base
        elif isinstance(spec, RooflineSpec):
            self.spec = spec
        elif isinstance(spec, Mapping):
            merged = {**to_dict(base), **dict(spec)}
            self.spec = load(RooflineSpec, merged, "roofline")
        else:
            raise ConfigError("roofline", f"must be a mapping of roofline fields, got {spec!r}")
        self._cache = bool(cache)
        self._cache_dir = cache_dir
        self._bw: dict[tuple, float] = {}
        self._copy: dict | None = None

    # ------------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return f"roofline:{self.system.name}/{self.side.name}"

    @property
    def peak_gbps(self) -> float:
        """Datasheet (pin) bandwidth of the side's DRAM, GB/s."""
        return float(self.side.dram_spec.peak_gbps)

    @property
    def compute_tflops(self) -> float:
        """Achieved matrix throughput: peak x efficiency, TFLOP/s."""
        return self.spec.peak_tflops * self.spec.efficiency

    def _key(self, what: str, **kw) -> dict:
        return {"what": what, "dram": to_dict(self.side.dram_spec),
                "nbytes": self.spec.measure_bytes, **kw}

    # ------------------------------------------------------------------ measurements
    def bandwidth_gbps(self, pattern: str = "seq", is_write: bool = False) -> float:
        """Sustained DRAM bandwidth (GB/s) of ``pattern`` (``seq`` or any
        :mod:`dram_models.patterns` name: ``random``, ``stride:B``, ``paged:B``), reads or
        writes, measured with the DRAM engine (cached)."""
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError("pattern", f"must be a pattern name, got {pattern!r}")
        k = (pattern, bool(is_write))
        if k not in self._bw:
            key = self._key("bw", pattern=pattern, write=bool(is_write))
            measure = lambda: {"gbps": _measure_pattern(  # noqa: E731
                self.side, pattern, bool(is_write), self.spec.measure_bytes)}
            val = cached("roofline_bw", key, self._reused("roofline_bw", key, measure),
                         cache_dir=self._cache_dir, salt=_salt(), enabled=self._cache)
            self._bw[k] = float(val["gbps"])
        return self._bw[k]

    def copy_measurement(self) -> dict:
        """The engine run of a DRAM-to-DRAM copy: ``copy_gbps`` (bytes copied per second,
        GB/s), ``bus_gbps`` (read + write bytes per second), ``nbytes``, ``sim_ns``."""
        if self._copy is None:
            key = self._key("copy")
            measure = lambda: _measure_copy(self.side, self.spec.measure_bytes)  # noqa: E731
            self._copy = cached("roofline_copy", key,
                                self._reused("roofline_copy", key, measure),
                                cache_dir=self._cache_dir, salt=_salt(), enabled=self._cache)
        return self._copy

    def _reused(self, namespace: str, key: dict, measure: Callable[[], dict]
                ) -> Callable[[], dict]:
        """``measure``, reusing this process's earlier measurement of ``key`` (see
        :func:`_once`) unless the cache is off: then the engine runs again, as asked."""
        return _once(namespace, key, measure) if self._cache else measure

    def copy_gbps(self) -> float:
        """Measured copy rate: bytes copied per second (each read once and written once),
        GB/s."""
        return float(self.copy_measurement()["copy_gbps"])

    # ------------------------------------------------------------------ costs
    def compute_ns(self, flops, vector_flops=0.0):
        """Compute time (ns) of ``flops`` of matrix work and ``vector_flops`` of
        element-wise work, at peak x efficiency. Scalars or NumPy arrays."""
        peak = self.spec.peak_tflops * 1e3          # FLOP per ns
        return np.asarray(flops, float) / (peak * self.spec.efficiency) + \
            np.asarray(vector_flops, float) / (peak * self.spec.vector_efficiency)

    def memory_ns(self, read_bytes, write_bytes=0.0, pattern: str = "seq"):
        """DRAM time (ns) of the given traffic at the measured bandwidths (reads and
        writes share the bus, so their times add)."""
        r = np.asarray(read_bytes, float) / self.bandwidth_gbps(pattern, False)
        w = np.asarray(write_bytes, float)
        if np.any(w):
            r = r + w / self.bandwidth_gbps(pattern, True)
        return r

    def kernel_ns(self, flops: float, read_bytes: float, write_bytes: float = 0,
                  pattern: str = "seq", *, vector_flops: float = 0.0):
        """Time (ns) of one kernel: max(compute, memory) + ``kernel_overhead_ns``.
        Vectorized over NumPy arrays (returns a float for scalar inputs)."""
        for nm, v in (("flops", flops), ("read_bytes", read_bytes),
                      ("write_bytes", write_bytes), ("vector_flops", vector_flops)):
            if np.any(np.asarray(v) < 0):
                raise ConfigError(nm, f"must be >= 0, got {v}")
        t = np.maximum(self.compute_ns(flops, vector_flops),
                       self.memory_ns(read_bytes, write_bytes, pattern)) + \
            self.spec.kernel_overhead_ns
        return float(t) if np.ndim(t) == 0 else t

    def copy_ns(self, nbytes: float):
        """Time (ns) to copy ``nbytes`` within the side's DRAM (streaming read + write at
        the measured copy rate) + ``kernel_overhead_ns``; 0 for 0 bytes. Vectorized."""
        nb = np.asarray(nbytes, float)
        if np.any(nb < 0):
            raise ConfigError("nbytes", f"must be >= 0, got {nbytes}")
        t = np.where(nb > 0, nb / self.copy_gbps() + self.spec.kernel_overhead_ns, 0.0)
        return float(t) if np.ndim(t) == 0 else t

    def alloc_ns(self, count=1, nbytes=0.0):
        """Time (ns) of ``count`` tensor allocations of ``nbytes`` in total: the constant
        C0 (``alloc_ns``) each, plus, if configured, zero-filling the bytes (DRAM write
        stream) and first-touch faults (``fault_ns_per_page`` per page). Vectorized."""
        sp = self.spec
        t = np.asarray(count, float) * sp.alloc_ns
        nb = np.asarray(nbytes, float)
        if sp.zero_fill_alloc:
            t = t + nb / self.bandwidth_gbps("seq", True)
        if sp.fault_ns_per_page:
            t = t + np.ceil(nb / sp.page_bytes) * sp.fault_ns_per_page
        return float(t) if np.ndim(t) == 0 else t

    def summary(self) -> dict:
        """Measured and configured figures (JSON-able)."""
        return {"device": self.name, "peak_tflops": self.spec.peak_tflops,
                "efficiency": self.spec.efficiency,
                "vector_efficiency": self.spec.vector_efficiency,
                "kernel_overhead_ns": self.spec.kernel_overhead_ns,
                "alloc_ns": self.spec.alloc_ns, "dram_peak_gbps": self.peak_gbps,
                "read_gbps": self.bandwidth_gbps("seq", False),
                "write_gbps": self.bandwidth_gbps("seq", True),
                "copy_gbps": self.copy_gbps(),
                "copy_bus_gbps": float(self.copy_measurement()["bus_gbps"]),
                "sources": dict(self.spec.sources)}

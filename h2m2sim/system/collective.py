"""All-reduce across the devices a tensor-parallel layer is split over (H2M2 Figure 18's
8-HBM system), priced with NCCL's own cost model of a ring all-reduce.

NCCL picks, per call, the protocol whose predicted time is lowest; for a ring all-reduce
over ``n`` devices within one node its tuner (``src/graph/tuning.cc``, NVIDIA NCCL 2.x)
predicts

    t(bytes) = base + 2 (n - 1) x step + bytes / (bus x n / (2 (n - 1)))

per protocol: ``base`` the launch latency, ``step`` the hardware latency of one of the
2 (n - 1) ring steps, ``bus`` the bus bandwidth (GB/s per device; the ``n / 2(n-1)``
factor turns it into the algorithm bandwidth, as nccl-tests' ``busbw`` defines it). This
is the alpha-beta model of the ring all-reduce (Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 2005) with NCCL's
constants. The defaults are NCCL's for NVLink on Ampere (A100) in one node: the three
protocols' base and per-step latencies from the tuner's tables, and a bus bandwidth of
240 GB/s per GPU (12 NVLink3 links x 20 GB/s, NCCL's ``SM80_NVLINK_BW`` per link; the
A100's 600 GB/s NVLink is the bidirectional sum) scaled as the tuner does: LL at half of
it capped at 87.7 GB/s (``llMaxBws``), LL128 at 0.92 of it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from dram_models.schema import param

__all__ = ["CollectiveProtocol", "CollectiveSpec", "MeasuredAllReduce", "NCCL_A100_NVLINK", "NCCL_HOPPER_NVLINK",
           "ring_allreduce_ns"]

_NCCL = "NVIDIA NCCL src/graph/tuning.cc (ring, NVLink, Ampere, one node)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectiveProtocol:
    """One protocol of the collective library: its latencies and bus bandwidth."""

    name: str = param(doc="protocol name (NCCL: LL, LL128, Simple)")
    base_us: float = param(ge=0, le=1e6, unit="us", doc="latency of one collective call",
                           source=_NCCL + ": baseLat")
    step_us: float = param(ge=0, le=1e6, unit="us", doc="latency of one ring step",
                           source=_NCCL + ": hwLat")
    bus_gbps: float = param(gt=0, le=1e6, unit="GB/s", doc="bus bandwidth per device "
                            "(nccl-tests busbw)", source=_NCCL + ": busBw")

    def allreduce_ns(self, nbytes: float, devices: int) -> float:
        """Ring all-reduce of ``nbytes`` (per device) over ``devices`` devices, ns."""
        steps = 2 * (devices - 1)
        return (self.base_us + steps * self.step_us) * 1e3 + \
            nbytes * steps / (self.bus_gbps * devices)


#: NCCL's constants for NVLink on A100 (see the module docstring)
NCCL_A100_NVLINK = (
    CollectiveProtocol(name="LL", base_us=6.6, step_us=0.6, bus_gbps=87.7),
    CollectiveProtocol(name="LL128", base_us=14.0, step_us=1.9, bus_gbps=220.8),
    CollectiveProtocol(name="Simple", base_us=8.4, step_us=3.4, bus_gbps=240.0),
)


def ring_allreduce_ns(nbytes: float, devices: int, link_GBps: float, link_us: float
                      ) -> float:
    """Ring all-reduce of ``nbytes`` over ``devices`` devices on a point-to-point link, ns:
    2 (d - 1) steps of nbytes / d, each paying the link's latency (us) and bandwidth
    (GB/s)."""
    if devices <= 1:
        return 0.0
    return 2 * (devices - 1) * (link_us * 1e3 + nbytes / devices / link_GBps)


#: NCCL's constants for NVLink on Hopper (H100 / H200 SXM: 18 fourth-generation links), in
#: one node, by the same rules: the bus bandwidth is 18 x SM90_NVLINK_BW (20.6 GB/s per
#: link, NCCL src/graph/topo.h) = 370.8 GB/s, LL128 at 0.92 of it, LL at half of it
#: capped at llMaxBws' Hopper single-node 141.0 GB/s (tuning.cc); the ring latencies are
#: the NVLink ones above. NVLink SHARP (NVLS), which NCCL also uses on NVSwitch nodes for
#: large messages, is left out: the serving steps' all-reduces are small.
NCCL_HOPPER_NVLINK = (
    CollectiveProtocol(name="LL", base_us=6.6, step_us=0.6, bus_gbps=141.0),
    CollectiveProtocol(name="LL128", base_us=14.0, step_us=1.9, bus_gbps=341.1),
    CollectiveProtocol(name="Simple", base_us=8.4, step_us=3.4, bus_gbps=370.8),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasuredAllReduce:
    """Measured time of one all-reduce over ``devices`` devices by message size: linear
    between the measured sizes, the first point's time below them, the last segment's
    slope beyond them."""

    devices: int = param(ge=2, le=4096, doc="devices the measurement ran over")
    nbytes: tuple[float, ...] = param(ge=0, le=1e12, unit="bytes", doc="message sizes "
                                      "(per device), increasing")
    us: tuple[float, ...] = param(ge=0, le=1e6, unit="us", doc="time of one all-reduce "
                                  "at each size")

    def _check(self) -> None:
        from h2m2sim.errors import ConfigError
        if len(self.nbytes) != len(self.us) or len(self.nbytes) < 2:
            raise ConfigError("nbytes", "needs at least two sizes, one time per size")
        if any(b <= a for a, b in zip(self.nbytes, self.nbytes[1:])):
            raise ConfigError("nbytes", "sizes must increase")

    def time_ns(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` per device, ns."""
        x, y = self.nbytes, self.us
        if nbytes >= x[-1]:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            return (y[-1] + max(slope, 0.0) * (nbytes - x[-1])) * 1e3
        return float(np.interp(nbytes, x, y)) * 1e3


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectiveSpec:
    """The collective that joins tensor-parallel devices (one all-reduce of a layer's
    activations after its attention and after its FFN, Megatron-style): the fastest of
    its ``protocols`` (NCCL's model), or a ring over a named ``link``."""

    devices: int = param(1, ge=1, le=4096, doc="devices the layer is split over (1: no "
                         "collective)", source="H2M2 Sec. 5.5: 8-HBM is priced as eight "
                         "A100 GPUs")
    protocols: tuple[CollectiveProtocol, ...] = param(
        default_factory=lambda: NCCL_A100_NVLINK, doc="protocols to choose from; each "
        "call takes the fastest, as NCCL's tuner does", source=_NCCL)
    link: Optional[str] = param(
        None, doc="a link preset (h2m2sim presets links) the all-reduce runs over as a ring "
        "of point-to-point steps (each: the link's latency + bytes / bandwidth), for "
        "cards on a plain link such as PCIe; null = the protocols")

    engine_kernel: tuple[MeasuredAllReduce, ...] = param(
        default_factory=tuple, doc="the serving engines' own all-reduce kernel on these "
        "devices (vLLM's custom all-reduce: one or two shots over the NVLink peers' "
        "memory, used instead of NCCL for small messages), measured per device count; "
        "empty = none measured")
    engine_kernel_max_bytes: float = param(
        8.0 * 2**20, gt=0, le=1e12, unit="bytes", doc="largest message the engine kernel "
        "takes; larger ones go to the collective library",
        source="vLLM custom_all_reduce.py: max_size = 8 MiB")

    def _check(self) -> None:
        if self.link is not None:
            from .links import LINKS
            LINKS.get(self.link, "link")
        counts = [m.devices for m in self.engine_kernel]
        if len(set(counts)) != len(counts):
            from h2m2sim.errors import ConfigError
            raise ConfigError("engine_kernel", "one measurement per device count")

    def allreduce_ns(self, nbytes: float) -> float:
        """Time (ns) of one all-reduce of ``nbytes`` per device over :attr:`devices`
        (0 for one device)."""
        return self.allreduce_over(nbytes, self.devices)

    def allreduce_over(self, nbytes: float, devices: int, engine_kernel: bool = False
                       ) -> float:
        """Time (ns) of one all-reduce of ``nbytes`` per device over ``devices`` devices
        (a serving replica's tensor-parallel cards; 0 for one device). ``engine_kernel``:
        the serving engine's own kernel where it was measured for that many devices and
        takes messages that large, else the library's."""
        if devices <= 1:
            return 0.0
        if engine_kernel and nbytes <= self.engine_kernel_max_bytes:
            for m in self.engine_kernel:
                if m.devices == devices:
                    return m.time_ns(nbytes)
        if self.link is not None:
            from .links import LINKS
            link = LINKS.get(self.link, "system.collective.link")
            return ring_allreduce_ns(nbytes, devices, link.GBps, link.latency_us)
        if not self.protocols:
            return 0.0
        return min(p.allreduce_ns(nbytes, devices) for p in self.protocols)

"""Links between cards and between a card and another memory: what KV crosses between
serving pools (disaggregated prefill and decode), what a second KV tier is reached over,
and what a ring all-reduce of tensor-parallel cards runs over
(:class:`~h2m2sim.system.collective.CollectiveSpec`'s ``link``).

A :class:`KvLink` moves ``n`` bytes in ``latency + n / bandwidth`` seconds, one transfer
at a time in each direction (transfers queue behind each other), and spends ``n x 8 x
pj_per_bit`` on the wire. The memories at both ends are priced apart, by their own DRAM
models (the sender reads the KV, the receiver writes it).

Bandwidths are per direction, from the interface specifications; latencies and energies
per bit are order-of-magnitude figures for the class of link (a serving run is rarely
latency-bound on them: a 4K-token prompt's KV of a 7B model is tens of megabytes), and
each says where it comes from.

Units: GB/s = 1e9 bytes/s, microseconds, picojoules per bit.
"""
from __future__ import annotations

import dataclasses

from dram_models.schema import param
from h2m2sim.registry import Registry

__all__ = ["KvLink", "LINKS"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class KvLink:
    """A point-to-point link between a prefill and a decode pool."""

    name: str = param(doc="link preset name")
    GBps: float = param(gt=0, le=1e5, unit="GB/s", doc="bandwidth in one direction")
    latency_us: float = param(ge=0, le=1e6, unit="us", doc="time before a transfer's first "
                              "byte arrives (software, switch and wire)")
    pj_per_bit: float = param(ge=0, le=1e3, unit="pJ/bit", doc="energy of the link per "
                              "bit moved (both ends' PHYs); the memories are priced apart")
    source: str = param("", doc="where the figures come from")

    def transfer_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` bytes alone on the link."""
        return self.latency_us * 1e-6 + float(nbytes) / (self.GBps * 1e9)

    def energy_j(self, nbytes: float) -> float:
        """Joules the link spends moving ``nbytes`` bytes."""
        return float(nbytes) * 8.0 * self.pj_per_bit * 1e-12


#: Link presets by name (``--kv-link``).
LINKS: Registry = Registry("kv link", key="serving.kv_link")

LINKS.register("nvlink4", KvLink(
    name="nvlink4", GBps=450.0, latency_us=2.0, pj_per_bit=1.3,
    source="NVIDIA H100 datasheet: fourth-generation NVLink 900 GB/s per GPU, both "
           "directions together; latency and energy assumed (NVIDIA quotes 1.3 pJ/bit for "
           "its chip-to-chip NVLink-C2C; a board-level link costs at least that)"))
LINKS.register("nvlink3", KvLink(
    name="nvlink3", GBps=300.0, latency_us=2.0, pj_per_bit=1.3,
    source="NVIDIA A100 datasheet: third-generation NVLink 600 GB/s per GPU, both "
           "directions together; latency and energy assumed as for nvlink4"))
LINKS.register("pcie4-x16", KvLink(
    name="pcie4-x16", GBps=31.5, latency_us=5.0, pj_per_bit=5.0,
    source="PCI Express 4.0: 16 GT/s x 16 lanes, 128b/130b coding = 31.5 GB/s per "
           "direction; latency assumed, the order of a small peer-to-peer transfer plus a "
           "kernel launch (NCCL over PCIe, small messages); energy as pcie5-x16"))
LINKS.register("pcie5-x16", KvLink(
    name="pcie5-x16", GBps=63.0, latency_us=5.0, pj_per_bit=5.0,
    source="PCI Express 5.0: 32 GT/s x 16 lanes, 128b/130b coding = 63 GB/s per "
           "direction; latency and energy assumed (a host round trip; a long-reach SerDes)"))
LINKS.register("cxl2-x16", KvLink(
    name="cxl2-x16", GBps=63.0, latency_us=1.0, pj_per_bit=5.0,
    source="CXL 2.0 runs on the PCI Express 5.0 PHY: 63 GB/s per direction at x16; "
           "latency and energy assumed (a load/store path without a host round trip)"))
LINKS.register("rdma-400g", KvLink(
    name="rdma-400g", GBps=50.0, latency_us=10.0, pj_per_bit=10.0,
    source="400 Gb/s Ethernet or InfiniBand NDR: 50 GB/s per direction; latency and "
           "energy assumed (NIC, switch and two PCIe hops)"))

LINKS.register("h2m2-c2c", KvLink(
    name="h2m2-c2c", GBps=960.0, latency_us=0.5, pj_per_bit=1.17,
    source="the chip-to-chip link of H2M2's asymmetric device (Hwang et al., "
           "arXiv:2504.14893, 2025, Table 1: 960 GB/s); latency assumed as in the h2m2 "
           "system preset (0.5 us); energy Poulton et al., JSSC 2019 (1.17 pJ/b), as the "
           "preset's interconnect"))

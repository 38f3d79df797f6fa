"""The links KV crosses between serving pools (disaggregated prefill and decode) and to a
second KV tier (:data:`TIERS`: host or CXL memory behind the device, or the LPDDR side
of an asymmetric device behind its HBM side).

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

__all__ = ["KvLink", "KvTier", "LINKS", "TIERS", "kv_link", "transfer_energy_j"]


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


def kv_link(name: str, key: str = "serving.kv_link") -> KvLink:
    """The link preset ``name`` (ConfigError naming ``key`` otherwise)."""
    return LINKS.get(name, key)


def transfer_energy_j(nbytes: float, seconds: float, link: KvLink, sender_dram,
                      receiver_dram) -> float:
    """Joules of moving ``nbytes`` of KV in ``seconds``: the link's, the sender's DRAM
    read and the receiver's DRAM write (their DRAM models, as one stream)."""
    from h2m2sim.npu.energy import stream_energy   # the presets stay light to import
    if nbytes <= 0:
        return 0.0
    ns = max(seconds, 1e-12) * 1e9
    read = stream_energy(sender_dram, nbytes, ns, 0.0).dram.total_nj
    write = stream_energy(receiver_dram, nbytes, ns, 1.0).dram.total_nj
    return link.energy_j(nbytes) + (read + write) * 1e-9



@dataclasses.dataclass(frozen=True, kw_only=True)
class KvTier:
    """A second, larger and slower tier of KV memory behind the serving device: its link
    and the DRAM standard it is built of (whose model prices its reads and writes)."""

    name: str = param(doc="tier preset name")
    link: str = param(doc="the link to it (a preset of LINKS)")
    dram: str = param(doc="its DRAM standard (a dram_models preset)")
    source: str = param("", doc="what it stands for")


#: Second KV tiers by name (``--kv-offload``).
TIERS: Registry = Registry("kv tier", key="serving.kv_offload")

TIERS.register("host-ddr5", KvTier(
    name="host-ddr5", link="pcie5-x16", dram="ddr5-4800",
    source="the host's DDR5 behind the card's PCIe 5 x16 (SGLang HiCache's and LMCache's "
           "CPU tier)"))
TIERS.register("h2m2-lpddr", KvTier(
    name="h2m2-lpddr", link="h2m2-c2c", dram="lpddr5x-8533",
    source="the LPDDR5X side of H2M2's asymmetric device as a KV tier behind the HBM side, "
           "over the chips' link (the capacity side holding what the bandwidth side "
           "evicts)"))
TIERS.register("cxl-ddr5", KvTier(
    name="cxl-ddr5", link="cxl2-x16", dram="ddr5-4800",
    source="a CXL 2.0 memory expander of DDR5 (a pooled KV tier)"))

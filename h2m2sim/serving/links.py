"""The links KV crosses between serving pools (disaggregated prefill and decode) and to a
second KV tier (:data:`TIERS`: host or CXL memory behind the device, or the LPDDR side
of an asymmetric device behind its HBM side). The links themselves are hardware
(:mod:`h2m2sim.system.links`: :class:`KvLink`, the :data:`LINKS` presets).

The memories at both ends of a transfer are priced apart, by their own DRAM models (the
sender reads the KV, the receiver writes it): :func:`transfer_energy_j`. Units: GB/s =
1e9 bytes/s, microseconds, picojoules per bit, joules.
"""
from __future__ import annotations

import dataclasses

from dram_models.schema import param
from h2m2sim.registry import Registry
from h2m2sim.system.links import LINKS, KvLink

__all__ = ["KvLink", "KvTier", "LINKS", "TIERS", "kv_link", "transfer_energy_j"]


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

"""DRAM energy of an engine run (stand-in with the final interface; crude constants).

Energies in nJ. The constants below are placeholders of the right order of magnitude
for a DDR-class device, not a calibrated model.
"""
from __future__ import annotations

import dataclasses

from .spec import DramSpec
from .stats import DramStats

__all__ = ["DramEnergy", "dram_energy"]

_ACT_NJ = 1.0            # per ACT(+PRE) pair
_RDWR_PJ_PER_BIT = 2.0   # array access per bit read or written
_IO_PJ_PER_BIT = 2.0     # interface per bit moved
_REF_NJ = 30.0           # per all-bank refresh (per-bank refresh: a sixteenth)
_BACKGROUND_MW_PER_CH = 10.0


@dataclasses.dataclass(frozen=True)
class DramEnergy:
    """Energy of a run by component, nJ."""

    act_nj: float
    rdwr_nj: float
    refresh_nj: float
    background_nj: float
    io_nj: float

    @property
    def total_nj(self) -> float:
        return self.act_nj + self.rdwr_nj + self.refresh_nj + self.background_nj + self.io_nj

    def pj_per_bit(self, nbytes: int) -> float:
        return self.total_nj * 1e3 / (8 * nbytes) if nbytes else 0.0

    def as_dict(self, nbytes: int | None = None) -> dict:
        d = {"total_nj": self.total_nj}
        if nbytes is not None:
            d["pj_per_bit"] = self.pj_per_bit(nbytes)
        d.update(dataclasses.asdict(self))
        return d

    def scaled(self, factor: float) -> "DramEnergy":
        return DramEnergy(*(v * factor for v in dataclasses.astuple(self)))

    def __add__(self, other: "DramEnergy") -> "DramEnergy":
        return DramEnergy(*(a + b for a, b in zip(dataclasses.astuple(self),
                                                  dataclasses.astuple(other))))


def dram_energy(spec: DramSpec, stats: DramStats) -> DramEnergy | None:
    """Energy of the run ``stats`` on ``spec`` (never None in this stand-in)."""
    c = stats.commands
    bits = 8 * stats.bytes
    return DramEnergy(
        act_nj=_ACT_NJ * c.get("ACT", 0),
        rdwr_nj=_RDWR_PJ_PER_BIT * bits / 1e3,
        refresh_nj=_REF_NJ * (c.get("REF", 0) + c.get("REFPB", 0) / 16),
        background_nj=_BACKGROUND_MW_PER_CH * stats.channels * stats.sim_ns / 1e3,
        io_nj=_IO_PJ_PER_BIT * bits / 1e3)

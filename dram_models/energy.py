"""DRAM energy of a run from its command counts, in the method of DRAMPower.

Inputs: the preset's :class:`~dram_models.spec.Power` (per-device datasheet currents of
each supply rail, and I/O energy per bit) and the engine's :class:`DramStats` (command
counts summed over channels, simulated time, bytes moved). Energy is computed after the
run from counts alone; the engine records nothing extra.

Per device and rail of voltage V (mA x V x ns = pJ):

* ACT+PRE pair: ``V * (IDD0*tRC - IDD3N*tRAS - IDD2N*(tRC - tRAS))``: IDD0 is measured
  cycling one bank at tRC, so the standby current it already contains is taken out.
  Every ACT is closed by one precharge (PRE, PREA or auto-precharge), so ACT counts pairs.
* RD / WR burst: ``V * (IDD4R/W - IDD3N) * tBL``.
* all-bank REF: ``V * (IDD5B - IDD3N) * tRFC``; per-bank REF: ``V * (IDD5PB - IDD3N) *
  tRFCpb``, or without IDD5PB the all-bank energy divided by the per-bank refreshes per
  tREFI (the same rows are refreshed either way).
* background: ``V * IDD3N`` while a bank of the rank is open, ``V * IDD2N`` otherwise.

A command acts on every device of its rank (``channel_width_bits / device_width_bits``
devices); background runs on every device of every (pseudo-)channel and rank. I/O energy
is the per-bit figure times the bits read and written.

The engine keeps no open-bank time, so the active-standby share is estimated: each ACT
keeps its rank active for ``max(tRAS, tRCD + k*tBL + tRTP)`` where ``k`` is the mean
column commands per ACT, summed over ACTs and capped at the run time of all ranks. With
an open page policy rows stay open past that until a conflict, so the estimate is low
there; the error is bounded by ``(IDD3N - IDD2N) * V * time``, a few per cent of the
total on a busy memory. Power-down and self-refresh are not modelled (the controller never
enters them).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .commands import ACT, NCMD, RD, RDA, REF, REFPB, WR, WRA
from .spec import DramSpec, Power, Rail
from .stats import DramStats


class Additive:
    """Base of frozen dataclasses whose every field adds and scales: numbers, or values
    that themselves define ``+`` and ``scaled``. Results of parts of a run (energy,
    activity, time) combine field by field."""

    def __add__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return type(self)(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                             for f in dataclasses.fields(self)})

    def scaled(self, k: float):
        """Every field times ``k``."""
        return type(self)(**{f.name: _scaled(getattr(self, f.name), k)
                             for f in dataclasses.fields(self)})


def _scaled(v, k: float):
    return v * k if isinstance(v, (int, float)) else v.scaled(k)


@dataclasses.dataclass(frozen=True)
class DramEnergy(Additive):
    """Energy of a run by component, nJ."""

    act_nj: float
    rdwr_nj: float
    refresh_nj: float
    background_nj: float
    io_nj: float

    @property
    def total_nj(self) -> float:
        return (self.act_nj + self.rdwr_nj + self.refresh_nj + self.background_nj
                + self.io_nj)

    def pj_per_bit(self, nbytes: int) -> float:
        """Total energy per bit moved, pJ/bit (``nbytes`` bytes moved, > 0)."""
        if nbytes <= 0:
            raise ValueError(f"nbytes must be > 0, got {nbytes}")
        return self.total_nj * 1e3 / (8 * nbytes)

    def as_dict(self, nbytes: int | None = None) -> dict:
        """Plain data: ``total_nj``, ``pj_per_bit`` (with ``nbytes``; None when 0 bytes
        moved) and the components."""
        out = {"total_nj": self.total_nj}
        if nbytes is not None:
            out["pj_per_bit"] = self.pj_per_bit(nbytes) if nbytes > 0 else None
        out.update(dataclasses.asdict(self))
        return out


def devices_per_rank(spec: DramSpec) -> int:
    """Devices one command acts on: those side by side on a (pseudo-)channel's bus."""
    return spec.organization.channel_width_bits // spec.power.device_width_bits


def _pair_pj(r: Rail, t_rc: float, t_ras: float) -> float:
    return r.voltage * (r.idd0 * t_rc - r.idd3n * t_ras - r.idd2n * (t_rc - t_ras))


def _refpb_pj(r: Rail, spec: DramSpec, ns: float) -> float:
    t = spec.timing
    if r.idd5pb is not None and t.tRFCpb is not None:
        return r.voltage * (r.idd5pb - r.idd3n) * t.tRFCpb * ns
    per_trefi = t.tREFI / (t.tREFIpb or t.tREFI / spec.organization.banks)
    return r.voltage * (r.idd5b - r.idd3n) * t.tRFC * ns / per_trefi


def command_pj(spec: DramSpec) -> dict[str, float]:
    """Energy of one command on one rank (all its devices), pJ: ``act`` (ACT+PRE pair),
    ``rd``, ``wr``, ``ref`` (all-bank), ``refpb``; and standby power of one rank,
    ``p_act`` / ``p_pre`` in mW (= pJ/ns)."""
    t, ns, bl = spec.timing, spec.tck_ns, spec.tBL * spec.tck_ns
    rails = spec.power.rails
    out = {
        "act": sum(_pair_pj(r, t.tRC * ns, t.tRAS * ns) for r in rails),
        "rd": sum(r.voltage * (r.idd4r - r.idd3n) * bl for r in rails),
        "wr": sum(r.voltage * (r.idd4w - r.idd3n) * bl for r in rails),
        "ref": sum(r.voltage * (r.idd5b - r.idd3n) * t.tRFC * ns for r in rails),
        "refpb": sum(_refpb_pj(r, spec, ns) for r in rails),
        "p_act": sum(r.voltage * r.idd3n for r in rails),
        "p_pre": sum(r.voltage * r.idd2n for r in rails),
    }
    n = devices_per_rank(spec)
    return {k: v * n for k, v in out.items()}


def energy_per_command_pj(spec: DramSpec) -> np.ndarray | None:
    """Energy each command of a command log costs, pJ, indexed by command code (one
    entry past the commands, 0, for the log's queue entries): ACT its ACT+PRE pair, a
    column command its burst's core and I/O energy, a refresh its own; PRE, PREA 0 (in
    the pair). Summed over a run's log it is :func:`dram_energy` less background. None
    without power parameters."""
    if not isinstance(spec.power, Power):
        return None
    e, bits = command_pj(spec), 8 * spec.burst_bytes
    out = np.zeros(NCMD + 1)
    out[ACT] = e["act"]
    out[[RD, RDA]] = e["rd"] + bits * spec.power.io_read_pj_per_bit
    out[[WR, WRA]] = e["wr"] + bits * spec.power.io_write_pj_per_bit
    out[REF], out[REFPB] = e["ref"], e["refpb"]
    return out


def active_fraction(spec: DramSpec, stats: DramStats) -> float:
    """Estimated share of rank time with a bank open (see the module docstring)."""
    c = stats.commands
    acts = c.get("ACT", 0)
    o, t = spec.organization, spec.timing
    rank_ns = stats.sim_ns * stats.channels * o.pseudo_channels * o.ranks
    if acts == 0 or rank_ns <= 0:
        return 0.0
    cols = sum(c.get(k, 0) for k in ("RD", "WR", "RDA", "WRA"))
    open_ck = max(t.tRAS, t.tRCD + cols / acts * spec.tBL + t.tRTP)
    return min(1.0, acts * open_ck * spec.tck_ns / rank_ns)


def dram_energy(spec: DramSpec, stats: DramStats) -> DramEnergy | None:
    """Energy of the run ``stats`` on ``spec``, or None when ``spec`` has no power
    parameters (unknown, not zero)."""
    if not isinstance(spec.power, Power):
        return None
    e = command_pj(spec)
    c = stats.commands
    o = spec.organization
    ranks = stats.channels * o.pseudo_channels * o.ranks
    f = active_fraction(spec, stats)
    bg_pj = ranks * stats.sim_ns * (f * e["p_act"] + (1 - f) * e["p_pre"])
    rd_bits = 8 * spec.burst_bytes * stats.reads
    wr_bits = 8 * spec.burst_bytes * stats.writes
    io_pj = rd_bits * spec.power.io_read_pj_per_bit + wr_bits * spec.power.io_write_pj_per_bit
    return DramEnergy(
        act_nj=c.get("ACT", 0) * e["act"] / 1e3,
        rdwr_nj=((c.get("RD", 0) + c.get("RDA", 0)) * e["rd"]
                 + (c.get("WR", 0) + c.get("WRA", 0)) * e["wr"]) / 1e3,
        refresh_nj=(c.get("REF", 0) * e["ref"] + c.get("REFPB", 0) * e["refpb"]) / 1e3,
        background_nj=bg_pj / 1e3,
        io_nj=io_pj / 1e3)

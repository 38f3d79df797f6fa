"""Energy of one decode iteration from the sides' activities (see
:mod:`h2m2sim.npu.energy` for what is counted).

Each side's DRAM spends background and refresh energy for the whole iteration, not only
while its kernels run: the time a side is not running kernels (waiting at a barrier for
the slower side, the copies over the link, all of it at ``estimate`` fidelity) is priced
as an idle interval of its DRAM (:func:`~h2m2sim.npu.energy.stream_energy` of 0 bytes).
The link is priced per bit moved (``system.interconnect.energy_pj_per_bit``); a
hierarchical run's page migrations are the link bits plus the DRAM read and write of
the migrated bytes (their background is in the sides' idle time).

Metrics (J): ``energy_j`` (the iteration), ``energy_per_token_j`` (iteration / batch),
``energy_breakdown[side][component]`` and ``energy_breakdown.interconnect`` (``link_j``,
``migration_j``); ``energy_dram`` says where the DRAM energy came from.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from h2m2sim.npu.energy import (
    Activity,
    activity,
    kernel_counts,
    side_energy_j,
    stream_energy,
    stream_stats,
)

from .iteration import layer_kernels, layer_kinds

__all__ = ["IterationEnergy", "iteration_energy", "estimate_energy", "migration_energy_j",
           "DRAM_SOURCES"]

#: ``energy_dram`` of a result: how its DRAM energy was priced
DRAM_SOURCES = {
    "engine": "DRAM model over the engine runs' command counts (scaled like time)",
    "estimate": "DRAM model over an ideal sequential stream of the bytes moved (estimate "
                "fidelity: no engine runs)",
}


@dataclasses.dataclass(frozen=True)
class IterationEnergy:
    """What one iteration did, per side, for the whole iteration (all layers): the
    sides' activities, the time each side ran kernels (ns), the bytes over the link and
    the bytes migrated between the sides."""

    activity: Mapping[str, Activity]
    busy_ns: Mapping[str, float]
    link_bytes: float = 0.0
    migrated_bytes: float = 0.0
    migration_from: str | None = None
    migration_to: str | None = None


def migration_energy_j(system, nbytes: float, src: str, dst: str) -> float:
    """Link bits plus the DRAM read on ``src`` and write on ``dst`` of ``nbytes``, J."""
    if not nbytes:
        return 0.0
    link = nbytes * 8 * system.interconnect.energy_pj_per_bit * 1e-12
    rd = stream_energy(system.side(src).dram_spec, nbytes, 0.0).dram.total_nj
    wr = stream_energy(system.side(dst).dram_spec, nbytes, 0.0, 1.0).dram.total_nj
    return link + (rd + wr) * 1e-9


def estimate_energy(system, model, batch, lens, split, sides, dtype=None,
                    phase: str = "decode") -> IterationEnergy:
    """Analytic activities of one ``phase`` iteration's kernels (all layers) under
    ``split``; DRAM as one sequential stream of each side's bytes (no engine run, so no
    busy time: the sides' background is priced over the whole iteration). Several layer
    kinds: the sum over the kinds (:func:`~.iteration.layer_kinds`)."""
    if not model.homogeneous:
        parts = [estimate_energy(system, view, batch, lens, split, sides, dtype, phase)
                 for _, view, _ in layer_kinds(model)]
        act = {s: parts[0].activity[s] for s in sides}
        for e in parts[1:]:
            act = {s: act[s] + e.activity[s] for s in sides}
        return IterationEnergy(act, {s: 0.0 for s in sides},
                               sum(e.link_bytes for e in parts))
    per, xfers = layer_kernels(model, batch, lens, split, sides, dtype, phase=phase)
    L = model.layers
    act = {}
    for s in sides:
        ks = [k for (side, _), group in per.items() if side == s for k in group]
        rd = float(sum(k.read_bytes for k in ks))
        wr = float(sum(k.write_bytes for k in ks))
        spec = system.side(s).dram_spec
        stats = stream_stats(spec, rd + wr, 0.0, wr / (rd + wr) if rd + wr else 0.0)
        act[s] = activity(kernel_counts(ks, system.mmu.page_size), spec, stats).scaled(L)
    link = float(sum(x.bytes for x in xfers)) * L
    return IterationEnergy(act, {s: 0.0 for s in sides}, link)


def iteration_energy(system, e: IterationEnergy, iteration_ns: float, batch: int,
                     dram_source: str) -> dict:
    """The energy metrics of an iteration of ``iteration_ns`` at ``batch``."""
    breakdown: dict[str, dict[str, float]] = {}
    unpriced = 0.0
    for name, act in e.activity.items():
        side = system.side(name)
        idle = max(0.0, iteration_ns - e.busy_ns.get(name, 0.0))
        act = act + stream_energy(side.dram_spec, 0.0, idle)
        breakdown[name] = side_energy_j(act, side.chip, system.mmu)
        unpriced += act.unpriced_dram_bytes
    link = e.link_bytes * 8 * system.interconnect.energy_pj_per_bit * 1e-12
    mig = migration_energy_j(system, e.migrated_bytes, e.migration_from, e.migration_to) \
        if e.migrated_bytes else 0.0
    breakdown["interconnect"] = {"link_j": link, "migration_j": mig}
    total = sum(v for comp in breakdown.values() for v in comp.values())
    out = {"energy_j": total, "energy_per_token_j": total / batch,
           "energy_breakdown": breakdown, "energy_dram": DRAM_SOURCES[dram_source]}
    if unpriced:
        out["energy_note"] = (f"{unpriced:.0f} DRAM bytes on a standard without power "
                              "parameters are priced 0")
    return out

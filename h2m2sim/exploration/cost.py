"""What a design costs to buy and to run, and what one of its tokens costs.

A *cost model* is one YAML file of ``workloads/costs/`` (``2025`` names
``workloads/costs/2025.yaml``) or a path: the price year's DRAM prices per GB by kind,
the price of each chip or GPU by name, electricity, the facility overhead (PUE), the
amortization period, and the idle power the simulator's energy model leaves out. Every
number carries a ``source`` and a ``date`` (``YYYY-MM``); a number nobody published
says so (``source: "assumption: ..."``). ``docs/cost-model.md`` explains every number,
``workloads/costs/README.md`` the file format.

Units: $ (US dollars of the price year), GB = 1e9 bytes, W, J, s, h, $/kWh.

Formulas (``cards`` = ``system.cards``; a side is one memory with its chip or GPU):

* ``capex_usd = cards x sum over sides (capacity_bytes / 1e9 x $/GB of the side's DRAM
  kind + price of its compute)``; an NPU chip priced for ``cores`` cores costs
  ``price x side cores / cores``;
* ``node_power_w = energy_j / run seconds + idle_w`` (decode: one iteration; serving:
  ``duration_s``);
* ``tco_usd_per_hour = capex_usd / (amortization_years x 8766 h) + node_power_w x pue /
  1000 x usd_per_kwh``;
* ``usd_per_million_tokens = tco_usd_per_hour / (tokens_per_s x 3600) x 1e6``.

What ``idle_w`` adds, and why: the energy model prices the DRAM (background included)
over every iteration and the NPU's operations, not the chips' static power, the board
or the host. So ``idle_w`` = per card: the host's share, each NPU chip's idle power,
each GPU's measured idle board power less the standby power the DRAM model already
prices for its memory; plus, in a serving run, the DRAM standby of the time no
iteration ran (the server waiting for requests), which the energy model does not price.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from dram_models import yamlio
from dram_models.schema import load, param, suggest
from dram_models.spec import DramSpec
from h2m2sim.errors import ConfigError
from h2m2sim.system.config import SideSpec, SystemSpec, resolve_system
from workloads import ROOT as _WORKLOADS

__all__ = ["COSTS_DIR", "HOURS_PER_YEAR", "CostModel", "ChipPrice", "CardPrice", "DieCost",
           "IdlePower", "Sourced", "load_cost_model", "list_cost_models", "dram_kind",
           "dram_standby_w", "design_cost", "design_metrics"]

#: The shipped cost models, one YAML file per price year.
COSTS_DIR = _WORKLOADS / "costs"
#: Hours of one year (365.25 days), for amortizing a purchase.
HOURS_PER_YEAR = 8766.0

_DATE = re.compile(r"^(19|20|21)\d\d-(0[1-9]|1[0-2])$")
_KIND = re.compile(r"^[a-z][a-z0-9]*$")


# ------------------------------------------------------------------ sourced numbers
@dataclasses.dataclass(frozen=True, kw_only=True)
class Sourced:
    """A number with where it comes from."""

    value: float = param(doc="the number (its unit is the field's)")
    source: str = param(doc="who published it, and the title (publication, analyst or "
                            "vendor); or 'derived: <arithmetic from other sourced "
                            "numbers>'; or 'assumption: <reasoning>'")
    date: str = param(doc="the month the source dates the number, YYYY-MM")
    note: str = param("", doc="free text")

    def _check(self) -> None:
        if not self.source.strip():
            raise ConfigError("source", "must name where the number comes from (who "
                              "published it, and the title), or start with 'assumption:'")
        if not _DATE.match(self.date):
            raise ConfigError("date", f"must be a month, YYYY-MM (e.g. 2025-06), got "
                              f"{self.date!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class UsdPerGb(Sourced):
    value: float = param(gt=0, le=10_000, unit="$/GB", doc="price of one GB (1e9 bytes)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Usd(Sourced):
    value: float = param(gt=0, le=1e7, unit="$", doc="price of one part")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaferUsd(Sourced):
    value: float = param(gt=0, le=1e6, unit="$", doc="price of one processed wafer")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Watts(Sourced):
    value: float = param(ge=0, le=1e5, unit="W", doc="power")


@dataclasses.dataclass(frozen=True, kw_only=True)
class UsdPerKwh(Sourced):
    value: float = param(gt=0, le=10, unit="$/kWh", doc="price of electricity")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pue(Sourced):
    value: float = param(ge=1, le=5, doc="power usage effectiveness: facility power / IT "
                                         "power")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Years(Sourced):
    value: float = param(gt=0, le=30, unit="years", doc="amortization period")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gigabytes(Sourced):
    value: float = param(gt=0, le=1e6, unit="GB", doc="memory, 1e9 bytes")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquareMm(Sourced):
    value: float = param(gt=0, le=70_000, unit="mm^2", doc="die area")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerSquareMm(Sourced):
    value: float = param(ge=0, le=1, unit="defects/mm^2", doc="defect density")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cluster(Sourced):
    value: float = param(gt=0, le=100, doc="clustering parameter (alpha) of the "
                                           "negative-binomial yield model")


# ------------------------------------------------------------------ compute prices
@dataclasses.dataclass(frozen=True, kw_only=True)
class CardPrice:
    """A GPU priced from its card: the compute is the card less its memory at the
    year's $/GB (the memory is priced with the side, as every side's is)."""

    usd: Usd = param(doc="price of one card, memory included")
    memory_gb: Gigabytes = param(doc="memory of the card, GB: the system preset's "
                                     "capacity_bytes / 1e9, so that the preset's capex "
                                     "is the card's price")
    memory_kind: str = param(doc="DRAM kind of that memory (a key of dram_usd_per_gb)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DieCost:
    """A chip priced as the manufacturing cost of its die: a wafer's price over the
    good dies it yields (no packaging, test, masks, design or margin)."""

    wafer_usd: WaferUsd = param(doc="price of one processed wafer")
    die_area_mm2: SquareMm = param(doc="area of one die")
    defect_density_per_mm2: PerSquareMm = param(doc="defects per mm^2 (D0)")
    cluster: Cluster = param(doc="negative-binomial clustering parameter alpha")
    wafer_diameter_mm: float = param(300.0, gt=0, le=450, unit="mm",
                                     doc="wafer diameter", source="SEMI 300 mm wafers, "
                                     "the size of every leading-edge logic fab")

    def _check(self) -> None:
        if self.dies_per_wafer < 1:
            raise ConfigError("die_area_mm2", f"{self.die_area_mm2.value:g} mm^2 leaves "
                              f"no whole die on a {self.wafer_diameter_mm:g} mm wafer")

    @property
    def dies_per_wafer(self) -> float:
        """Whole dies on the wafer: its area over the die's, less the partial dies of
        the edge (pi d / sqrt(2 A))."""
        a, d = self.die_area_mm2.value, self.wafer_diameter_mm
        return math.pi * (d / 2) ** 2 / a - math.pi * d / math.sqrt(2 * a)

    @property
    def die_yield(self) -> float:
        """Fraction of good dies, negative binomial: (1 + A D0 / alpha)^-alpha."""
        alpha = self.cluster.value
        return (1 + self.die_area_mm2.value * self.defect_density_per_mm2.value
                / alpha) ** -alpha

    @property
    def usd(self) -> float:
        """$ per good die."""
        return self.wafer_usd.value / (self.dies_per_wafer * self.die_yield)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChipPrice:
    """The price of one chip or GPU (without its memory): give exactly one of ``usd``,
    ``card`` or ``die``."""

    usd: Optional[Usd] = param(None, doc="the price of the compute itself")
    card: Optional[CardPrice] = param(None, doc="a card price, less its memory")
    die: Optional[DieCost] = param(None, doc="the manufacturing cost of the die")
    cores: Optional[int] = param(
        None, ge=1, le=1024, doc="cores of the chip as priced: a chip of the same name "
        "with other cores costs (and idles at) price x its cores / this, as its die "
        "grows with the cores. Null = one price whatever the cores (a GPU).")
    description: str = param("", doc="free text")

    def _check(self) -> None:
        given = [k for k in ("usd", "card", "die") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ConfigError("usd", "give exactly one of usd, card and die, got "
                              + (", ".join(given) or "none"))

    def base_usd(self, dram: Mapping[str, UsdPerGb]) -> float:
        """$ of the chip as priced (at ``cores``); ``dram`` prices a card's memory."""
        if self.usd is not None:
            return self.usd.value
        if self.card is not None:
            c = self.card
            return c.usd.value - c.memory_gb.value * dram[c.memory_kind].value
        return self.die.usd

    def scale(self, cores: Optional[int]) -> float:
        """Factor of a chip with ``cores`` cores (1 for a price that ignores cores)."""
        return 1.0 if self.cores is None or cores is None else cores / self.cores


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdlePower:
    """The idle floor: power drawn whatever the load, that the energy model leaves out."""

    chips: dict[str, Watts] = param(doc="idle power of each chip or GPU of chip_usd, by "
                                        "name (an NPU chip's at the chip's priced cores; "
                                        "a GPU's is its measured idle board power)")
    host_per_card: Watts = param(doc="the host's share of one card (CPUs and the rest "
                                     "of the node)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CostModel:
    """Prices and power figures of one price year (see the module docstring)."""

    year: int = param(ge=2000, le=2100, doc="the price year")
    description: str = param(doc="what the file holds")
    dram_usd_per_gb: dict[str, UsdPerGb] = param(
        doc="$/GB by DRAM kind: the DRAM standard's name before its speed, in lower case "
            "(HBM3E-6400 -> hbm3e)")
    chip_usd: dict[str, ChipPrice] = param(
        doc="price of each compute, by name: an NPU chip's name (chip.name, e.g. h2m2) "
            "or a GPU's (gpu.name, e.g. NVIDIA H200 SXM)")
    usd_per_kwh: UsdPerKwh = param(doc="price of electricity")
    pue: Pue = param(doc="facility power / IT power")
    amortization_years: Years = param(doc="years the hardware is paid off over")
    idle_w: IdlePower = param(doc="the idle floor the energy model leaves out")
    path: str = param("", doc="the file it was read from (set by load_cost_model)")

    def _check(self) -> None:
        for kind in self.dram_usd_per_gb:
            if not _KIND.match(kind):
                raise ConfigError(f"dram_usd_per_gb.{kind}", "must be a DRAM kind in lower "
                                  "case: the standard's name before its speed (hbm3e for "
                                  "HBM3E-6400)")
        for name, chip in self.chip_usd.items():
            self._check_chip(name, chip)
        self._check_idle()

    def _check_chip(self, name: str, chip: ChipPrice) -> None:
        if chip.card is None:
            return
        kind = chip.card.memory_kind
        if kind not in self.dram_usd_per_gb:
            raise ConfigError(f"chip_usd.{name}.card.memory_kind", self._unpriced(kind))
        if chip.base_usd(self.dram_usd_per_gb) <= 0:
            card = chip.card
            raise ConfigError(f"chip_usd.{name}.card", f"the card (${card.usd.value:,.0f}) "
                              f"costs no more than its memory ({card.memory_gb.value:g} GB "
                              f"of {kind}): its compute would be free")

    def _check_idle(self) -> None:
        names = list(self.chip_usd)
        for name in self.idle_w.chips:
            if name not in self.chip_usd:
                raise ConfigError(f"idle_w.chips.{name}", "no chip of that name in chip_usd"
                                  + suggest(name, names) + f"; chips: {', '.join(names)}")
        for name in names:
            if name not in self.idle_w.chips:
                raise ConfigError("idle_w.chips", f"no idle power for {name!r}: every chip "
                                  "of chip_usd needs one")

    def _unpriced(self, kind: str) -> str:
        kinds = sorted(self.dram_usd_per_gb)
        return (f"DRAM kind {kind!r} has no price in dram_usd_per_gb" + suggest(kind, kinds)
                + f"; priced: {', '.join(kinds)}")

    @property
    def label(self) -> str:
        """How messages name this model: its year and file."""
        return f"cost model {self.year} ({self.path or 'in memory'})"

    def dram_price(self, kind: str, key: str = "dram", side: str = "") -> float:
        """$/GB of DRAM ``kind`` (ConfigError naming ``key`` and ``side`` if unpriced)."""
        if kind not in self.dram_usd_per_gb:
            what = f"side {side!r}: " if side else ""
            raise ConfigError(key, what + self._unpriced(kind) + f" in the {self.label}")
        return self.dram_usd_per_gb[kind].value

    def chip(self, name: str, key: str = "chip", side: str = "") -> ChipPrice:
        """The price entry of compute ``name`` (ConfigError naming ``key`` if none)."""
        if name not in self.chip_usd:
            names = list(self.chip_usd)
            what = f"side {side!r} computes on {name!r}" if side else repr(name)
            raise ConfigError(key, f"{what}, which the {self.label} does not price"
                              + suggest(name, names) + f"; priced: {', '.join(names)}")
        return self.chip_usd[name]

    def compute_usd(self, name: str, cores: Optional[int] = None, key: str = "chip",
                    side: str = "") -> float:
        """$ of one chip or GPU ``name`` with ``cores`` cores."""
        chip = self.chip(name, key, side)
        return chip.base_usd(self.dram_usd_per_gb) * chip.scale(cores)

    def compute_idle_w(self, name: str, cores: Optional[int] = None, key: str = "chip",
                       side: str = "") -> float:
        """Idle W of one chip or GPU ``name`` with ``cores`` cores."""
        chip = self.chip(name, key, side)
        return self.idle_w.chips[name].value * chip.scale(cores)


# ------------------------------------------------------------------ loading
def list_cost_models() -> list[str]:
    """Names of the shipped cost models (``workloads/costs/*.yaml``)."""
    return sorted(p.stem for p in COSTS_DIR.glob("*.yaml"))


def load_cost_model(name_or_path: str | os.PathLike) -> CostModel:
    """The cost model ``name_or_path``: a shipped one by name (``"2025"``) or a YAML file.
    Every problem is one ConfigError naming the key (and the file in its message)."""
    text = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) \
        else str(name_or_path)
    is_file = Path(text).suffix in (".yaml", ".yml")
    if not is_file and text not in list_cost_models():
        names = list_cost_models()
        raise ConfigError("cost", f"unknown cost model {text!r}" + suggest(text, names)
                          + f"; available: {', '.join(names)} (or a path to a .yaml file)")
    path = Path(text) if is_file else COSTS_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ConfigError("cost", f"no such file: {text}")
    data = yamlio.load_file(path)
    if not isinstance(data, dict):
        raise ConfigError("cost", f"cost file {path} must hold a mapping")
    if "path" in data:
        raise ConfigError("path", f"is where the file lies, not a setting; remove it "
                                  f"(cost file {path})")
    try:
        return load(CostModel, dict(data, path=str(path.resolve())))
    except ConfigError as err:
        raise ConfigError(err.key, f"{err.message} (cost file {path})") from None


# ------------------------------------------------------------------ a design's hardware
def dram_kind(side: SideSpec | DramSpec) -> str:
    """DRAM kind of a side (or of a DRAM standard): the standard's name before the
    speed, in lower case (HBM3E-6400 -> hbm3e, LPDDR5X-8533 -> lpddr5x)."""
    spec = side.dram if isinstance(side, SideSpec) else side
    return spec.name.split("-")[0].strip().lower()


def dram_standby_w(side: SideSpec) -> float:
    """W the DRAM model prices for ``side``'s memory moving nothing (background and
    refresh), the rate the energy model charges while a side idles."""
    from h2m2sim.npu.energy import stream_energy      # the energy model, loaded on use
    return stream_energy(side.dram_spec, 0.0, 1e9).dram.total_nj * 1e-9


def _systems(cfg: Any) -> list[tuple[str, SystemSpec]]:
    """(key, system) of every system ``cfg`` runs on: its ``system``, or the two pools
    of a serving run that names a prefill and a decode system."""
    if isinstance(cfg, SystemSpec):
        return [("system", cfg)]
    serving = cfg.workload.serving
    get = serving.get if isinstance(serving, Mapping) else \
        (lambda k: getattr(serving, k, None))     # raw data, or the resolved ServingConfig
    names = {k: get(k) for k in ("prefill_system", "decode_system")}
    if all(isinstance(v, str) for v in names.values()):
        return [(f"workload.serving.{k}", resolve_system(v, f"workload.serving.{k}"))
                for k, v in names.items()]
    return [("system", cfg.system)]


def _compute(side: SideSpec, key: str) -> tuple[str, Optional[int], str]:
    """(name, cores, key) of the compute of ``side``: its GPU, else its NPU chip."""
    if side.gpu is not None:
        return side.gpu.name, None, f"{key}.gpu.name"
    return side.chip.name, side.chip.cores, f"{key}.chip"


def _card_cost(system: SystemSpec, key: str, cost: CostModel) -> tuple[float, float, float]:
    """($ memory, $ compute, GB) of one card of ``system``."""
    memory = compute = gb = 0.0
    for i, side in enumerate(system.sides):
        skey = f"{key}.sides[{i}]"
        side_gb = side.capacity_bytes / 1e9
        memory += side_gb * cost.dram_price(dram_kind(side), f"{skey}.dram", side.name)
        name, cores, ckey = _compute(side, skey)
        compute += cost.compute_usd(name, cores, ckey, side.name)
        gb += side_gb
    return memory, compute, gb


def design_cost(cfg: Any, cost: CostModel) -> dict[str, float]:
    """Hardware cost of the design ``cfg`` (a RunConfig, or a SystemSpec): ``capex_usd``
    (all cards) = ``capex_memory_usd`` + ``capex_compute_usd``; ``cards``, ``chips``
    (chips and GPUs, all cards) and ``memory_gb`` (all cards, 1e9 bytes)."""
    out = dict.fromkeys(("capex_memory_usd", "capex_compute_usd", "cards", "chips",
                         "memory_gb"), 0.0)
    for key, system in _systems(cfg):
        memory, compute, gb = _card_cost(system, key, cost)
        out["capex_memory_usd"] += system.cards * memory
        out["capex_compute_usd"] += system.cards * compute
        out["memory_gb"] += system.cards * gb
        out["cards"] += system.cards
        out["chips"] += system.cards * len(system.sides)
    out["capex_usd"] = out["capex_memory_usd"] + out["capex_compute_usd"]
    return out


def _idle_card_w(system: SystemSpec, key: str, cost: CostModel) -> tuple[float, float]:
    """(idle floor W, DRAM standby W) of one card of ``system``. A GPU's measured idle
    board power includes its memory's standby, which the energy model already prices
    over the run, so only the rest counts (never below 0)."""
    floor, standby = cost.idle_w.host_per_card.value, 0.0
    for i, side in enumerate(system.sides):
        name, cores, ckey = _compute(side, f"{key}.sides[{i}]")
        idle = cost.compute_idle_w(name, cores, ckey, side.name)
        dram = dram_standby_w(side)
        floor += max(0.0, idle - dram) if side.gpu is not None else idle
        standby += dram
    return floor, standby


# ------------------------------------------------------------------ a run's figures
def _number(metrics: Mapping[str, Any], key: str, kind: str, required: bool) -> float:
    """Metric ``key`` as a float; NaN when absent or null and not ``required``."""
    value = metrics.get(key)
    if value is None:
        if required:
            raise ConfigError(f"metrics.{key}", f"missing: a {kind} run reports it")
        return math.nan
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"metrics.{key}", f"must be a number, got {value!r}")
    return float(value)


def _busy_fraction(metrics: Mapping[str, Any], seconds: float) -> float:
    """Fraction of the run the serving replicas spent in iterations (their
    ``time_breakdown_s`` seconds, summed over replicas); NaN when not reported."""
    parts, replicas = metrics.get("time_breakdown_s"), metrics.get("replicas")
    if not isinstance(parts, Mapping) or isinstance(replicas, bool) \
            or not isinstance(replicas, numbers.Integral) or replicas < 1 \
            or not seconds > 0:
        return math.nan
    busy = sum(float(v) for v in parts.values() if isinstance(v, numbers.Real))
    return min(1.0, busy / (seconds * replicas))


def _run(cfg: Any, metrics: Mapping[str, Any]) -> dict[str, float]:
    """seconds, tokens_per_s, energy_j, tpot_p99_s and busy_fraction of a run: a
    serving run over its ``duration_s``, any other over one iteration."""
    serving = getattr(getattr(cfg, "workload", None), "serving", None) is not None
    kind = "serving" if serving else "decode"
    tokens = _number(metrics, "tokens_per_s", kind, True)
    energy = _number(metrics, "energy_j", kind, False)
    if serving:
        seconds = _number(metrics, "duration_s", kind, True)
        return {"seconds": seconds, "tokens_per_s": tokens, "energy_j": energy,
                "tpot_p99_s": _number(metrics, "tpot_p99_s", kind, False),
                "busy_fraction": _busy_fraction(metrics, seconds)}
    seconds = _number(metrics, "iteration_time_ns", kind, True) * 1e-9
    decode = getattr(getattr(cfg, "workload", None), "phase", "decode") == "decode"
    # every request of the batch waits one whole iteration for each of its tokens
    return {"seconds": seconds, "tokens_per_s": tokens, "energy_j": energy,
            "tpot_p99_s": seconds if decode else math.nan, "busy_fraction": 1.0}


def _ratio(num: float, den: float) -> float:
    """num / den; NaN when den is not positive (no throughput, no time)."""
    return num / den if den > 0 else math.nan


def _power(cfg: Any, run: Mapping[str, float], cost: CostModel) -> dict[str, float]:
    """idle_w, idle_dram_gap_w, dynamic_w and node_power_w of the run."""
    floor = standby = 0.0
    for key, system in _systems(cfg):
        f, s = _idle_card_w(system, key, cost)
        floor += system.cards * f
        standby += system.cards * s
    busy = run["busy_fraction"]
    # where the server waited for requests no iteration priced the DRAM's standby
    gap = standby * (1.0 - busy) if math.isfinite(busy) else 0.0
    dynamic = _ratio(run["energy_j"], run["seconds"])
    return {"idle_w": floor + gap, "idle_dram_gap_w": gap, "dynamic_w": dynamic,
            "node_power_w": dynamic + floor + gap}


def design_metrics(cfg: Any, metrics: Mapping[str, Any],
                   cost: CostModel) -> dict[str, float]:
    """Cost, power and per-token figures of a run of ``cfg`` whose metrics are
    ``metrics``: everything :func:`design_cost` gives, and

    * ``node_power_w`` (W, all cards) = ``dynamic_w`` (the run's energy_j / its seconds)
      + ``idle_w`` (the floor the energy model leaves out, of which
      ``idle_dram_gap_w`` is DRAM standby while a server waited), and ``busy_fraction``;
    * ``energy_per_token_j`` (J per output token, idle floor included; it replaces the
      run's own, which counts the energy model only);
    * ``tokens_per_s`` (output tokens/s), ``tokens_per_s_per_card``,
      ``tokens_per_s_per_dollar`` (tokens/s per $ of hardware);
    * ``capex_usd_per_hour``, ``energy_usd_per_hour``, ``tco_usd_per_hour``,
      ``usd_per_million_tokens``, ``tokens_per_dollar``;
    * ``tpot_p99_s``: a serving run's own; a decode iteration's length (every token of
      the batch waits one iteration); NaN for a prefill step;
    * ``energy_priced``: 1, or 0 when the run priced no energy -- its power and
      everything that depends on it are then NaN (the idle floor alone would understate
      them), its capex figures still hold.
    """
    out = design_cost(cfg, cost)
    run = _run(cfg, metrics)
    out.update(_power(cfg, run, cost))
    tokens = run["tokens_per_s"]
    capex_h = out["capex_usd"] / (cost.amortization_years.value * HOURS_PER_YEAR)
    energy_h = out["node_power_w"] * cost.pue.value / 1000 * cost.usd_per_kwh.value
    tco = capex_h + energy_h
    per_mtok = _ratio(tco, tokens * 3600) * 1e6
    out.update({
        "busy_fraction": run["busy_fraction"],
        "energy_priced": float(math.isfinite(run["energy_j"])),
        "energy_per_token_j": _ratio(out["node_power_w"], tokens),
        "tokens_per_s": tokens,
        "tokens_per_s_per_card": _ratio(tokens, out["cards"]),
        "tokens_per_s_per_dollar": _ratio(tokens, out["capex_usd"]),
        "capex_usd_per_hour": capex_h, "energy_usd_per_hour": energy_h,
        "tco_usd_per_hour": tco, "usd_per_million_tokens": per_mtok,
        "tokens_per_dollar": _ratio(1e6, per_mtok),
        "tpot_p99_s": run["tpot_p99_s"],
    })
    return out

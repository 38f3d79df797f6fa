"""Physical quantities behind result columns: a readable name and a unit read from a
column's name, and the scale (ns -> us/ms/s, bytes -> KB/MB/GB, J -> mJ/uJ) that makes its
numbers read well on an axis.

Metric names carry their unit as a suffix (``iteration_time_ns``, ``kv_bytes``,
``bandwidth_gbps``, see :mod:`h2m2sim.runner`); :func:`quantity_of` splits such a name
into a :class:`Quantity`. Byte and bandwidth prefixes are decimal (1 GB = 10^9 bytes),
as everywhere in the simulator.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError

__all__ = ["Unit", "Dimension", "Quantity", "DIMENSIONS", "quantity_of", "readable_name"]


@dataclass(frozen=True)
class Unit:
    """One unit of a dimension; ``size`` is how many of the dimension's base units
    (seconds, bytes, bytes/s) it holds."""
    symbol: str
    size: float


@dataclass(frozen=True)
class Dimension:
    """What a column measures and the units it may be shown in, smallest first."""
    name: str
    units: tuple[Unit, ...]

    def unit(self, symbol: str, option: str) -> Unit:
        """The unit spelled ``symbol``; a ConfigError naming ``option`` otherwise."""
        for u in self.units:
            if u.symbol.lower() == symbol.lower():
                return u
        symbols = [u.symbol for u in self.units]
        raise ConfigError(option, f"'{symbol}' is not a {self.name} unit"
                          + suggest(symbol, symbols) + f"; choose {', '.join(symbols)}")

    def fitting(self, values: Iterable[float], stored: Unit) -> Unit:
        """The largest unit in which the largest magnitude of ``values`` (in ``stored``
        units) is still >= 1, so ticks read 1..999 without an offset or exponent."""
        peak = max((abs(v) for v in values if math.isfinite(v)), default=0.0) * stored.size
        best = stored
        for u in self.units:
            if peak >= u.size * (1 - 1e-9):  # 1000 ns in floats must still read 1 us
                best = u
        return best if peak else stored


TIME = Dimension("time", (Unit("ns", 1e-9), Unit("us", 1e-6), Unit("ms", 1e-3),
                          Unit("s", 1.0)))
SIZE = Dimension("size", (Unit("B", 1.0), Unit("KB", 1e3), Unit("MB", 1e6), Unit("GB", 1e9),
                          Unit("TB", 1e12)))
BANDWIDTH = Dimension("bandwidth", (Unit("B/s", 1.0), Unit("KB/s", 1e3), Unit("MB/s", 1e6),
                                    Unit("GB/s", 1e9), Unit("TB/s", 1e12)))
ENERGY = Dimension("energy", (Unit("pJ", 1e-12), Unit("nJ", 1e-9), Unit("uJ", 1e-6),
                              Unit("mJ", 1e-3), Unit("J", 1.0)))

#: Name suffix -> (dimension, the unit the column is stored in). Longest suffix wins.
DIMENSIONS: dict[str, tuple[Dimension, Unit]] = {
    "_ns": (TIME, TIME.units[0]), "_us": (TIME, TIME.units[1]),
    "_ms": (TIME, TIME.units[2]), "_s": (TIME, TIME.units[3]),
    "_bytes": (SIZE, SIZE.units[0]), "_kb": (SIZE, SIZE.units[1]),
    "_mb": (SIZE, SIZE.units[2]), "_gb": (SIZE, SIZE.units[3]),
    "_gbps": (BANDWIDTH, BANDWIDTH.units[3]),
    "_pj": (ENERGY, ENERGY.units[0]), "_nj": (ENERGY, ENERGY.units[1]),
    "_j": (ENERGY, ENERGY.units[4]),
}

#: Suffixes of rates and counts shown as a unit but never rescaled.
FIXED_UNITS = {"_per_s": "/s", "_rps": "requests/s", "_cycles": "cycles", "_pct": "%"}

#: Words of column names spelled out for a reader.
WORDS = {"seq": "sequence length", "batch": "batch size", "kv": "KV", "ttft": "TTFT",
         "tpot": "TPOT", "hbm": "HBM", "lpddr": "LPDDR", "tlb": "TLB", "npu": "NPU",
         "dram": "DRAM", "mmu": "MMU", "qkv": "QKV", "fc": "FC", "tp": "TP"}

#: Configuration sections dropped from a key path's label (``workload.seq`` -> seq),
#: longest first.
SECTIONS = ("workload.", "policy.", "simulation.", "serving.", "system.sides.", "system.")


def readable_name(stem: str) -> str:
    """``workload.seq`` -> 'sequence length', ``breakdown.hbm.kv`` -> 'breakdown HBM KV'."""
    for section in SECTIONS:
        if stem.startswith(section):
            stem = stem[len(section):]
            break
    words = stem.replace(".", " ").replace("_", " ").split()
    return " ".join(WORDS.get(w.lower(), w) for w in words)


@dataclass(frozen=True)
class Quantity:
    """A column as a quantity: its readable ``name``, its ``dimension`` (None when it has
    no rescalable unit) and the unit its numbers are ``stored`` in. ``fixed`` is a unit
    shown but never rescaled (e.g. '/s' of a rate)."""
    name: str
    dimension: Dimension | None = None
    stored: Unit | None = None
    fixed: str = ""

    def display_unit(self, values: Iterable[float], choice: str | None,
                     option: str) -> Unit | None:
        """The unit to show: ``choice`` if given (checked), else the best-fitting one."""
        if self.dimension is None or self.stored is None:
            if choice:
                raise ConfigError(option, f"'{self.name}' has no unit to convert to "
                                          f"'{choice}' (units come from the column's suffix: "
                                          f"{', '.join(DIMENSIONS)})")
            return None
        if choice:
            return self.dimension.unit(choice, option)
        return self.dimension.fitting(values, self.stored)

    def scale(self, unit: Unit | None) -> float:
        """Factor turning stored numbers into numbers in ``unit``."""
        return 1.0 if unit is None or self.stored is None else self.stored.size / unit.size

    def label(self, unit: Unit | None) -> str:
        """'iteration time (ms)'; a rate reads 'tokens/s'."""
        if self.fixed == "/s":
            return f"{self.name}/s"
        shown = unit.symbol if unit is not None else self.fixed
        return f"{self.name} ({shown})" if shown else self.name


def quantity_of(column: str) -> Quantity:
    """The quantity a column name describes, from its unit suffix."""
    low = column.lower()
    for suffix, unit in FIXED_UNITS.items():
        if low.endswith(suffix) and len(low) > len(suffix):
            return Quantity(readable_name(column[:-len(suffix)]), fixed=unit)
    for suffix in sorted(DIMENSIONS, key=len, reverse=True):
        if low.endswith(suffix) and len(low) > len(suffix):
            dim, stored = DIMENSIONS[suffix]
            return Quantity(readable_name(column[:-len(suffix)]), dim, stored)
    return Quantity(readable_name(column))

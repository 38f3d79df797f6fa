"""Numbers with the unit that reads best, for the CLI's text output: times (given in
seconds or nanoseconds) in s, ms, us or ns; energies (given in joules) in MJ, kJ, J or
mJ. Four significant digits."""
from __future__ import annotations

import math

from h2m2sim.quantities import TIME

#: (symbol, size in seconds), largest first: the time units of result columns
TIME_UNITS = tuple((u.symbol, u.size) for u in reversed(TIME.units))
#: (symbol, size in joules), largest first: a serving run's totals reach MJ, which the
#: energy columns (pJ to J, :mod:`h2m2sim.quantities`) never do
ENERGY_UNITS = (("MJ", 1e6), ("kJ", 1e3), ("J", 1.0), ("mJ", 1e-3))


def _scaled(v: float | None, units) -> str:
    """``v`` in the largest of ``units`` it is at least 1 of (the smallest otherwise);
    '-' for None, '0' with the base unit for zero."""
    if v is None:
        return "-"
    if not math.isfinite(v):
        return f"{v:g}"
    base = next(sym for sym, size in units if size == 1.0)
    if v == 0:
        return f"0 {base}"
    sym, size = next(((s, z) for s, z in units if abs(v) >= z), units[-1])
    return f"{v / size:.4g} {sym}"


def seconds(v: float | None) -> str:
    """A time given in seconds: '661.4 ms', '4.858 s', '35 us'."""
    return _scaled(v, TIME_UNITS)


def nanoseconds(v: float | None) -> str:
    """A time given in nanoseconds, as :func:`seconds` shows it."""
    return seconds(None if v is None else v * 1e-9)


def joules(v: float | None) -> str:
    """An energy given in joules: '159.2 kJ', '0.8798 J' reads '879.8 mJ'."""
    return _scaled(v, ENERGY_UNITS)


def span_ns(start_ns: float, end_ns: float) -> str:
    """A stretch of time given in ns, both ends in the unit that reads best for the end
    ('0 to 1.108 s' rather than millions of microseconds)."""
    end = abs(end_ns) * 1e-9
    sym, size = next(((s, z) for s, z in TIME_UNITS if end >= z), TIME_UNITS[-1])
    return f"{start_ns * 1e-9 / size:,.4g} to {end_ns * 1e-9 / size:,.4g} {sym}"

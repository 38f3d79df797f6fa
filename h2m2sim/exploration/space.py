"""The search space of an exploration: configuration keys and the values each may take.

Each entry of a spec's ``space`` names a key path of the run configuration (as
``--set`` takes it) and one of the parameter kinds of :data:`PARAMETERS`:

::

    space:
      system.sides[0].capacity_bytes: {low: 32, high: 256, step: 32, unit: GB}
      system.sides[0].channels: {low: 16, high: 128, log: true, unit: channels}
      policy.mapper_params.k: {low: 0.5, high: 2.0}            # a float range
      system.sides[1].dram.preset: {choice: [lpddr5-6400, lpddr5x-8533]}

A range is whole numbers when ``low``, ``high`` (and ``step``) are, and real numbers
otherwise (``type: float`` makes a whole-number range real). ``log: true`` samples it on
a log scale. ``unit`` is a byte unit (``GB``, ``GiB``...) -- the value is then set as
that size, ``"64 GB"`` -- or a label of the key's own unit, shown in tables and plots.
"""
from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dram_models.schema import parse_size, suggest
from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

__all__ = ["Parameter", "IntRange", "FloatRange", "Choice", "PARAMETERS", "parse_parameter",
           "MAX_GRID_LEVELS"]

MAX_GRID_LEVELS = 64     # levels of one range in a grid search
_BOUND = 1e15            # no configuration value is larger; past it is a typo


def _is_size_unit(unit: str | None) -> bool:
    if not unit:
        return False
    try:
        parse_size(f"1 {unit}")
    except ValueError:
        return False
    return True


def _number(value: Any, key: str) -> float:
    """A finite number of a range bound (a bool or text is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number, got {value!r}")
    if not math.isfinite(value) or abs(value) > _BOUND:
        raise ConfigError(key, f"must be a finite number of at most {_BOUND:g}, got {value!r}")
    return value


@dataclass(frozen=True)
class Parameter(abc.ABC):
    """One searched key: ``path`` into the run configuration, and its ``unit``."""
    path: str
    unit: str | None

    kind: ClassVar[str]

    @property
    def label(self) -> str:
        """Column and axis name: the path, with the unit when it has one."""
        return f"{self.path} [{self.unit}]" if self.unit else self.path

    def setting(self, value: Any) -> Any:
        """What the configuration key is set to for the searched ``value``: a size with
        its byte unit (``"64 GB"``), else the value itself."""
        if _is_size_unit(self.unit):
            return f"{value} {self.unit}"
        return value

    @abc.abstractmethod
    def distribution(self) -> Any:
        """The Optuna distribution this parameter is sampled from."""

    @abc.abstractmethod
    def grid(self, levels: int) -> list[Any]:
        """At most ``levels`` values spread over the parameter, ends included (a grid
        search's axis)."""

    @classmethod
    @abc.abstractmethod
    def parse(cls, path: str, spec: Mapping[str, Any]) -> Parameter:
        """The parameter of ``spec`` (the mapping under ``space.<path>``)."""


def _spread(low: float, high: float, levels: int, log: bool) -> list[float]:
    if levels <= 1 or low == high:
        return [low]
    if log:
        a, b = math.log(low), math.log(high)
        return [math.exp(a + (b - a) * i / (levels - 1)) for i in range(levels)]
    return [low + (high - low) * i / (levels - 1) for i in range(levels)]


def _range_bounds(path: str, spec: Mapping[str, Any]) -> tuple[float, float, bool]:
    key = f"space.{path}"
    for k in ("low", "high"):
        if k not in spec:
            raise ConfigError(key, f"a range needs low and high (missing {k})")
    low, high = _number(spec["low"], f"{key}.low"), _number(spec["high"], f"{key}.high")
    if low > high:
        raise ConfigError(key, f"low {low!r} is above high {high!r}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{key}.log", f"must be true or false, got {log!r}")
    if log and low <= 0:
        raise ConfigError(f"{key}.low", f"a log-scale range must start above 0, got {low!r}")
    return low, high, log


@dataclass(frozen=True)
class IntRange(Parameter):
    """Whole numbers from ``low`` to ``high``, by ``step`` (or on a log scale)."""
    low: int
    high: int
    step: int = 1
    log: bool = False

    kind: ClassVar[str] = "int"

    def distribution(self) -> Any:
        from optuna.distributions import IntDistribution
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def grid(self, levels: int) -> list[int]:
        values = _spread(self.low, self.high, levels, self.log)
        snapped = [self.low + self.step * round((v - self.low) / self.step) for v in values]
        return sorted({min(max(v, self.low), self.high) for v in snapped})

    @classmethod
    def parse(cls, path: str, spec: Mapping[str, Any]) -> IntRange:
        low, high, log = _range_bounds(path, spec)
        step = _number(spec.get("step", 1), f"space.{path}.step")
        for k, v in (("low", low), ("high", high), ("step", step)):
            if v != int(v):
                raise ConfigError(f"space.{path}.{k}", f"must be a whole number, got {v!r}")
        if step < 1:
            raise ConfigError(f"space.{path}.step", f"must be >= 1, got {step!r}")
        if log and step != 1:
            raise ConfigError(f"space.{path}", "a log-scale range has no step")
        if (high - low) % step:
            raise ConfigError(f"space.{path}", f"high - low ({high - low:g}) is not a "
                              f"multiple of step ({step:g})")
        return cls(path, spec.get("unit"), int(low), int(high), int(step), log)


@dataclass(frozen=True)
class FloatRange(Parameter):
    """Real numbers from ``low`` to ``high`` (on a log scale with ``log``)."""
    low: float
    high: float
    log: bool = False

    kind: ClassVar[str] = "float"

    def distribution(self) -> Any:
        from optuna.distributions import FloatDistribution
        return FloatDistribution(self.low, self.high, log=self.log)

    def grid(self, levels: int) -> list[float]:
        return _spread(self.low, self.high, levels, self.log)

    @classmethod
    def parse(cls, path: str, spec: Mapping[str, Any]) -> FloatRange:
        if "step" in spec:
            raise ConfigError(f"space.{path}.step", "a real range has no step; drop "
                                                    "type: float for whole numbers")
        low, high, log = _range_bounds(path, spec)
        return cls(path, spec.get("unit"), float(low), float(high), log)


@dataclass(frozen=True)
class Choice(Parameter):
    """One of the listed values (names, numbers, or whole configuration sections)."""
    choices: tuple[Any, ...]

    kind: ClassVar[str] = "choice"

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution
        return CategoricalDistribution(list(range(len(self.choices))))

    def grid(self, levels: int) -> list[Any]:
        return list(range(len(self.choices)))

    def value(self, index: int) -> Any:
        """The choice sampled as ``index`` (Optuna samples positions: choices may be
        mappings, which it cannot store)."""
        return self.choices[index]

    @classmethod
    def parse(cls, path: str, spec: Mapping[str, Any]) -> Choice:
        values = spec["choice"]
        if not isinstance(values, list) or not values:
            raise ConfigError(f"space.{path}.choice", "must be a non-empty list of values")
        if len(values) > 10_000:
            raise ConfigError(f"space.{path}.choice", f"lists {len(values)} values, more "
                                                      "than 10000")
        return cls(path, spec.get("unit"), tuple(values))


#: Parameter kinds by the ``type`` a spec may give.
PARAMETERS: Registry[type[Parameter]] = Registry("parameter type", key="type")
for _cls in (IntRange, FloatRange, Choice):
    PARAMETERS.register(_cls.kind, _cls)

_KEYS = ("low", "high", "step", "log", "unit", "choice", "type")


def parse_parameter(path: Any, spec: Any) -> Parameter:
    """The parameter of ``space.<path>``: a mapping with ``low``/``high`` or ``choice``
    (a bare list is taken as a choice)."""
    if not isinstance(path, str) or not path:
        raise ConfigError("space", f"keys must be key paths such as workload.batch, got "
                                   f"{path!r}")
    key = f"space.{path}"
    if isinstance(spec, list):
        spec = {"choice": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(key, "must be a range {low: L, high: H} or {choice: [...]}, got "
                               f"{spec!r}")
    for k in spec:
        if k not in _KEYS:
            raise ConfigError(f"{key}.{k}", "unknown key" + suggest(str(k), _KEYS)
                              + f"; allowed: {', '.join(_KEYS)}")
    unit = spec.get("unit")
    if unit is not None and (not isinstance(unit, str) or not unit.strip()):
        raise ConfigError(f"{key}.unit", f"must be a unit name such as GB, got {unit!r}")
    return PARAMETERS.get(_kind(key, spec)).parse(path, spec)


def _kind(key: str, spec: Mapping[str, Any]) -> str:
    if "choice" in spec:
        extra = [k for k in ("low", "high", "step", "log") if k in spec]
        if extra:
            raise ConfigError(key, f"a choice has no {extra[0]}")
        return "choice"
    kind = spec.get("type")
    if kind is not None:
        if kind not in ("int", "float"):
            raise ConfigError(f"{key}.type", f"must be int or float, got {kind!r}")
        return kind
    whole = all(isinstance(spec.get(k, 1), int) and not isinstance(spec.get(k, 1), bool)
                for k in ("low", "high", "step"))
    return "int" if whole else "float"

"""The typed config loader every module uses: errors name the key and suggest fixes."""
from __future__ import annotations

import dataclasses
from typing import Literal, Optional

import pytest

from dram_models.schema import (ConfigError, deep_merge, fields_reference, load, param,
                                parse_size, set_path, to_dict)


@dataclasses.dataclass(frozen=True)
class Timing:
    tRCD: int = param(15, doc="ACT to RD", unit="cycles", gt=0)
    tRAS: int = param(34, unit="cycles", gt=0)
    tRP: int = param(15, unit="cycles", gt=0)
    tRC: int = param(49, unit="cycles", gt=0)

    def _check(self):
        if self.tRC < self.tRAS + self.tRP:
            raise ConfigError("tRC", f"must be >= tRAS + tRP = {self.tRAS + self.tRP}, "
                              f"got {self.tRC}")


@dataclasses.dataclass(frozen=True)
class Side:
    name: str = param(doc="side name")
    capacity: int = param(2**30, unit="bytes", gt=0)
    kind: Literal["hbm", "lpddr"] = param("hbm")
    timing: Timing = param(default_factory=Timing)
    ratio: Optional[float] = param(None, ge=0, le=1)


@dataclasses.dataclass(frozen=True)
class System:
    sides: tuple[Side, ...] = param(default_factory=tuple)


def err(cls, data) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(cls, data)
    return info.value


def test_defaults_and_types():
    s = load(Side, {"name": "a", "capacity": "2 MiB", "ratio": 1})
    assert s.capacity == 2**21 and s.ratio == 1.0 and s.timing == Timing()


def test_unknown_key_suggests():
    e = err(Side, {"name": "a", "timing": {"tRDC": 3}})
    assert e.key == "timing.tRDC" and "did you mean 'tRCD'" in e.message


def test_negative_and_cross_field_errors_name_full_path():
    e = err(System, {"sides": [{"name": "a"}, {"name": "b", "timing": {"tRCD": -3}}]})
    assert str(e) == "sides[1].timing.tRCD: must be > 0, got -3"
    e = err(System, {"sides": [{"name": "a", "timing": {"tRC": 10}}]})
    assert e.key == "sides[0].timing.tRC" and "tRAS + tRP" in e.message


@pytest.mark.parametrize("data,key,needle", [
    ({}, "name", "missing required"),
    ({"name": 3}, "name", "must be a string"),
    ({"name": "a", "capacity": True}, "capacity", "integer"),
    ({"name": "a", "capacity": "lots"}, "capacity", "not a size"),
    ({"name": "a", "kind": "hmb"}, "kind", "did you mean 'hbm'"),
    ({"name": "a", "ratio": 2}, "ratio", "<= 1"),
    ({"name": "a", "timing": 5}, "timing", "mapping"),
])
def test_errors(data, key, needle):
    e = err(Side, data)
    assert e.key == key and needle in e.message


def test_round_trip_and_merge():
    s = load(System, {"sides": [{"name": "a"}, {"name": "b"}]})
    d = to_dict(s)
    assert load(System, d) == s
    merged = deep_merge(d, {"sides": {"b": {"capacity": 7}}})
    assert load(System, merged).sides[1].capacity == 7
    assert load(System, set_path(d, "sides[0].timing.tRCD", 20)).sides[0].timing.tRCD == 20
    assert load(System, set_path(d, "sides.b.kind", "lpddr")).sides[1].kind == "lpddr"
    with pytest.raises(ConfigError):
        set_path(d, "sides..x", 1)


def test_parse_size():
    assert parse_size("96GB") == 96 * 10**9 and parse_size("1GiB") == 2**30
    with pytest.raises(ValueError):
        parse_size("1.5")


@pytest.mark.parametrize("text", ["1e999", "1e999 GB", "1e400 B", "9e308 TB"])
def test_parse_size_refuses_what_overflows_a_float(text):
    # a float overflows to inf, which int() cannot hold: a ValueError, not OverflowError
    with pytest.raises(ValueError, match="not a finite number of bytes"):
        parse_size(text)


def test_reference_rows():
    keys = [r["key"] for r in fields_reference(System)]
    assert "sides[].timing.tRCD" in keys

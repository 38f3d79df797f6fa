"""Sweep files: a base configuration plus axes, expanded into validated points.

::

    base: run.yaml            # path (relative to this file) or an inline run config
    grid:                     # Cartesian product, first axis outermost
      system: [lpddr-only, h2m2]
      workload.seq: [512, 1024, 2048]
    zip:                      # varied together (equal lengths), innermost
      model: [gpt3-175b, chinchilla-70b, llama2-70b]
      workload.batch: [32, 64, 128]
    name: seq-scaling         # optional; description: optional free text

Axis keys are key paths into the run configuration (``policy.mapper_params.k``,
``system.sides[1].capacity_bytes``); each value is applied to the base with the same
rules as ``--set``. Every point is validated before anything runs; a bad value is
reported as ``grid.<path>[<i>]: <problem>``.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dram_models.schema import suggest
from h2m2sim.cache import config_hash
from h2m2sim.config import (RunConfig, apply_sets, load_config, normalize_raw, read_yaml,
                            set_key)
from h2m2sim.errors import ConfigError

__all__ = ["Axis", "Point", "Sweep", "read_sweep", "build_sweep", "SWEEP_KEYS",
           "MAX_POINTS"]

SWEEP_KEYS = ("base", "grid", "zip", "name", "description")
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Axis:
    group: str              # "grid" or "zip"
    path: str               # key path into the run config
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    index: int
    params: dict[str, Any]  # axis path -> value, in axis order
    config: RunConfig
    config_hash: str


@dataclass(frozen=True)
class Sweep:
    name: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    points: tuple[Point, ...]
    spec: dict[str, Any] = field(repr=False)  # normalised spec, base inlined
    #: (key, path) of the files the sweep was read from (its file, a base file): no
    #: output of the sweep may replace one of them
    inputs: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @property
    def axis_paths(self) -> list[str]:
        return [a.path for a in self.axes]

    def spec_yaml(self) -> str:
        return yaml.safe_dump(self.spec, sort_keys=False, default_flow_style=False)


def _axes(spec: Mapping[str, Any], group: str, base: dict[str, Any]) -> list[Axis]:
    block = spec.get(group)
    if block is None:
        return []
    if not isinstance(block, Mapping):
        raise ConfigError(group, "must be a mapping of key paths to lists of values, e.g. "
                                 "{workload.seq: [512, 1024]}")
    axes = []
    for path, values in block.items():
        key = f"{group}.{path}"
        if not isinstance(path, str):
            raise ConfigError(key, "axis names must be key paths such as workload.seq")
        try:
            set_key(base, path, None)
        except ConfigError as err:
            where = f"'{err.key}' " if err.key and err.key != path else ""
            raise ConfigError(key, where + err.message) from None
        if not isinstance(values, list):
            raise ConfigError(key, f"must be a list of values, got {values!r}")
        if not values:
            raise ConfigError(key, "must list at least one value")
        axes.append(Axis(group, path, tuple(values)))
    if group == "zip" and axes:
        n0 = len(axes[0].values)
        for ax in axes[1:]:
            if len(ax.values) != n0:
                raise ConfigError(f"zip.{ax.path}", f"has {len(ax.values)} values but "
                                  f"zip.{axes[0].path} has {n0}; zipped axes must have "
                                  "equal lengths")
    return axes


def _overlap(a: str, b: str) -> bool:
    return a == b or b.startswith(a + ".") or b.startswith(a + "[") or \
        a.startswith(b + ".") or a.startswith(b + "[")


def _point_error(err: ConfigError, axes: list[Axis], combo: dict[str, int],
                 params: dict[str, Any], index: int) -> ConfigError:
    """Re-key an error of one point to the axis value that caused it."""
    for ax in axes:
        if err.key == ax.path or err.key.startswith((ax.path + ".", ax.path + "[")):
            rest = err.key[len(ax.path):]
            if err.message.startswith("unknown key") and not rest:
                return ConfigError(f"{ax.group}.{ax.path}", err.message)
            return ConfigError(f"{ax.group}.{ax.path}[{combo[ax.path]}]{rest}", err.message)
        if err.message.startswith(("unknown key", "unknown section")) and \
                ax.path.startswith((err.key + ".", err.key + "[")):
            return ConfigError(f"{ax.group}.{ax.path}", f"'{err.key}' is an {err.message}")
    where = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return ConfigError(err.key, f"{err.message} (sweep point {index}"
                       + (f": {where})" if where else ")"))


def build_sweep(spec: Any, base_dir: str | os.PathLike = ".", name: str = "sweep",
                sets: Iterable[str] = ()) -> Sweep:
    """Validate a parsed sweep spec and expand it into points (every point's config
    validated). ``sets`` (``KEY=VALUE``) apply to the base before the axes."""
    spec = normalize_raw(spec)
    if not isinstance(spec, Mapping):
        raise ConfigError("", "a sweep file must be a mapping with keys "
                              + ", ".join(SWEEP_KEYS))
    for k in spec:
        if k not in SWEEP_KEYS:
            raise ConfigError(str(k), "unknown key" + suggest(str(k), SWEEP_KEYS)
                              + f"; allowed: {', '.join(SWEEP_KEYS)}")
    base = spec.get("base")
    inputs = []
    if isinstance(base, str):
        path = Path(base).expanduser()
        path = path if path.is_absolute() else Path(base_dir) / path
        base = read_yaml(path)
        inputs.append(("base", str(path)))
    if base is None:
        base = {}
    if not isinstance(base, Mapping):
        raise ConfigError("base", "must be a run configuration (mapping) or the path of one")
    base = apply_sets(dict(base), sets)
    for key in ("name", "description"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise ConfigError(key, "must be a string")
    name = spec.get("name") or name

    grid, zipped = _axes(spec, "grid", base), _axes(spec, "zip", base)
    axes = grid + zipped
    for i, a in enumerate(axes):
        for b in axes[:i]:
            if _overlap(a.path, b.path):
                raise ConfigError(f"{a.group}.{a.path}", f"overlaps axis {b.group}.{b.path}; "
                                  "each setting may be swept by one axis only")
    n = 1
    for ax in grid:
        n *= len(ax.values)
    n *= len(zipped[0].values) if zipped else 1
    if n > MAX_POINTS:
        raise ConfigError("grid", f"expands to {n} points, more than {MAX_POINTS}; split "
                                  "the sweep")

    choices = [range(len(ax.values)) for ax in grid]
    choices.append(range(len(zipped[0].values)) if zipped else range(1))
    points = []
    for index, combo_t in enumerate(itertools.product(*choices)):
        combo = {ax.path: j for ax, j in zip(grid, combo_t)}
        combo.update({ax.path: combo_t[-1] for ax in zipped})
        params = {ax.path: ax.values[combo[ax.path]] for ax in axes}
        raw = base
        try:
            for path, value in params.items():
                raw = set_key(raw, path, value)
            cfg = load_config(raw)
        except ConfigError as err:
            raise _point_error(err, axes, combo, params, index) from None
        points.append(Point(index, params, cfg, config_hash(cfg)))

    norm = {"name": name}
    if spec.get("description"):
        norm["description"] = spec["description"]
    norm["base"] = base
    for group, group_axes in (("grid", grid), ("zip", zipped)):
        if group_axes:
            norm[group] = {ax.path: list(ax.values) for ax in group_axes}
    return Sweep(name=name, base=base, axes=tuple(axes), points=tuple(points), spec=norm,
                 inputs=tuple(inputs))


def read_sweep(path: str | os.PathLike, sets: Iterable[str] = ()) -> Sweep:
    """Read and expand a sweep file (a relative ``base`` path is taken from its folder)."""
    path = Path(path)
    sweep = build_sweep(read_yaml(path), base_dir=path.parent, name=path.stem, sets=sets)
    return dataclasses.replace(sweep, inputs=(("sweep", str(path)), *sweep.inputs))

"""Reading, overriding and resolving run configurations.

``raw`` data (what YAML parsing yields) flows: :func:`read_yaml` -> :func:`apply_sets`
(``--set KEY=VALUE``) -> :func:`load_config` -> :class:`RunConfig`. Every user mistake
surfaces as one :class:`ConfigError` naming the full key path.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from dram_models import yamlio
from dram_models.schema import load, set_path, suggest, to_dict
from h2m2sim.cache import plain
from h2m2sim.config import schema
from h2m2sim.config.schema import (
    PolicyConfig,
    RunConfig,
    SimulationConfig,
    WorkloadConfig,
)
from h2m2sim.errors import ConfigError, join_key

__all__ = ["read_yaml", "parse_yaml", "normalize_raw", "apply_sets", "set_key", "load_config",
           "load_file", "resolve_section", "dump_yaml", "MAX_DEPTH"]

MAX_DEPTH = yamlio.MAX_DEPTH


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text strictly (:func:`dram_models.yamlio.parse`: a key given twice,
    alias bombs and over-deep nesting are refused); errors name ``name`` and the line."""
    return normalize_raw(yamlio.parse(text, name), "")


def read_yaml(path: str | os.PathLike) -> Any:
    """Parsed contents of a YAML file (errors name the file; a file that is not a
    regular UTF-8 text file is refused, :func:`dram_models.yamlio.read_text`)."""
    return parse_yaml(yamlio.read_text(path), str(path))


def normalize_raw(data: Any, key: str = "", _depth: int = 0, _path: frozenset = frozenset()
                  ) -> Any:
    """A plain copy of ``data`` (mappings, lists, str, int, float, bool, None).

    Dates (YAML turns ``2024-01-01`` into one) become ISO strings; recursive YAML aliases,
    binary data, sets and over-deep nesting are rejected with a ConfigError."""
    if _depth > MAX_DEPTH:
        raise ConfigError(key, f"nested more than {MAX_DEPTH} levels deep")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, (datetime.date, datetime.datetime)):
        return data.isoformat()
    if isinstance(data, (Mapping, list, tuple)):
        if id(data) in _path:
            raise ConfigError(key, "refers to itself (recursive YAML alias)")
        inner = _path | {id(data)}
        if isinstance(data, Mapping):
            out = {}
            for k, v in data.items():
                if k is None or not isinstance(k, (str, int, float, bool)):
                    raise ConfigError(key, f"has a key that is not a name: {k!r}")
                if isinstance(k, str) and not k.isprintable():  # errors stay one line
                    raise ConfigError(key, f"has a key with a line break or control "
                                           f"character: {k!r}")
                out[k] = normalize_raw(v, join_key(key, str(k)), _depth + 1, inner)
            return out
        return [normalize_raw(v, f"{key}[{i}]", _depth + 1, inner) for i, v in enumerate(data)]
    if isinstance(data, (bytes, bytearray)):
        raise ConfigError(key, "binary data is not a valid value")
    raise ConfigError(key, f"unsupported value of type {type(data).__name__}")


def apply_sets(raw: Any, sets: Iterable[str] = ()) -> Any:
    """Apply ``KEY=VALUE`` overrides (VALUE parsed as YAML) to raw config data."""
    for item in sets:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not key.isprintable():
            raise ConfigError("--set", f"key {key!r} has a line break or control character")
        if not sep or not key:
            raise ConfigError("--set", f"expected KEY=VALUE (e.g. workload.batch=64), "
                                       f"got {item!r}")
        value = parse_yaml(text, f"--set {key}")
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(key, "cannot set: the configuration is not a mapping")
        raw = set_key(dict(raw), key, value)
    return raw


#: Section -> the key under which a mapping names the preset (or zoo model) it overrides.
_OVERRIDE_KEY = {"system": "preset", "policy.baseline": "preset", "model": "base"}


def set_key(raw: dict, path: str, value: Any) -> dict:
    """``raw`` with key path ``path`` set to ``value`` (``--set`` and sweep axes). Inside
    ``system`` or ``policy.baseline`` a preset name is first written as ``{preset: NAME}``
    and a zoo model name as ``{base: NAME}`` (so ``system.sides.hbm.channels`` overrides
    a side of the preset, ``model.layers`` a field of the zoo model), and a path that
    indexes one of the preset's lists (``system.sides[1].capacity_bytes``) first expands
    the preset into its fields (:data:`schema.EXPANDERS`)."""
    try:
        return set_path(raw, path, value)
    except ConfigError:
        section = next((s for s in _OVERRIDE_KEY
                        if path.startswith((s + "[", s + "."))), None)
        sub = None if section is None else _get(raw, section)
        if sub is None:
            raise
        if isinstance(sub, str) and "[" not in path:
            wrapped = {_OVERRIDE_KEY[section]: sub}
            return set_path(set_path(raw, section, wrapped), path, value)
        if section == "model" or "[" not in path:
            raise
        expanded = schema.EXPANDERS["system"](sub, section)
        return set_path(set_path(raw, section, expanded), path, value)


def _get(raw: Mapping, dotted: str) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def resolve_section(section: str, raw: Any, key: str) -> Any:
    """Resolve ``raw`` (checked first for its shape) with ``RESOLVERS[section]``."""
    if section == "serving":
        if not isinstance(raw, Mapping):
            raise ConfigError(key, f"must be a mapping (trace, rate, ...), got {_what(raw)}")
    elif not isinstance(raw, (str, Mapping)):
        what = "preset name" if section == "system" else "model-zoo name"
        raise ConfigError(key, f"must be a {what} or a mapping, got {_what(raw)}")
    return schema.RESOLVERS[section](raw, key)


def _what(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, list):
        return "a list"
    return f"{value!r} ({type(value).__name__})"


def _check_registry(policy: PolicyConfig, field: str) -> PolicyConfig:
    registry = schema.REGISTRIES[field]
    name = getattr(policy, field)
    key = f"policy.{field}"
    if name not in registry:
        names = sorted(map(str, registry))
        raise ConfigError(key, f"unknown {field} {name!r}" + suggest(name, names)
                          + f"; available: {', '.join(names)}")
    params_cls = getattr(registry[name], "Params", None)
    if params_cls is not None and dataclasses.is_dataclass(params_cls):
        pkey = f"{field}_params"
        params = load(params_cls, getattr(policy, pkey), f"policy.{pkey}")
        policy = dataclasses.replace(policy, **{pkey: to_dict(params)})
    return policy


def load_config(raw: Any, key: str = "") -> RunConfig:
    """Validate raw config data and resolve every section into a :class:`RunConfig`."""
    raw = normalize_raw(raw, key)
    if raw is None:
        raise ConfigError(key, "empty configuration; 'system' and 'model' are required")
    if not isinstance(raw, Mapping):
        raise ConfigError(key, f"must be a mapping of sections ({', '.join(schema.SECTIONS)})"
                               f", got {_what(raw)}")
    for k in raw:
        if k not in schema.SECTIONS:
            raise ConfigError(join_key(key, str(k)), "unknown section"
                              + suggest(str(k), schema.SECTIONS)
                              + f"; allowed: {', '.join(schema.SECTIONS)}")
    for k in schema.REQUIRED_SECTIONS:
        if k not in raw:
            raise ConfigError(join_key(key, k), "missing required section")
    system = resolve_section("system", raw["system"], join_key(key, "system"))
    model = resolve_section("model", raw["model"], join_key(key, "model"))
    workload = load(WorkloadConfig, raw.get("workload"), join_key(key, "workload"))
    policy = load(PolicyConfig, raw.get("policy"), join_key(key, "policy"))
    for field in ("mapper", "allocator"):
        policy = _check_registry(policy, field)
    if workload.serving is not None:
        skey = join_key(key, "workload.serving")
        serving = workload.serving
        if isinstance(serving, Mapping):
            serving = schema.DEFAULTERS["serving"](
                serving, system, schema.REGISTRIES["allocator"].get(policy.allocator),
                model, skey)
        workload = dataclasses.replace(workload, serving=resolve_section(
            "serving", serving, skey))
    if policy.baseline is not None:
        policy = dataclasses.replace(policy, baseline=resolve_section(
            "system", policy.baseline, join_key(key, "policy.baseline")))
    simulation = load(SimulationConfig, raw.get("simulation"), join_key(key, "simulation"))
    cfg = RunConfig(system=system, model=model, workload=workload, policy=policy,
                    simulation=simulation)
    try:
        schema.CHECKS[schema.job_kind(cfg)](cfg)
    except ConfigError as err:
        raise err.prefixed(key) from None
    return cfg


def load_file(path: str | os.PathLike, sets: Iterable[str] = ()) -> RunConfig:
    """Read, override and resolve a configuration file (whole-file problems name it)."""
    try:
        return load_config(apply_sets(read_yaml(path), sets))
    except ConfigError as err:
        if err.key:
            raise
        raise ConfigError(str(path), err.message) from None


def dump_yaml(cfg: RunConfig) -> str:
    """The resolved configuration as YAML (loadable again: every section is inline)."""
    return yaml.safe_dump(plain(cfg), sort_keys=False, default_flow_style=False,
                          allow_unicode=True)

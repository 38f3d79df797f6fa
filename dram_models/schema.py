"""Typed loading of YAML/dict data into frozen dataclasses, with one-line errors.

Every configurable object in the project (DRAM standards, NPU chips, systems, models,
run configurations) is a frozen dataclass whose fields are declared with :func:`param`.
:func:`load` turns plain data (as parsed from YAML) into such a dataclass and checks

* unknown keys (with a "did you mean" suggestion and the list of allowed keys),
* missing required keys,
* types (int, float, bool, str, Literal, Optional, tuple/list, dict, nested dataclasses),
* ranges and choices declared in the field metadata (``gt``, ``ge``, ``lt``, ``le``,
  ``choices``),
* numbers that mean something: every number is finite (no NaN or infinity) and lies
  within +-2**53 (:data:`MAX_INT`: beyond it floats no longer hold every integer, and
  sizes and counts that large overflow the simulator's 64-bit arithmetic; fields that
  size allocations declare tighter ``le`` bounds), and
* cross-field rules in an optional ``_check(self)`` method, which raises
  :class:`ConfigError` with a key relative to the object.

Every error is a :class:`~dram_models.errors.ConfigError` naming the full key path.
Integer fields whose unit is bytes also accept sizes such as ``"96 GB"`` or ``"2MiB"``.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

from .errors import ConfigError, join_key

__all__ = [
    "param", "load", "to_dict", "deep_merge", "set_path", "key_paths", "parse_size",
    "MAX_INT",
    "suggest", "fields_reference", "ConfigError",
]


def param(default: Any = dataclasses.MISSING, *, doc: str = "", unit: str | None = None,
          source: str | None = None, gt: float | None = None, ge: float | None = None,
          lt: float | None = None, le: float | None = None,
          choices: Sequence[Any] | None = None,
          default_factory: Any = dataclasses.MISSING) -> Any:
    """Declare a configuration field: its default, documentation, unit, source and
    allowed range. Without a default (and default_factory) the key is required."""
    meta = {"doc": doc, "unit": unit, "source": source, "gt": gt, "ge": ge, "lt": lt,
            "le": le, "choices": tuple(choices) if choices is not None else None}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def suggest(word: str, options: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest option, or an empty string.
    Case slips and transposed letters (``tRDC`` for ``tRCD``) win over other near
    matches, because they are the commonest typos."""
    word, opts = str(word), [str(o) for o in options]
    for same in (lambda o: o.lower() == word.lower(),
                 lambda o: sorted(o.lower()) == sorted(word.lower())):
        hits = [o for o in opts if same(o)]
        if hits:
            return f" (did you mean '{hits[0]}'?)"
    best = difflib.get_close_matches(word, opts, n=1, cutoff=0.6)
    return f" (did you mean '{best[0]}'?)" if best else ""


def _allowed(options: Sequence[Any], limit: int = 40) -> str:
    opts = [str(o) for o in options]
    if len(opts) > limit:
        return ", ".join(opts[:limit]) + f", ... ({len(opts)} in all)"
    return ", ".join(opts)


#: Largest magnitude of any numeric setting: 2**53, the last integer that floats (YAML's
#: ``1e9`` spelling, NumPy float arithmetic) still represent exactly.
MAX_INT = 2**53

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtTpP]?i?[bB]?)\s*$")
_SIZE_MULT = {"": 1, "b": 1,
              "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
              "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30,
              "ti": 2**40, "tib": 2**40, "pi": 2**50, "pib": 2**50}


def positive_int(text: str) -> int:
    """An integer >= 1 (an argparse type: bench and replay ``--repeat``, h2m2sim's ``sweep
    --workers``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def parse_size(text: str) -> int:
    """Parse a byte size: ``"96GB"`` = 96e9, ``"2 MiB"`` = 2**21, ``"4096"`` = 4096.
    Decimal prefixes are powers of 10 (GB = 1e9 B), binary prefixes powers of 2."""
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _SIZE_MULT:
        raise ValueError(f"not a size: {text!r} (examples: 4096, '2 MiB', '96 GB')")
    value = float(m.group(1)) * _SIZE_MULT[m.group(2).lower()]
    if not math.isfinite(value):    # 1e999 parses as inf, which no int can hold
        raise ValueError(f"size {text!r} is not a finite number of bytes")
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "integer"
    if tp is float:
        return "number"
    if tp is bool:
        return "true/false"
    if tp is str:
        return "string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "list"
    if origin is dict or tp is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"{value!r} ({type(value).__name__})"


def _convert(tp: Any, value: Any, key: str, meta: Mapping[str, Any]) -> Any:
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(key, "must not be empty (null)")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, key, meta)
            except ConfigError as err:
                errors.append((arg, err))
        # the arm the value is shaped for explains best (an int too large for int)
        fits = [err for arg, err in errors if _shaped_for(arg, value)]
        if len(errors) == 1 or len(fits) == 1:
            raise (fits or [errors[0][1]])[0]
        names = " or ".join(_type_name(a) for a in args if a is not type(None))
        raise ConfigError(key, f"must be {names}, got {_describe(value)}")
    if value is None:
        raise ConfigError(key, f"must be {_type_name(tp)}, got null")
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        raise ConfigError(key, f"must be one of {_allowed(args)}; got {value!r}"
                          + suggest(str(value), [str(a) for a in args]))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"must be true or false, got {_describe(value)}")
    if tp is int:
        return _integer(value, key, meta)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number, got {_describe(value)}"
                              + _yaml_number_hint(value))
        if not math.isfinite(value):
            raise ConfigError(key, f"must be a finite number, got {value}")
        if abs(value) > MAX_INT:
            raise ConfigError(key, f"must be a number within +-2**53, got {value:.3g}")
        return float(value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, f"must be a string, got {_describe(value)}")
    if origin in (tuple, list) or tp in (tuple, list):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            raise ConfigError(key, f"must be a list, got {_describe(value)}")
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise ConfigError(key, f"must be a list of {len(args)} items, got {len(value)}")
            return tuple(_convert(a, v, f"{key}[{i}]", {}) for i, (a, v) in
                         enumerate(zip(args, value)))
        item_tp = args[0] if args else Any
        return tuple(_convert(item_tp, v, f"{key}[{i}]", {}) for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"must be a mapping, got {_describe(value)}")
        ktp, vtp = args if args else (Any, Any)
        return {_convert(ktp, k, key, {}): _convert(vtp, v, join_key(key, str(k)), {})
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return load(tp, value, key)
    raise TypeError(f"unsupported field type {tp!r} at {key}")  # programming error


def _shaped_for(tp: Any, value: Any) -> bool:
    """Whether ``value`` has the Python shape of type ``tp`` (whatever its content)."""
    origin = typing.get_origin(tp) or tp
    if isinstance(value, bool):
        return tp is bool
    if isinstance(value, (int, float)):
        return tp in (int, float)
    if isinstance(value, str):
        return tp is str or origin is Literal
    if isinstance(value, Mapping):
        return origin is dict or dataclasses.is_dataclass(tp)
    return origin in (tuple, list)


def _yaml_number_hint(value: Any) -> str:
    """YAML 1.1 reads ``1e9`` (no dot, no exponent sign) as text: say how to write it."""
    text = value.strip().lower() if isinstance(value, str) else ""
    mantissa, e, exponent = text.partition("e")
    try:
        float(text)
    except ValueError:
        return ""
    if not e:
        return ""
    mantissa += "" if "." in mantissa else ".0"
    exponent = exponent if exponent[:1] in "+-" else "+" + exponent
    return f" (YAML reads {value} as text; write {mantissa}e{exponent})"


def _integer(value: Any, key: str, meta: Mapping[str, Any]) -> int:
    """An integer setting: an int, a float with no fraction, or (bytes) a size string;
    within +-:data:`MAX_INT`."""
    if isinstance(value, bool):
        raise ConfigError(key, f"must be an integer, got {_describe(value)}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and meta.get("unit") == "bytes":
        try:
            value = parse_size(value)
        except ValueError as err:
            raise ConfigError(key, str(err)) from None
    if not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {_describe(value)}"
                          + _yaml_number_hint(value))
    if abs(value) > MAX_INT:
        raise ConfigError(key, f"must be an integer within +-2**53, got {value:.3g}")
    return int(value)


def _check_range(value: Any, key: str, meta: Mapping[str, Any]) -> None:
    if value is None:
        return
    items = value if isinstance(value, tuple) else (value,)
    for v in items:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if meta.get("gt") is not None and not v > meta["gt"]:
            raise ConfigError(key, f"must be > {meta['gt']}, got {v}")
        if meta.get("ge") is not None and not v >= meta["ge"]:
            raise ConfigError(key, f"must be >= {meta['ge']}, got {v}")
        if meta.get("lt") is not None and not v < meta["lt"]:
            raise ConfigError(key, f"must be < {meta['lt']}, got {v}")
        if meta.get("le") is not None and not v <= meta["le"]:
            raise ConfigError(key, f"must be <= {meta['le']}, got {v}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(key, f"must be one of {_allowed(choices)}; got {value!r}"
                          + suggest(str(value), [str(c) for c in choices]))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


T = typing.TypeVar("T")


def load(cls: type[T], data: Any, key: str = "") -> T:
    """Build dataclass ``cls`` from ``data`` (a mapping), validating everything.

    Raises :class:`ConfigError` naming the full key path (``key`` is the path of
    ``data`` itself) on the first problem found.
    """
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(key, f"must be a mapping, got {_describe(data)}")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    for k in data:
        if k not in names:
            raise ConfigError(join_key(key, str(k)), "unknown key" + suggest(str(k), names)
                              + f"; allowed: {_allowed(names)}")
    hints = _hints(cls)
    kwargs = {}
    for f in fields:
        fkey = join_key(key, f.name)
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(fkey, "missing required key")
            continue
        value = _convert(hints[f.name], data[f.name], fkey, f.metadata)
        _check_range(value, fkey, f.metadata)
        kwargs[f.name] = value
    try:
        obj = cls(**kwargs)
    except ConfigError as err:
        raise err.prefixed(key) from None
    check = getattr(obj, "_check", None)
    if check is not None:
        try:
            check()
        except ConfigError as err:
            raise err.prefixed(key) from None
    return obj


def to_dict(obj: Any) -> Any:
    """Plain data (dicts, lists, scalars) for a dataclass tree; suitable for YAML/JSON
    and for hashing a resolved configuration."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.init}
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def _named_list(items: Any) -> bool:
    return (isinstance(items, list) and bool(items)
            and all(isinstance(i, Mapping) and "name" in i for i in items))


def deep_merge(base: Any, override: Any) -> Any:
    """Recursively merge ``override`` into ``base`` (neither is modified).

    Mappings merge key by key. A list of named mappings (each with a ``name``) in
    ``base`` can be overridden item by item with a mapping keyed by name, or with a
    list of named mappings; any other list or scalar replaces the base value.
    """
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for k, v in override.items():
            out[k] = deep_merge(base[k], v) if k in base else v
        return out
    if _named_list(base) and (isinstance(override, Mapping) or _named_list(override)):
        items = override.items() if isinstance(override, Mapping) else \
            [(o["name"], o) for o in override]
        out = [dict(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(out)}
        for name, v in items:
            if name in index:
                out[index[name]] = deep_merge(out[index[name]], v)
            elif isinstance(v, Mapping):
                out.append(dict(v, name=name))
            else:
                raise ConfigError(str(name), "no such entry to override; entries: "
                                  + _allowed(list(index)))
        return out
    return override


_PATH_RE = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_FULL_PATH_RE = re.compile(r"^[^.\[\]\s]+(\[\d+\])*(\.[^.\[\]\s]+(\[\d+\])*)*$")


def key_paths(data: Any, prefix: str = ""):
    """(path, value) of every scalar leaf of nested ``data``, paths in the syntax
    :func:`set_path` takes (``a.b[1].c``)."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from key_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from key_paths(v, f"{prefix}[{i}]")
    else:
        yield prefix, data


def set_path(data: dict, path: str, value: Any) -> dict:
    """Return a copy of nested ``data`` with ``path`` (``a.b[1].c``) set to ``value``.
    Intermediate mappings are created as needed; list indices must exist."""
    if not _FULL_PATH_RE.match(path):
        raise ConfigError(path, "not a valid key path (example: workload.batch or "
                          "system.sides[1].capacity_bytes)")
    parts = [(m.group(1), m.group(2)) for m in _PATH_RE.finditer(path)]

    def rec(node: Any, i: int, so_far: str) -> Any:
        name, idx = parts[i]
        last = i == len(parts) - 1
        if idx is not None:
            j = int(idx)
            if not isinstance(node, list) or j >= len(node):
                raise ConfigError(so_far, f"has no item [{j}]")
            out = list(node)
            out[j] = value if last else rec(out[j], i + 1, f"{so_far}[{j}]")
            return out
        here = join_key(so_far, name)
        if isinstance(node, list) and _named_list(node):
            out = [dict(x) for x in node]
            for n, item in enumerate(out):
                if item["name"] == name:
                    out[n] = value if last else rec(item, i + 1, here)
                    return out
            raise ConfigError(here, "no such entry" + suggest(name, [x["name"] for x in out]))
        if node is None:
            node = {}
        if not isinstance(node, Mapping):
            raise ConfigError(so_far, "is not a mapping, cannot set a key inside it")
        out = dict(node)
        out[name] = value if last else rec(out.get(name), i + 1, here)
        return out

    return rec(data, 0, "")


def fields_reference(cls: type, prefix: str = "", _seen: set | None = None) -> list[dict]:
    """Rows (key, type, default, unit, doc, source) describing every field of ``cls``
    and of nested dataclasses, for generated documentation."""
    rows: list[dict] = []
    seen = set() if _seen is None else _seen
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        key = join_key(prefix, f.name)
        if f.default is not dataclasses.MISSING:
            default = repr(f.default) if not isinstance(f.default, str) else f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = "(see below)"
        else:
            default = "required"
        inner = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        limits = []
        for k, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if f.metadata.get(k) is not None:
                limits.append(f"{sym} {f.metadata[k]}")
        if f.metadata.get("choices"):
            limits.append("one of " + ", ".join(map(str, f.metadata["choices"])))
        rows.append({"key": key, "type": _type_name(tp), "default": default,
                     "unit": f.metadata.get("unit") or "", "doc": f.metadata.get("doc", ""),
                     "limits": "; ".join(limits), "source": f.metadata.get("source") or ""})
        for sub in inner:
            if sub not in seen:
                seen.add(sub)
                origin = typing.get_origin(tp)
                sub_key = key + "[]" if origin in (tuple, list) else key
                rows.extend(fields_reference(sub, sub_key, seen))
                seen.discard(sub)
    return rows

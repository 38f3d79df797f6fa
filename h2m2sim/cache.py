"""Content-hash cache for expensive, deterministic sub-results.

Cycle-level kernel tables and iteration-time tables take seconds to minutes to compute
and depend only on their inputs and on the simulator's code. :func:`cached` stores them
on disk under a hash of a canonical JSON rendering of the inputs (``key_obj``) plus a
code-version *salt*, so a second run, another sweep point or another sweep reuses them.

Layout::

    <cache_dir>/<namespace>/<h[:2]>/<h>.<fmt>      h = sha256 hex of salt + key

``cache_dir`` is, in order: the argument, the environment variable ``H2M2SIM_CACHE``,
``~/.cache/h2m2sim``. Files are written to a temporary name in the same directory and
renamed into place (``os.replace``), so readers never see a partial file and several
processes may compute and write the same entry at once (the last rename wins; the
contents are identical because the computation is deterministic). A file that cannot be
read (truncated by a full disk, for example) counts as a miss and is rewritten.

Formats: ``json`` (any JSON-able value; tuples come back as lists) and ``npz`` (a
mapping of names to NumPy arrays, returned as a ``dict``).

:func:`memoized` keeps mappings of arrays computed in this process by the same hash,
disk cache or not: the points of a sweep or the tests of a session that need the same
tables compute them once.

The default salt is :func:`code_salt`: the package version plus a digest of every
``.py`` file of ``h2m2sim`` and ``dram_models``, so any code change invalidates old
entries (safe, occasionally wasteful). A layer whose tables depend on a few modules
only can pass ``salt=code_digest("dram_models", "h2m2sim.npu")`` instead.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from h2m2sim.version import __version__
from h2m2sim.store import atomic_write_bytes

__all__ = ["cached", "cache_path", "canonical", "canonical_json", "hash_key", "config_hash",
           "default_cache_dir", "code_salt", "code_digest", "plain", "options_from", "FORMATS"]

FORMATS = ("json", "npz")
T = TypeVar("T")


def default_cache_dir() -> Path:
    """``$H2M2SIM_CACHE`` if set, else ``~/.cache/h2m2sim``."""
    env = os.environ.get("H2M2SIM_CACHE")
    return Path(env).expanduser() if env else Path("~/.cache/h2m2sim").expanduser()


def plain(obj: Any) -> Any:
    """Plain JSON/YAML data for ``obj``: dataclasses become dicts (init fields only),
    tuples lists, NumPy scalars Python numbers, NumPy arrays nested lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def canonical(obj: Any) -> Any:
    """Like :func:`plain`, but arrays are reduced to (dtype, shape, sha256 of bytes) so
    large tables hash quickly, and non-finite floats become strings (JSON has none)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__name__,
                **{f.name: canonical(getattr(obj, f.name))
                   for f in dataclasses.fields(obj) if f.init}}
    if isinstance(obj, Mapping):
        return {str(k): canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        return {"__ndarray__": str(arr.dtype), "shape": list(arr.shape),
                "sha256": hashlib.sha256(arr.tobytes()).hexdigest()}
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot hash a {type(obj).__name__} as a cache key")


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text for ``obj`` (sorted keys, no whitespace)."""
    return json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)


def hash_key(obj: Any, salt: str = "") -> str:
    """sha256 hex digest of ``salt`` and the canonical JSON of ``obj``."""
    h = hashlib.sha256(salt.encode())
    h.update(b"\0")
    h.update(canonical_json(obj).encode())
    return h.hexdigest()


# Simulation options that change where or how fast a run happens, never its result.
_NOT_HASHED = {"simulation": ("cache_dir", "workers", "cache")}


def config_hash(cfg: Any) -> str:
    """Content hash (sha256 hex) of a resolved run configuration: equal for two configs
    that must give identical results. Options that do not affect results
    (``simulation.cache_dir``, ``simulation.workers``, ``simulation.cache``) are left
    out, so moving the cache or changing the worker count reuses finished points."""
    data = plain(cfg)
    if isinstance(data, dict):
        for section, names in _NOT_HASHED.items():
            if isinstance(data.get(section), dict):
                data[section] = {k: v for k, v in data[section].items() if k not in names}
    return hash_key(data)


_DIGESTS: dict[tuple[str, ...], str] = {}


def code_digest(*packages: str) -> str:
    """sha256 (first 16 hex digits) over the source files of the named packages or
    modules (``"dram_models"``, ``"h2m2sim.npu"``), computed once per process."""
    if packages not in _DIGESTS:
        h = hashlib.sha256()
        for name in packages:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                h.update(f"missing:{name}".encode())
                continue
            origin = Path(spec.origin)
            files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" \
                else [origin]
            for path in files:
                h.update(str(path.relative_to(origin.parent)).encode() + b"\0")
                try:
                    h.update(path.read_bytes())
                except OSError:  # removed while we were listing (an editor's temp file)
                    h.update(b"\0missing")
        _DIGESTS[packages] = h.hexdigest()[:16]
    return _DIGESTS[packages]


def code_salt() -> str:
    """Default salt: h2m2sim version and a digest of the h2m2sim and dram_models code."""
    return f"{__version__}+{code_digest('h2m2sim', 'dram_models')}"


def options_from(cfg: Any) -> dict[str, Any]:
    """``cache_dir`` and ``enabled`` for :func:`cached` from a run configuration's
    ``simulation`` section: ``cached(ns, key, fn, **options_from(cfg))``."""
    sim = getattr(cfg, "simulation", None)
    return {"cache_dir": getattr(sim, "cache_dir", None),
            "enabled": bool(getattr(sim, "cache", True))}


def cache_path(namespace: str, key_obj: Any, fmt: str = "json",
               cache_dir: str | os.PathLike | None = None, salt: str | None = None) -> Path:
    """Where :func:`cached` keeps the entry for these arguments."""
    if fmt not in FORMATS:
        raise ValueError(f"cache format must be one of {FORMATS}, got {fmt!r}")
    if not namespace or "/" in namespace or namespace.startswith("."):
        raise ValueError(f"bad cache namespace {namespace!r}")
    h = hash_key(key_obj, code_salt() if salt is None else salt)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / namespace / h[:2] / f"{h}.{fmt}"


#: mappings of arrays computed in this process (:func:`memoized`), most recent last
_MEMO: "OrderedDict[str, dict[str, np.ndarray]]" = OrderedDict()
_MEMO_LOCK = threading.Lock()
MEMO_ENTRIES = 32


def memoized(namespace: str, key_obj: Any, compute: Callable[[], Mapping[str, Any]], *,
             salt: str | None = None) -> dict[str, np.ndarray]:
    """``compute()`` -- a mapping of names to arrays -- computed once per process for
    the same (``namespace``, ``key_obj``, ``salt``) as :func:`cached` names it; the
    MEMO_ENTRIES most recent are kept. The arrays are made read-only (every caller
    shares them) and each call gets its own dict."""
    h = f"{namespace}/{hash_key(key_obj, code_salt() if salt is None else salt)}"
    with _MEMO_LOCK:
        hit = _MEMO.get(h)
        if hit is not None:
            _MEMO.move_to_end(h)
            return dict(hit)
    value = {str(k): np.array(v) for k, v in compute().items()}
    for v in value.values():
        v.setflags(write=False)
    with _MEMO_LOCK:
        _MEMO[h] = value
        while len(_MEMO) > MEMO_ENTRIES:
            _MEMO.popitem(last=False)
    return dict(value)


def _read(path: Path, fmt: str) -> Any:
    if fmt == "json":
        return json.loads(path.read_text())
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _encode(value: Any, fmt: str) -> bytes:
    if fmt == "json":
        return json.dumps(plain(value), sort_keys=True).encode()
    if not isinstance(value, Mapping):
        raise TypeError("an npz cache entry must be a mapping of names to arrays")
    import io
    buf = io.BytesIO()
    np.savez(buf, **{str(k): np.asarray(v) for k, v in value.items()})
    return buf.getvalue()


def cached(namespace: str, key_obj: Any, compute: Callable[[], T], *,
           cache_dir: str | os.PathLike | None = None, fmt: str = "json",
           salt: str | None = None, enabled: bool = True) -> T:
    """Return ``compute()``, reusing a copy stored on disk for the same
    (``namespace``, ``key_obj``, ``salt``).

    ``key_obj`` must describe *everything* the result depends on (dataclasses, dicts,
    lists, scalars and NumPy arrays are accepted). With ``enabled=False`` the cache is
    neither read nor written. On a hit the stored value is returned, so a ``json``
    entry's tuples come back as lists and an ``npz`` entry is a ``dict`` of arrays —
    callers should normalise the value the same way on a miss (a miss also returns the
    value decoded from what was written, so hit and miss look alike).
    """
    if not enabled:
        return compute()
    path = cache_path(namespace, key_obj, fmt, cache_dir, salt)
    if path.exists():
        try:
            return _read(path, fmt)
        except Exception:  # noqa: BLE001 - any unreadable entry (truncated zip, bad JSON)
            pass  # unreadable (partial copy from another tool, disk full): recompute
    value = compute()
    data = _encode(value, fmt)
    try:
        atomic_write_bytes(path, data)
    except OSError:
        pass  # a read-only or full cache must not fail the run; just do not reuse
    if fmt == "json":
        return json.loads(data)
    import io
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        return {k: loaded[k] for k in loaded.files}

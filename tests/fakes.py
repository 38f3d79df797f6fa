"""Stand-ins for the physics layers, for testing the configuration / sweep / plot
framework on its own and fast.

They follow the real interfaces exactly: resolvers ``fn(raw, key) -> frozen dataclass``
raising ConfigError with the full key path, registries of names, jobs ``fn(cfg) ->
dict``. The numbers are toy roofline arithmetic, not simulation results. :func:`install`
puts them into every table (pass ``monkeypatch.setitem`` in tests).

Two environment variables let tests interrupt a sweep deterministically:
``H2M2SIM_FAKE_FAIL_SEQ=N`` makes the iteration job raise RuntimeError for a point whose
first sequence length is N; ``H2M2SIM_FAKE_SLEEP=S`` makes every job sleep S seconds;
``H2M2SIM_FAKE_THREAD_SLEEP=S`` makes it sleep S seconds on two of the run's threads
(:func:`h2m2sim.parallel.map_ordered`), as simulations that cannot be interrupted do.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional

import numpy as np

from dram_models.schema import deep_merge, load, param, suggest
from h2m2sim import runner
from h2m2sim.cache import config_hash
from h2m2sim.config import schema
from h2m2sim.errors import ConfigError, OutOfMemoryError
from h2m2sim.registry import Registry

__all__ = ["FakeSide", "FakeSystem", "FakeModel", "FakeServing", "SYSTEM_PRESETS",
           "MODEL_ZOO", "MAPPERS", "ALLOCATORS", "resolve_system", "load_model",
           "resolve_serving", "run_iteration", "run_serving", "list_presets",
           "list_models", "list_standards", "install"]


@dataclass(frozen=True, kw_only=True)
class FakeSide:
    name: str = param(doc="side name")
    kind: Literal["hbm", "lpddr"] = param("hbm", doc="memory technology")
    bandwidth_gbps: float = param(gt=0, unit="GB/s", doc="peak bandwidth")
    capacity_bytes: int = param(gt=0, unit="bytes", doc="capacity")
    gpu: Optional[str] = param(None, doc="no GPU: an NPU side")


@dataclass(frozen=True, kw_only=True)
class FakeSystem:
    name: str = param("custom", doc="system name")
    sides: tuple[FakeSide, ...] = param(default_factory=tuple, doc="memory sides")
    link_gbps: float = param(64.0, gt=0, unit="GB/s", doc="chip-to-chip link")

    def _check(self) -> None:
        if not self.sides:
            raise ConfigError("sides", "needs at least one memory side")


@dataclass(frozen=True, kw_only=True)
class FakeModel:
    name: str = param("custom", doc="model name")
    layers: int = param(ge=1, doc="decoder layers")
    hidden: int = param(ge=1, doc="hidden size")
    params: float = param(gt=0, doc="parameter count")
    dtype_bytes: int = param(1, ge=1, le=8, unit="bytes", doc="bytes per element")


@dataclass(frozen=True, kw_only=True)
class FakeServing:
    trace: Optional[str] = param(None, doc="request trace path")
    rate_rps: float = param(1.0, gt=0, unit="requests/s", doc="arrival rate")
    requests: int = param(100, ge=1, doc="requests to serve")


SYSTEM_PRESETS: dict[str, dict[str, Any]] = {
    "h2m2": {"name": "h2m2", "sides": [
        {"name": "hbm", "kind": "hbm", "bandwidth_gbps": 2048.0, "capacity_bytes": 96 * 10**9},
        {"name": "lpddr", "kind": "lpddr", "bandwidth_gbps": 544.0,
         "capacity_bytes": 512 * 10**9}]},
    "lpddr-only": {"name": "lpddr-only", "sides": [
        {"name": "lpddr", "kind": "lpddr", "bandwidth_gbps": 544.0,
         "capacity_bytes": 1024 * 10**9}]},
    "hbm-8": {"name": "hbm-8", "sides": [
        {"name": "hbm", "kind": "hbm", "bandwidth_gbps": 8 * 819.0,
         "capacity_bytes": 768 * 10**9}]},
}

MODEL_ZOO: dict[str, dict[str, Any]] = {
    "gpt3-175b": {"name": "gpt3-175b", "layers": 96, "hidden": 12288, "params": 175e9},
    "chinchilla-70b": {"name": "chinchilla-70b", "layers": 80, "hidden": 8192,
                       "params": 70e9},
    "llama2-70b": {"name": "llama2-70b", "layers": 80, "hidden": 1024, "params": 70e9},
}


class _Greedy:
    pass


class _Oracle:
    @dataclass(frozen=True)
    class Params:
        max_configs: int = param(64, ge=1, doc="configurations to search per sublayer")


MAPPERS: Registry[type] = Registry("mapper", key="policy.mapper")
for _name, _cls in (("greedy", _Greedy), ("oracle", _Oracle), ("flexgen", _Greedy)):
    MAPPERS.register(_name, _cls)
ALLOCATORS: Registry[type] = Registry("allocator", key="policy.allocator")
for _name in ("static", "paged", "odma"):
    ALLOCATORS.register(_name, object)


def _named(kind: str, table: Mapping[str, Any], name: Any, key: str) -> dict[str, Any]:
    if not isinstance(name, str) or name not in table:
        raise ConfigError(key, f"unknown {kind} {name!r}" + suggest(str(name), list(table))
                          + f"; available: {', '.join(table)}")
    return table[name]


def expand_system(raw: Any, key: str) -> Any:
    """The system's fields with its preset merged in."""
    if isinstance(raw, str):
        return _named("preset", SYSTEM_PRESETS, raw, key)
    if isinstance(raw, Mapping) and "preset" in raw:
        base = _named("preset", SYSTEM_PRESETS, raw["preset"], f"{key}.preset")
        rest = {k: v for k, v in raw.items() if k != "preset"}
        try:
            return deep_merge(base, rest)
        except ConfigError as err:
            raise err.prefixed(f"{key}.sides") from None
    return raw


def resolve_system(raw: Any, key: str) -> FakeSystem:
    return load(FakeSystem, expand_system(raw, key), key)


def _no_check(cfg: Any) -> None:
    """The fakes' jobs accept every loaded configuration."""


def load_model(raw: Any, key: str) -> FakeModel:
    if isinstance(raw, str):
        return load(FakeModel, _named("model", MODEL_ZOO, raw, key), key)
    return load(FakeModel, raw, key)


def resolve_serving(raw: Any, key: str) -> FakeServing:
    return load(FakeServing, raw, key)


def _rng(cfg: Any) -> np.random.Generator:
    return np.random.default_rng([cfg.simulation.seed, int(config_hash(cfg)[:12], 16)])


def run_iteration(cfg: Any) -> dict[str, Any]:
    """Toy roofline: weights + KV bytes over the summed side bandwidth, with a small
    seeded jitter so that determinism tests can tell seeds apart. Like the real job it
    reports ``decision_s``, a wall time (here of computing the jitter), which differs
    from run to run."""
    t0 = time.perf_counter()
    delay = float(os.environ.get("H2M2SIM_FAKE_SLEEP", "0") or 0)
    if delay:
        time.sleep(delay)
    delay = float(os.environ.get("H2M2SIM_FAKE_THREAD_SLEEP", "0") or 0)
    if delay:
        from h2m2sim.parallel import map_ordered, use_threads
        with use_threads(2):
            map_ordered(time.sleep, [delay, delay])
    w = cfg.workload
    lens = w.seq if isinstance(w.seq, tuple) else (w.seq,) * w.batch
    fail = os.environ.get("H2M2SIM_FAKE_FAIL_SEQ")
    if fail and int(fail) == lens[0]:
        raise RuntimeError(f"fake job told to fail at seq={fail}")
    m, sys_ = cfg.model, cfg.system
    kv_bytes = 2 * m.layers * m.hidden * m.dtype_bytes * int(sum(lens))
    w_bytes = m.params * m.dtype_bytes
    cap = sum(s.capacity_bytes for s in sys_.sides)
    if kv_bytes + w_bytes > cap:
        raise OutOfMemoryError(sys_.sides[0].name, int(kv_bytes + w_bytes), int(cap), "KV cache")
    bw = sum(s.bandwidth_gbps for s in sys_.sides)  # GB/s == bytes/ns
    jitter = 1.0 + 0.01 * float(_rng(cfg).random())
    per_side = {s.name: {"weights_ns": w_bytes / bw * jitter,
                         "kv_ns": kv_bytes / bw * jitter} for s in sys_.sides}
    t = (w_bytes + kv_bytes) / bw * jitter
    return {"iteration_time_ns": t, "tokens_per_s": w.batch / (t * 1e-9),
            "kv_bytes": kv_bytes, "decision_s": time.perf_counter() - t0,
            "breakdown": per_side}


def run_serving(cfg: Any) -> dict[str, Any]:
    s = cfg.workload.serving
    rng = _rng(cfg)
    gaps = rng.exponential(1.0 / s.rate_rps, size=s.requests)
    total = float(gaps.sum()) * 1e9
    return {"total_time_ns": total, "tokens_per_s": s.requests / (total * 1e-9),
            "ttft_ms": float(np.median(gaps)) * 1e3}


def list_presets() -> list[str]:
    return list(SYSTEM_PRESETS)


def list_models() -> list[str]:
    return list(MODEL_ZOO)


def list_standards() -> list[str]:
    return ["HBM3-6400", "LPDDR5X-8533"]


def install(setitem: Callable[[dict, str, Any], None] | None = None) -> None:
    """Point every interface table at these fakes (``setitem(table, name, value)``;
    default: plain assignment; in tests pass ``monkeypatch.setitem``)."""
    put = setitem or (lambda d, k, v: d.__setitem__(k, v))
    for section, fn in (("system", resolve_system), ("model", load_model),
                        ("serving", resolve_serving)):
        put(schema.RESOLVERS, section, fn)
    put(schema.EXPANDERS, "system", expand_system)
    put(schema.DEFAULTERS, "serving", lambda raw, *rest: raw)
    for kind in ("iteration", "serving"):
        put(schema.CHECKS, kind, _no_check)
        put(schema.FITS, kind, _no_check)
    put(schema.REGISTRIES, "mapper", MAPPERS)
    put(schema.REGISTRIES, "allocator", ALLOCATORS)
    put(runner.JOBS, "iteration", run_iteration)
    put(runner.JOBS, "serving", run_serving)

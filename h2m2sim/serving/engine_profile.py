"""Serving-engine profiles: what a real engine adds to a step beyond its kernels, and the
settings it runs with unless told otherwise (``serving.engine``, ``serve --engine``).

A profile is one YAML file of ``workloads/engines/`` (or a path): the engine's name and
version, its host time per step (scheduling, input preparation, sampling, output
processing), whether that host time overlaps the GPU (asynchronous scheduling), the
CUDA-graph batch sizes decode is padded to, the CPU time of launching one layer outside
a graph, the all-reduce it runs for tensor parallelism, and its defaults (maximum
batch, token budget, chunked prefill, KV memory fraction, prefix caching). Every number
has a source in ``sources``, keyed by the field's dotted name.

How a step is priced with a profile (:mod:`.timing.engine_steps`): the kernels of the
step on the padded batch (decode at a captured size), at least ``layers x
layer_launch_us`` when the step runs outside a full CUDA graph (the CPU launching each
layer's kernels then paces the GPU), plus the host time ``step_us + request_us x
requests + prefill_us x prefilling requests`` -- or the larger of the two when the host
work overlaps the GPU.

Defaults: a configuration that names no engine gets ``vllm`` on a GPU system (a side
with a ``gpu`` section) and ``ideal`` (no host time, today's settings) on the NPU
systems of the papers (:func:`default_engine`). The engine's defaults fill the serving
keys the configuration leaves out (:mod:`.engine_defaults`); chunked prefill stays
off where a feature the run uses is not modelled with it, and prefix caching applies
where the trace has prefix block hashes and the allocator can share KV
(:func:`prefix_caching`).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Optional

from dram_models import yamlio
from dram_models.schema import load, param
from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry
from workloads import ENGINES_DIR

__all__ = ["HostTime", "CudaGraphs", "EngineMemory", "EngineDefaults", "EngineProfile", "ENGINES",
           "load_engine", "default_engine", "engine_name", "prefix_caching",
           "engine_metrics", "IDEAL"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostTime:
    """The engine's CPU time per step (us) and whether it overlaps the GPU."""

    step_us: float = param(0.0, ge=0, le=1e6, unit="us", doc="host time of every step "
                           "(scheduling, launching the step, sampling, output processing)")
    request_us: float = param(0.0, ge=0, le=1e5, unit="us", doc="host time per request "
                              "in the step (its input preparation and output)")
    prefill_us: float = param(0.0, ge=0, le=1e6, unit="us", doc="host time per request "
                              "whose prompt (or a chunk of it) the step prefills")
    layer_launch_us: float = param(0.0, ge=0, le=1e4, unit="us", doc="CPU time to "
                                   "launch one layer's kernels outside a full CUDA graph: "
                                   "such a step lasts at least layers x this")
    overlap: bool = param(False, doc="the host work of the next step runs while the GPU "
                          "runs this one (asynchronous scheduling): a step lasts the larger "
                          "of its kernels and its host time, not their sum")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaGraphs:
    """Decode batch sizes captured as CUDA graphs: a decode step of b requests runs the
    graph of the smallest captured size >= b (padded rows), and a larger one runs
    outside a graph. Sizes are given as ``[first, last, step]`` ranges."""

    decode_ranges: tuple[tuple[int, int, int], ...] = param(
        default_factory=tuple, ge=1, le=1 << 20, doc="captured decode batch sizes as "
        "[first, last, step] ranges (inclusive); empty = no CUDA graphs")

    def _check(self) -> None:
        for r in self.decode_ranges:
            if len(r) != 3 or r[0] > r[1] or not all(1 <= v <= 1 << 20 for v in r):
                raise ConfigError("decode_ranges", f"each range is [first, last, step] "
                                  f"of whole numbers in 1..{1 << 20} with first <= last, "
                                  f"got {list(r)}")

    @functools.cached_property
    def sizes(self) -> tuple[int, ...]:
        """Every captured size, sorted."""
        out = set()
        for first, last, step in self.decode_ranges:
            out.update(range(first, last + 1, step))
        return tuple(sorted(out))

    def padded(self, batch: int) -> int | None:
        """The captured size a decode step of ``batch`` requests runs at (None: outside a
        graph)."""
        for s in self.sizes:
            if s >= batch:
                return s
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineMemory:
    """How the engine sizes its KV cache on each card."""

    rule: Literal["total", "free"] = param(
        "total", doc="total: memory_fraction x the card's memory, less the weights and the "
        "reserve (vLLM, SGLang); free: memory_fraction of what the weights and the reserve "
        "leave (TensorRT-LLM)")
    reserved_bytes_per_card: float = param(0.0, ge=0, le=1e13, unit="bytes",
                                           doc="memory the engine keeps per card besides "
                                           "weights and KV (activations at its token "
                                           "budget, library buffers)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineDefaults:
    """Serving settings the engine runs with unless the configuration sets them."""

    max_batch: int = param(256, ge=1, le=65536, unit="requests",
                           doc="most requests running at once")
    chunked_prefill: bool = param(False, doc="decodes and prefill chunks share steps")
    max_num_batched_tokens: Optional[int] = param(None, ge=1, le=1 << 24, unit="tokens",
                                                  doc="token budget of a chunked step; "
                                                  "null = the simulator's default")
    max_prefill_tokens: int = param(8192, ge=1, le=1 << 24, unit="tokens",
                                    doc="token budget of a whole-prompt prefill step")
    memory_fraction: float = param(0.9, gt=0, le=1, doc="share of each card's memory the "
                                   "engine may use (weights, activations, KV)")
    prefix_caching: bool = param(False, doc="prompt prefixes are cached and shared")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineProfile:
    """One serving engine (module docstring)."""

    name: str = param(doc="engine name, as serving.engine names it")
    version: str = param(doc="the engine release the numbers describe")
    description: str = param("", doc="one line on the engine")
    host: HostTime = param(default_factory=HostTime, doc="host time per step")
    cuda_graphs: CudaGraphs = param(default_factory=CudaGraphs,
                                    doc="captured decode batch sizes")
    allreduce: Literal["library", "engine"] = param(
        "library", doc="tensor-parallel all-reduce: the collective library's (NCCL's "
        "model, the system's collective) or the engine's own kernel where the system has "
        "a measurement of it (collective.engine_kernel)")
    memory: EngineMemory = param(default_factory=EngineMemory,
                                 doc="how the KV cache is sized")
    defaults: EngineDefaults = param(default_factory=EngineDefaults,
                                     doc="settings unless the configuration sets them")
    sources: dict[str, str] = param(default_factory=dict, doc="where each number comes "
                                    "from, by dotted field name")

    @property
    def ideal(self) -> bool:
        """No host time, no CUDA graphs, the library's all-reduce: kernels alone."""
        h = self.host
        return not (h.step_us or h.request_us or h.prefill_us or h.layer_launch_us
                    or self.cuda_graphs.decode_ranges) and self.allreduce == "library"

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def _check(self) -> None:
        for key in ("name", "version"):
            if not getattr(self, key).strip():
                raise ConfigError(key, "must not be empty")
        missing = [k for k in sourced_fields(self) if not self.sources.get(k)]
        if missing:
            raise ConfigError("sources", f"engine {self.name!r} gives no source for "
                              f"{', '.join(missing)}")


def sourced_fields(profile: EngineProfile) -> list[str]:
    """The dotted names of the profile's numbers and settings that need a source: every
    host-time and default field, the CUDA graphs when captured, the all-reduce when the
    engine's own."""
    keys = [f"host.{f.name}" for f in dataclasses.fields(HostTime)
            if getattr(profile.host, f.name) not in (0, 0.0, False)]
    keys += [f"defaults.{f.name}" for f in dataclasses.fields(EngineDefaults)]
    if profile.cuda_graphs.decode_ranges:
        keys.append("cuda_graphs")
    if profile.allreduce == "engine":
        keys.append("allreduce")
    if profile.memory != EngineMemory():
        keys.append("memory")
    return keys


#: The shipped profiles by name (``workloads/engines/<name>.yaml``).
ENGINES: Registry[Path] = Registry("serving engine", key="serving.engine",
                                   hint="or an engine profile .yaml file")
for _path in sorted(ENGINES_DIR.glob("*.yaml")):
    ENGINES.register(_path.stem, _path)


@functools.lru_cache(maxsize=64)
def _load_file(path: str, mtime: float, key: str) -> EngineProfile:
    try:
        data = yamlio.load_file(Path(path), "engine profile")
    except ConfigError as err:    # its key is the file (and line): name the setting too
        raise ConfigError(key, str(err)) from None
    if not isinstance(data, Mapping):
        raise ConfigError(key, f"engine profile {path} must hold a mapping of fields")
    return load(EngineProfile, data, key)


def load_engine(name: str, key: str = "serving.engine") -> EngineProfile:
    """The profile ``name`` (a shipped name or a YAML file); a ConfigError naming ``key``
    otherwise."""
    if not name:
        raise ConfigError(key, "is empty: name a serving engine or an engine profile "
                               ".yaml file")
    p = Path(name)
    if name not in ENGINES and (p.suffix in (".yaml", ".yml") or p.exists()):
        if not p.is_file():
            raise ConfigError(key, f"{name}: not an engine profile file "
                                   f"({'a directory' if p.is_dir() else 'not a regular file' if p.exists() else 'no such file'})")
        return _load_file(str(p.resolve()), p.stat().st_mtime, key)
    path = ENGINES.get(name, key)
    return _load_file(str(path), path.stat().st_mtime, key)


def default_engine(system) -> str:
    """The engine a configuration that names none runs: ``vllm`` on a GPU system,
    ``ideal`` on the others."""
    return "vllm" if any(s.gpu is not None for s in system.sides) else "ideal"


def engine_name(cfg) -> str:
    """The engine of a serving configuration (``ideal`` when it names none, or there is
    none: the loader names one for every configuration it reads)."""
    return (None if cfg is None else cfg.engine) or IDEAL


IDEAL = "ideal"


def engine_metrics(cfg) -> dict[str, str]:
    """The run's ``engine`` and ``engine_version`` metrics."""
    profile = load_engine(engine_name(cfg))
    return {"engine": profile.name, "engine_version": profile.version}

def prefix_caching(cfg, trace, allocator_spec) -> bool:
    """Whether a run caches prefixes: as the configuration says, else (null) as the
    engine does by default, where the trace has prefix block hashes to find and the
    allocator can share KV."""
    if cfg.prefix_caching is not None:
        return bool(cfg.prefix_caching)
    from h2m2sim.allocators.base import PrefixSharing
    return bool(load_engine(engine_name(cfg)).defaults.prefix_caching
                and trace.has_prefix_hashes
                and allocator_spec.prefix_sharing is not PrefixSharing.NONE)

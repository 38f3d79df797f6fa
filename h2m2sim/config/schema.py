"""The run configuration: one YAML file, five sections, frozen dataclasses.

``system``, ``model`` and ``workload.serving`` are owned by their layers and turned into
dataclasses by the layers' *resolvers* in :data:`RESOLVERS`; ``workload``, ``policy``
and ``simulation`` are declared here. Mapper and allocator names are checked against the
layers' registries in :data:`REGISTRIES`. Tests swap entries of both tables by item
assignment (``monkeypatch.setitem(RESOLVERS, "system", ...)``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from dram_models.schema import param
from h2m2sim.allocators import ALLOCATORS
from h2m2sim.decode.job import check_iteration, check_iteration_fits
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import MAPPERS
from h2m2sim.model import load_model
from h2m2sim.registry import Registry
from h2m2sim.serving.config import resolve_serving
from h2m2sim.serving.engine_defaults import with_engine_defaults
from h2m2sim.serving.job import check_serving, check_serving_fits
from h2m2sim.serving.prefill_job import check_prefill
from h2m2sim.system.config import expand_system, resolve_system

__all__ = ["RESOLVERS", "DEFAULTERS", "REGISTRIES", "CHECKS", "FITS", "EXPANDERS", "SECTIONS",
           "REQUIRED_SECTIONS", "EXAMPLE_YAML", "WorkloadConfig", "PolicyConfig",
           "SimulationConfig", "RunConfig", "job_kind"]

#: Section name -> ``fn(raw_value, key) -> frozen dataclass`` raising ConfigError with the
#: full key path. ``system`` also resolves ``policy.baseline``; ``serving`` resolves
#: ``workload.serving``.
RESOLVERS: dict[str, Callable[[Any, str], Any]] = {
    "system": resolve_system,
    "model": load_model,
    "serving": resolve_serving,
}

#: Section -> ``fn(raw, system, allocator class, model, key) -> raw mapping`` filling
#: what a section leaves out from the rest of the configuration: ``serving`` gets its
#: engine (the system's default when it names none) and that engine's defaults.
DEFAULTERS: dict[str, Callable[..., Any]] = {
    "serving": with_engine_defaults,
}

#: Policy field -> registry of names. A registered object may declare a dataclass
#: ``Params``; the matching ``*_params`` mapping is then validated against it (defaults
#: filled in).
REGISTRIES: dict[str, Registry] = {
    "mapper": MAPPERS,
    "allocator": ALLOCATORS,
}

#: Workload kind (:func:`job_kind`) -> ``fn(cfg)`` checking a whole resolved
#: configuration for what that kind of run would refuse (capacity, options of the job),
#: raising ConfigError; run when a configuration is loaded, so ``validate`` finds it.
CHECKS: dict[str, Callable[[Any], None]] = {
    "iteration": check_iteration,
    "prefill": check_prefill,
    "serving": check_serving,
}

#: Workload kind -> ``fn(cfg)`` raising OutOfMemoryError when the run cannot fit in its
#: system (or baseline). The job runs it before simulating anything and ``validate``
#: runs it too; a sweep records such a point as an out-of-memory result.
FITS: dict[str, Callable[[Any], None]] = {
    "iteration": check_iteration_fits,
    "prefill": check_iteration_fits,      # weights and the prompts' KV
    "serving": check_serving_fits,
}

#: Section -> ``fn(raw, key) -> raw mapping`` with any preset expanded into its fields,
#: so that ``--set`` and sweep axes can address items of a preset's lists by index
#: (``system.sides[1].capacity_bytes``).
EXPANDERS: dict[str, Callable[[Any, str], Any]] = {
    "system": expand_system,
}

SECTIONS = ("system", "model", "workload", "policy", "simulation")

#: The smallest useful configuration (used in the docs and tests).
EXAMPLE_YAML = """\
system:
  preset: h2m2        # or inline sides; any preset field can be overridden here
model: gpt3-175b      # zoo name or an inline mapping
workload:
  batch: 32
  seq: 2048
policy:
  mapper: greedy
"""
REQUIRED_SECTIONS = ("system", "model")


@dataclass(frozen=True)
class WorkloadConfig:
    """What is run: one decode iteration of a batch of requests, or a serving trace."""

    batch: int = param(1, ge=1, le=65536, unit="requests",
                       doc="Requests processed together in one iteration (batch size; the "
                           "iteration job builds kernels per request, hence the bound).")
    seq: Union[int, tuple[int, ...]] = param(
        2048, ge=1, le=1 << 24, unit="tokens",
        doc="Context length of every request, or a list with one length per request "
            "(the list must have `batch` entries). Weights and KV cache must fit in the "
            "system's memory.")
    phase: Literal["decode", "prefill"] = param(
        "decode", doc="Which inference phase one iteration models: decode (one new token "
                      "per request, `seq` tokens of KV each) or prefill (`batch` prompts of "
                      "`seq` tokens, causal attention: the step that gives the first token). "
                      "A serving workload runs both and ignores it.")
    # Optional[Any] values: dram_models.schema rejects null for a bare Any.
    serving: Optional[dict[str, Optional[Any]]] = param(
        None, doc="Request-level serving run instead of one iteration: a mapping "
                  "(request trace path, arrival rate, ...) handed to the serving "
                  "layer's resolver. Null = no serving.")

    def _check(self) -> None:
        if isinstance(self.seq, tuple) and len(self.seq) != self.batch:
            raise ConfigError("seq", f"lists {len(self.seq)} sequence lengths but batch is "
                                     f"{self.batch}; give one length per request")


@dataclass(frozen=True)
class PolicyConfig:
    """How the system is driven: mapping of kernels to memory sides, KV allocation."""

    mapper: str = param("greedy", doc="Mapping algorithm (a name from the mapper registry, "
                                      "e.g. greedy = H2M2 Algorithm 1). A serving run on "
                                      "a system of several NPU sides maps each decode "
                                      "step with it.")
    mapper_params: dict[str, Optional[Any]] = param(
        default_factory=dict, doc="Options of the mapper and of the decode-iteration job "
                                  "(see Mapper options below); unknown keys are errors.")
    allocator: str = param("static", doc="KV-cache allocator (a name from the allocator "
                                         "registry, e.g. static worst-case reservation).")
    allocator_params: dict[str, Optional[Any]] = param(
        default_factory=dict, doc="Parameters of the allocator (allocator-specific).")
    baseline: Union[str, dict[str, Optional[Any]], None] = param(
        None, doc="System to compare against (preset name or system mapping, like "
                  "`system`); when set, runs also report `speedup` over it. "
                  "Null = no comparison.")


#: Most worker processes a sweep may ask for (``simulation.workers``, ``sweep
#: --workers``): more than any one machine runs (each is a Python process holding the
#: DRAM engine), yet far below what would exhaust the process table before a point ran.
MAX_WORKERS = 4096


@dataclass(frozen=True)
class SimulationConfig:
    """How the simulator runs (not what it simulates)."""

    fidelity: Literal["cycle", "sampled", "estimate"] = param(
        "sampled", doc="cycle = every tile of every kernel through the cycle-level NPU and "
        "DRAM engine; sampled = the same models on a steady-state prefix of each core's "
        "tiles, extrapolated (error against cycle in docs/validation/npu.md); estimate = "
        "roofline arithmetic only (no simulation). A GPU system prices its steps with the "
        "GPU kernel model over engine-measured bandwidths at every fidelity.")
    seed: int = param(0, ge=0, doc="Seed of every random choice (arrivals, predictors, "
                                   "noise); same config and seed give identical results.")
    cache: bool = param(True, doc="Reuse cached kernel/iteration tables (content-hash "
                                  "cache); false recomputes and stores nothing.")
    cache_dir: Optional[str] = param(None, doc="Directory of the content-hash cache. Null = "
                                              "$H2M2SIM_CACHE, else ~/.cache/h2m2sim.")
    workers: Optional[int] = param(None, ge=1, le=MAX_WORKERS, unit="processes",
                                   doc="Worker processes for sweeps. Null = one per CPU "
                                       "core. `sweep --workers` overrides it.")
    threads: Optional[int] = param(None, ge=1, unit="threads",
                                   doc="Threads that run the independent simulations of one "
                                       "run at once (the sides, sublayers and kernel groups "
                                       "of a layer; table points). Results do not depend on "
                                       "it. Null = one per CPU core, or 1 inside a sweep's "
                                       "worker processes.")


@dataclass(frozen=True)
class RunConfig:
    """A fully resolved run configuration (what ``h2m2sim validate`` prints)."""

    system: Any = param(doc="The simulated system: a preset name (`h2m2`), a mapping "
                            "`{preset: NAME, <field overrides>}`, or a full inline mapping. "
                            "Resolved by the system layer (see its reference).")
    model: Any = param(doc="The LLM: a model-zoo name (`gpt3-175b`) or an inline mapping. "
                           "Resolved by the model layer (see its reference).")
    workload: WorkloadConfig = param(default_factory=WorkloadConfig,
                                     doc="Batch, sequence lengths, phase, or serving trace.")
    policy: PolicyConfig = param(default_factory=PolicyConfig,
                                 doc="Mapper, allocator and baseline for speedups.")
    simulation: SimulationConfig = param(default_factory=SimulationConfig,
                                         doc="Fidelity, seed, cache, workers, threads.")

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def job_kind(cfg: Any) -> str:
    """The kind of run ``cfg`` asks for: ``"serving"`` if the workload has a serving
    section, else ``"prefill"`` for a prefill step, else ``"iteration"`` (decode)."""
    if cfg.workload.serving is not None:
        return "serving"
    return "prefill" if cfg.workload.phase == "prefill" else "iteration"

"""What is built in, by kind: system presets, models, DRAM standards, chips, mappers,
allocators, predictors, routers, serving schedulers, preemption victims and modes,
example configurations and request traces.

Each kind is a :class:`Kind` subclass registered in :data:`KINDS`; it lists its names,
gives one line per entry (:meth:`Kind.summary`, the same text the configuration reference
prints) and the entry's details (:meth:`Kind.details`: lines of ``label: value``).
Registered objects describe themselves through :meth:`h2m2sim.registry.Registry.description`;
data presets through their ``description`` field. Sizes are decimal (1 GB = 10^9 bytes),
bandwidths GB/s.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import yaml

from dram_models.schema import fields_reference, suggest
from dram_models.spec import list_standards, load_standard
from h2m2sim.allocators import ALLOCATORS
from h2m2sim.decode.job import IterationOptions
from h2m2sim.errors import ConfigError
from h2m2sim.mapping.mappers import MAPPERS
from h2m2sim.model import list_models, load_model
from h2m2sim.predictors import PREDICTORS
from h2m2sim.registry import Registry, first_sentence
from h2m2sim.serving.cluster import ROUTERS
from h2m2sim.serving.scheduler import PREEMPTIONS, SCHEDULERS, VICTIMS
from h2m2sim.serving.traces import load_trace
from h2m2sim.system.chip import CHIP_PRESETS, resolve_chip
from h2m2sim.system.config import SYSTEMS, load_system_preset, preset_data
from workloads import CONFIGS_DIR, TRACES_DIR

__all__ = ["Kind", "KINDS", "Detail"]

Detail = tuple[str, str]


def _gb(n: float) -> str:
    return f"{n / 1e9:g} GB"


class Kind:
    """One kind of built-in entry. Subclasses set ``title`` and implement ``names``,
    ``summary`` and ``_details``."""
    title = ""

    def names(self) -> list[str]:
        raise NotImplementedError

    def summary(self, name: str) -> str:
        """One line on ``name`` (no trailing period)."""
        raise NotImplementedError

    def details(self, name: str) -> list[Detail]:
        """(label, value) lines on ``name``; a ConfigError with the closest names if
        there is no such entry."""
        self.check(name)
        return [("description", self.summary(name))] + self._details(name)

    def check(self, name: str) -> None:
        names = self.names()
        if name not in names:
            raise ConfigError("presets", f"no {self.title[:-1]} {name!r}"
                              + suggest(name, names) + f"; available: {', '.join(names)}")

    def _details(self, name: str) -> list[Detail]:
        return []


class RegistryKind(Kind):
    """Entries of a :class:`Registry`; their parameters come from a ``Params`` dataclass
    (or the constructor's keyword defaults) of the registered class."""
    registry: Registry

    def names(self) -> list[str]:
        return self.registry.names()

    def summary(self, name: str) -> str:
        return self.registry.description(name)

    def _details(self, name: str) -> list[Detail]:
        return params_of(self.registry[name])


def params_of(obj: Any, prefix: str = "") -> list[Detail]:
    """('param NAME', 'default D [unit]: doc') of a class's ``Params`` dataclass, or of
    its constructor's keyword arguments."""
    params = getattr(obj, "Params", None)
    if params is not None and dataclasses.is_dataclass(params):
        return _dataclass_params(params, prefix)
    if not inspect.isclass(obj):
        return []
    out = []
    for p in list(inspect.signature(obj.__init__).parameters.values())[1:]:
        if p.default is not inspect.Parameter.empty:
            out.append((f"param {prefix}{p.name}", f"default {p.default!r}"))
    return out


def _dataclass_params(cls: type, prefix: str = "") -> list[Detail]:
    out = []
    for row in fields_reference(cls, prefix.rstrip(".")):
        unit = f" {row['unit']}" if row["unit"] else ""
        out.append((f"param {row['key']}", f"default {row['default'] or '-'}{unit}: "
                                           f"{row['doc']}"))
    return out


KINDS: Registry[type[Kind]] = Registry("preset kind", key="presets")


@KINDS.register("systems", description="system presets (system: NAME)")
class SystemKind(Kind):
    title = "system presets"

    def names(self) -> list[str]:
        return SYSTEMS.names()

    def summary(self, name: str) -> str:
        return str(preset_data(name).get("description", ""))

    def _details(self, name: str) -> list[Detail]:
        spec = load_system_preset(name)
        out = []
        for side in spec.sides:
            chip = side.chip
            out.append((f"side {side.name}",
                        f"{side.dram_spec.name} x {side.n_channels} channels, "
                        f"{_gb(side.capacity_bytes)}, {side.bandwidth_gbps:g} GB/s, chip "
                        f"{chip.name} ({chip.cores} cores at {chip.freq_ghz:g} GHz, "
                        f"{side.peak_tflops:g} TFLOPS)"))
        link = spec.interconnect
        out += [("interconnect", f"{link.bandwidth_gbps:g} GB/s, {link.latency_ns:g} ns"),
                ("total", f"{_gb(spec.capacity_bytes)}, {spec.bandwidth_gbps:g} GB/s"),
                ("cards", str(spec.cards))]
        return out


@KINDS.register("models", description="model zoo (model: NAME)")
class ModelKind(Kind):
    title = "models"

    def names(self) -> list[str]:
        return list_models()

    def summary(self, name: str) -> str:
        m = load_model(name)
        attn = f"MLA, latent {m.kv_lora_rank}" if m.mla else \
            ("MHA" if m.group_size == 1 else f"GQA, {m.kv_heads} KV heads")
        if m.sliding_window is not None:
            attn += f", window {m.sliding_window}" + \
                (" every other layer" if m.sliding_window_period == 2 else "")
        return (f"{m.total_params / 1e9:.3g} B parameters, {m.layers} layers, d {m.hidden}, "
                f"{m.heads} heads ({attn}), {m.dtype}")

    def _details(self, name: str) -> list[Detail]:
        m = load_model(name)
        out = [(f.name, str(getattr(m, f.name))) for f in dataclasses.fields(m)
               if f.name not in ("name", "source") and getattr(m, f.name) is not None]
        return out + [("parameters", f"{m.total_params:,} ({m.total_params / 1e9:.3g} B)"),
                      ("weights", f"{_gb(m.total_weight_bytes())} in {m.dtype}"),
                      ("KV cache", f"{m.kv_bytes_per_token():,} bytes per token"),
                      ("source", m.source)]


#: DRAM timings worth a first look, in command-clock cycles.
KEY_TIMINGS = ("tCL", "tRCD", "tRP", "tRAS", "tRC", "tFAW", "tRFC", "tREFI")


@KINDS.register("dram", description="DRAM standards (dram: NAME in a system side)")
class DramKind(Kind):
    title = "DRAM standards"

    def names(self) -> list[str]:
        return list_standards()

    def summary(self, name: str) -> str:
        return load_standard(name).description

    def _details(self, name: str) -> list[Detail]:
        d = load_standard(name)
        org = d.organization
        out = [("data rate", f"{d.data_rate_mtps:g} MT/s, tCK {d.tCK_ps:g} ps"),
               ("peak bandwidth", f"{d.peak_gbps:g} GB/s over the preset's {org.channels} "
                                  f"channels, {d.peak_gbps / org.channels:.4g} GB/s each"),
               ("burst", f"{d.burst_bytes} B")]
        for t in KEY_TIMINGS:
            ck = getattr(d.timing, t)
            if ck is not None:
                out.append((t, f"{ck} CK = {ck * d.tck_ns:.4g} ns"))
        return out


@KINDS.register("chips", description="NPU chip presets (chip: NAME in a system side)")
class ChipKind(RegistryKind):
    title = "chip presets"
    registry = CHIP_PRESETS

    def _details(self, name: str) -> list[Detail]:
        chip = resolve_chip(name)
        return [(f.name, str(getattr(chip, f.name))) for f in dataclasses.fields(chip)
                if f.name != "name"]


@KINDS.register("mappers", description="kernel-to-memory mappers (policy.mapper)")
class MapperKind(RegistryKind):
    title = "mappers"
    registry = MAPPERS

    def _details(self, name: str) -> list[Detail]:
        # every mapper reads the same options
        return _dataclass_params(IterationOptions, "policy.mapper_params.")


@KINDS.register("allocators", description="KV-cache allocators (policy.allocator)")
class AllocatorKind(RegistryKind):
    title = "allocators"
    registry = ALLOCATORS

    def _details(self, name: str) -> list[Detail]:
        return params_of(self.registry[name], "policy.allocator_params.")


@KINDS.register("predictors", description="output-length predictors of serving runs")
class PredictorKind(RegistryKind):
    title = "predictors"
    registry = PREDICTORS


@KINDS.register("routers", description="request routers over serving replicas "
                                       "(serving.deployment.router)")
class RouterKind(RegistryKind):
    title = "routers"
    registry = ROUTERS


@KINDS.register("schedulers", description="admission policies of a serving engine "
                                          "(serving.scheduler)")
class SchedulerKind(RegistryKind):
    title = "schedulers"
    registry = SCHEDULERS


@KINDS.register("victims", description="which running request a serving engine preempts "
                                       "(serving.preemption_victim)")
class VictimKind(RegistryKind):
    title = "victims"
    registry = VICTIMS


@KINDS.register("preemptions", description="what preemption does with the victim's KV "
                                           "(serving.preemption)")
class PreemptionKind(RegistryKind):
    title = "preemptions"
    registry = PREEMPTIONS


def _leading_comment(path) -> str:
    """The file's first comment paragraph (indented comment lines, such as example
    commands, end it)."""
    lines = []
    for line in path.read_text().splitlines():
        text = line[1:]
        if not line.startswith("#") or not text.strip() or text.startswith("  "):
            break
        lines.append(text.strip())
    return " ".join(lines)


def _inline(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)


@KINDS.register("engines", description="serving engine profiles (serve --engine NAME)")
class EngineKind(Kind):
    title = "serving engines"

    def names(self) -> list[str]:
        from h2m2sim.serving.engine_profile import ENGINES
        return ENGINES.names()

    def summary(self, name: str) -> str:
        from h2m2sim.serving.engine_profile import load_engine
        p = load_engine(name)
        return f"{p.label}: {p.description}"

    def _details(self, name: str) -> list[Detail]:
        from h2m2sim.serving.engine_profile import load_engine
        p = load_engine(name)
        h, d = p.host, p.defaults
        how = "overlapped with the kernels" if h.overlap else "added to the kernels"
        graphs = p.cuda_graphs.sizes
        return [("host time", f"{h.step_us:g} us per step + {h.request_us:g} us per "
                              f"request + {h.prefill_us:g} us per prefill, {how}"),
                ("layer launch", f"{h.layer_launch_us:g} us outside a full CUDA graph"),
                ("CUDA graphs", f"{len(graphs)} decode sizes up to {graphs[-1]}"
                 if graphs else "none"),
                ("all-reduce", p.allreduce),
                ("KV memory", f"{p.memory.rule} rule, {p.memory.reserved_bytes_per_card:.3g} "
                              "bytes reserved per card"),
                ("defaults", f"max_batch {d.max_batch}, chunked_prefill "
                             f"{str(d.chunked_prefill).lower()}, max_num_batched_tokens "
                             f"{d.max_num_batched_tokens}, memory_fraction "
                             f"{d.memory_fraction:g}, prefix_caching "
                             f"{str(d.prefix_caching).lower()}")]


@KINDS.register("configs", description="example run and sweep configurations "
                                       "(workloads/configs)")
class ConfigKind(Kind):
    title = "example configurations"

    def names(self) -> list[str]:
        return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))

    def summary(self, name: str) -> str:
        return first_sentence(_leading_comment(CONFIGS_DIR / f"{name}.yaml"))

    def _details(self, name: str) -> list[Detail]:
        path = CONFIGS_DIR / f"{name}.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        return [("file", str(path))] + [(k, _inline(v)) for k, v in data.items()]


@KINDS.register("traces", description="bundled request traces (serve --trace NAME)")
class TraceKind(Kind):
    title = "request traces"

    #: the file forms serve --trace reads (CSV, Mooncake-format JSONL; gzip allowed)
    SUFFIXES = (".csv", ".csv.gz", ".jsonl", ".jsonl.gz")

    def names(self) -> list[str]:
        return sorted(p.name.split(".")[0] for p in TRACES_DIR.iterdir()
                      if p.name.endswith(self.SUFFIXES))

    def _path(self, name: str):
        return next(p for p in TRACES_DIR.iterdir() if p.name.split(".")[0] == name)

    def summary(self, name: str) -> str:
        import gzip
        path = self._path(name)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            first = fh.readline().strip()
        if ".jsonl" in path.name:           # Mooncake format: one JSON object per request
            import json
            keys = json.loads(first)
            cols = [c for k, c in (("timestamp", "arrival_s"),
                                   ("hash_ids", "prefix_block_hashes")) if k in keys]
        else:
            cols = first.split(",")
        has = [w for c, w in (("arrival_s", "arrival times"), ("prompt", "prompt text"),
                              ("prefix_block_hashes", "prefix block hashes")) if c in cols]
        return f"{path.name}: request lengths" + (f" with {' and '.join(has)}" if has else "")

    def _details(self, name: str) -> list[Detail]:
        trace = load_trace(self._path(name))
        prompt, out = trace.prompt_tokens, trace.output_tokens
        rows = [("requests", f"{len(prompt):,}"),
                ("prompt tokens", f"mean {prompt.mean():.0f}, max {prompt.max()}"),
                ("output tokens", f"mean {out.mean():.0f}, max {out.max()}")]
        if trace.has_arrivals and len(trace.arrival_s):
            rows.append(("arrivals", f"over {float(trace.arrival_s[-1]):.0f} s"))
        return rows

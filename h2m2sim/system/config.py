"""Hardware description of a whole system: memory sides, interconnect, MMU, sync cost.

A *side* is one memory module with the accelerator chip attached to it (H2M2 Fig. 10:
HBM3 + chip, LPDDR5X + chip). Its DRAM is a dram_models standard (a preset name, or a
mapping ``{preset: NAME, <any field override>}`` including ``controller`` settings, or a
full standard); ``channels`` sets the channel count, ``capacity_bytes`` the usable
memory (at most what the DRAM organization addresses, so physical addresses never
alias). ``chip`` is an :class:`~h2m2sim.system.chip.NpuChipConfig` (preset name or
mapping; defaults = H2M2 Table 2).

The run configuration's ``system`` section is resolved by :func:`resolve_system`
(``RESOLVERS['system']``): a preset name (``h2m2``), a path to a YAML file, a mapping
``{preset: NAME, <overrides>}`` (sides are overridden by name: ``sides: {hbm:
{capacity_bytes: 48 GB}}``) or a full inline mapping. Errors name the full key, e.g.
``system.sides[1].dram.timing.tRCD: must be > 0, got -3``.

Built-in presets (:data:`SYSTEMS`, one YAML file each in ``presets/``):

* ``h2m2`` -- the H2M2 asymmetric system: sides ``hbm`` (HBM3, 96 GB, 3.28 TB/s) and
  ``lpddr`` (LPDDR5X, 512 GB, 546 GB/s), each with a 4-core Table 2 chip;
* ``lpddr-only`` -- the H2M2 baseline (two chips on one capacity-centric LPDDR5X pool);
* ``hbm8`` -- eight HBM3 modules (768 GB) on two chips;
* ``mlu370-x4`` -- the ODMA device (LPDDR5, 24 GB per card);
* ``a100-80gb`` -- HBM2E, 80 GB (NPU stand-in for the GPU's compute);
* ``h200``, ``h100-sxm`` -- NVIDIA GPUs: HBM3E 141 GB / HBM3 80 GB with the GPU kernel model
  (``gpu`` section, :mod:`h2m2sim.system.gpu`), checked against measurements of the cards;
* ``cpu-ddr5`` -- a 12-channel DDR5-4800 server (NPU stand-in for the CPU's compute).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from dram_models.errors import ConfigError
from dram_models.schema import deep_merge, load, param, suggest
from dram_models.spec import DramSpec, load_standard, preset_file
from h2m2sim.registry import Registry
from h2m2sim.system.chip import NpuChipConfig, resolve_chip
from h2m2sim.system.gpu import GpuSpec
from h2m2sim.system.mmu import MmuSpec
from h2m2sim.system.collective import CollectiveSpec

__all__ = ["SideSpec", "InterconnectSpec", "SyncSpec", "SystemSpec", "resolve_system",
           "build_system", "expand_system", "SYSTEMS", "PRESET_DIR", "list_presets",
           "preset_data", "load_system_preset", "MAX_CHANNELS"]


#: Most DRAM channels one side may have: the engine's state and work grow with them
#: (4,096 = 128 HBM3 stacks of 32 pseudo-channels).
MAX_CHANNELS = 4096


@dataclasses.dataclass(frozen=True, kw_only=True)
class SideSpec:
    """One memory side: DRAM + capacity + the chip attached to it."""

    name: str = param(doc="side name (e.g. hbm, lpddr); kernels and tensors refer to it")
    dram: DramSpec = param(doc="DRAM standard: preset name, {preset: NAME, <overrides "
                           "incl. organization / timing / controller>}, or a full standard")
    channels: Optional[int] = param(None, ge=1, le=MAX_CHANNELS, doc="DRAM channels "
                                    "(overrides the standard's organization.channels; any "
                                    "count: a count that is not a power of two interleaves "
                                    "channels modulo). The engine keeps state and work per "
                                    "channel, hence the bound (128 HBM3 stacks).")
    capacity_bytes: int = param(gt=0, unit="bytes", doc="usable memory of the side (at "
                                "most the DRAM organization's capacity)")
    chip: NpuChipConfig = param(default_factory=NpuChipConfig, doc="accelerator chip "
                                "attached to this side (preset name or mapping)")
    gpu: Optional[GpuSpec] = param(None, doc="a GPU on this side instead of an NPU chip: "
                                   "steps are then priced kernel by kernel with the GPU "
                                   "kernel model over this side's simulated DRAM (the "
                                   "chip's fields are not used for timing)")
    nominal_bandwidth_gbps: Optional[float] = param(
        None, gt=0, unit="GB/s", doc="bandwidth of the real device when the simulated "
        "DRAM organization only approximates it; informational, the simulation uses the "
        "organization")
    description: str = param("", doc="free text")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")

    def _check(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError("name", f"must be a non-empty name of letters, digits, '-' "
                              f"or '_', got {self.name!r}")
        if self.n_channels > MAX_CHANNELS:
            raise ConfigError("dram.organization.channels", f"at most {MAX_CHANNELS} "
                              f"channels per side, got {self.n_channels}")
        org = self.dram_spec.organization.capacity_bytes
        if self.capacity_bytes > org:
            raise ConfigError("capacity_bytes", f"{self.capacity_bytes} bytes exceed what "
                              f"the DRAM organization addresses ({org} bytes = "
                              f"{org / 2**30:g} GiB); raise dram.organization.rows or "
                              "channels, or lower capacity_bytes")
        burst = self.dram_spec.burst_bytes
        if self.chip.dma_chunk_bytes % burst:
            # a descriptor ends on a burst: the DMA engine cannot move part of one
            raise ConfigError("chip.dma_chunk_bytes", f"must be 0 (automatic) or a multiple "
                              f"of the DRAM burst ({burst} bytes), got "
                              f"{self.chip.dma_chunk_bytes}")

    @functools.cached_property
    def dram_spec(self) -> DramSpec:
        """The DRAM standard with this side's channel count applied."""
        if self.channels is None or self.channels == self.dram.organization.channels:
            return self.dram
        return self.dram.with_channels(self.channels)

    @property
    def n_channels(self) -> int:
        return self.dram_spec.organization.channels

    @property
    def bandwidth_gbps(self) -> float:
        """Peak DRAM bandwidth of the side as simulated, GB/s (1e9 B/s)."""
        return self.dram_spec.peak_gbps

    @property
    def kind(self) -> str:
        """Memory technology (the DRAM standard's name, e.g. HBM3-6400)."""
        return self.dram.name

    @property
    def peak_tflops(self) -> float:
        """Peak dense throughput of the side's compute (the GPU's highest declared peak,
        else the NPU chip's), 1e12 ops/s."""
        return self.gpu.peak_tflops_max if self.gpu is not None else self.chip.peak_tflops

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterconnectSpec:
    """The link between the chips of different sides (activation copies, migrations)."""

    bandwidth_gbps: float = param(960.0, gt=0, unit="GB/s", doc="chip-to-chip bandwidth",
                                  source="H2M2 Table 1 (960 GB/s)")
    latency_ns: float = param(500.0, ge=0, unit="ns", doc="latency of one transfer over "
                              "the link (setup + flight)",
                              source="assumed; the paper gives no value")
    energy_pj_per_bit: float = param(
        1.17, ge=0, le=1e3, unit="pJ/bit", doc="energy per bit moved over the link",
        source="Poulton et al., 'A 1.17-pJ/b, 25-Gb/s/pin ground-referenced single-ended "
        "serial link for off- and on-package communication', JSSC 2019 (16 nm)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyncSpec:
    """Cost of synchronizing the chips between sublayers (H2M2 Sec. 4.1: a hardware
    event mechanism; kernels are launched ahead and released by their dependencies)."""

    barrier_ns: float = param(500.0, ge=0, unit="ns", doc="time from the last kernel of a "
                              "sublayer finishing to the next one starting on every side",
                              source="assumed: one message over the chip-to-chip link")
    launch_ns: float = param(0.0, ge=0, unit="ns", doc="per-kernel launch overhead",
                             source="H2M2 Sec. 4.1: kernels are pre-launched (0)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SystemSpec:
    """A whole system: sides, interconnect, MMU, synchronization."""

    name: str = param("custom", doc="system name")
    description: str = param("", doc="free text")
    sides: tuple[SideSpec, ...] = param(doc="memory sides (each with its chip)")
    interconnect: InterconnectSpec = param(default_factory=InterconnectSpec,
                                           doc="chip-to-chip link")
    mmu: MmuSpec = param(default_factory=MmuSpec, doc="address translation (one MMU/TLB "
                         "per chip, one flat page table per side)")
    sync: SyncSpec = param(default_factory=SyncSpec, doc="cross-chip synchronization")
    collective: CollectiveSpec = param(default_factory=CollectiveSpec, doc="all-reduce "
                                       "across tensor-parallel devices (none by default)")
    cards: int = param(1, ge=1, le=4096, doc="identical cards, each holding all the sides "
                       "above, that serve one model together: the serving layer shards "
                       "the model over them (tensor parallel) and adds their memory and "
                       "bandwidth. The decode-iteration job simulates one card.")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")

    def _check(self) -> None:
        if not self.sides:
            raise ConfigError("sides", "needs at least one memory side")
        seen = set()
        for i, s in enumerate(self.sides):
            if s.name in seen:
                raise ConfigError(f"sides[{i}].name", f"duplicate side name {s.name!r}")
            seen.add(s.name)
        for s in self.sides:
            if self.mmu.table_bytes > s.capacity_bytes:
                raise ConfigError("mmu.virtual_bytes", f"the flat page table "
                                  f"({self.mmu.table_bytes} bytes) does not fit side "
                                  f"{s.name!r} ({s.capacity_bytes} bytes); use larger "
                                  "pages or a smaller virtual space")

    @property
    def side_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sides)

    def side(self, name: str | SideSpec, key: str = "side") -> SideSpec:
        """The side called ``name`` (ConfigError with a suggestion otherwise)."""
        if isinstance(name, SideSpec):
            return name
        for s in self.sides:
            if s.name == name:
                return s
        raise ConfigError(key, f"no side {name!r} in system {self.name!r}"
                          + suggest(str(name), self.side_names)
                          + f"; sides: {', '.join(self.side_names)}")

    def check_compute_dtype(self, dtype: str, key: str = "model.dtype") -> None:
        """Refuse ``dtype`` unless every side computes in it: a GPU with a peak for it,
        a chip that lists it in ``compute_dtypes``."""
        for s in self.sides:
            if s.gpu is not None:
                s.gpu.peak(dtype, key)
            elif dtype not in s.chip.compute_dtypes:
                raise ConfigError(key, f"side {s.name!r} of {self.name!r} computes in "
                                  f"{', '.join(s.chip.compute_dtypes)}, not {dtype}")

    @property
    def capacity_bytes(self) -> int:
        return sum(s.capacity_bytes for s in self.sides)

    @property
    def bandwidth_gbps(self) -> float:
        return sum(s.bandwidth_gbps for s in self.sides)

    @property
    def peak_tflops(self) -> float:
        """Peak dense throughput of all chips together, 1e12 ops/s."""
        return sum(s.peak_tflops for s in self.sides)


# ---------------------------------------------------------------------------- resolving
def _prepare_sides(data: dict, key: str) -> dict:
    """Resolve each side's ``dram`` (preset name / overrides) and ``chip`` into objects
    before the typed load, so their errors carry the side's key path."""
    sides = data.get("sides")
    if sides is None:
        return data
    if isinstance(sides, Mapping) or isinstance(sides, (str, bytes)) or \
            not hasattr(sides, "__iter__"):
        raise ConfigError(f"{key}.sides", "must be a list of sides (each a mapping with "
                          "name, dram, capacity_bytes, ...)")
    out = []
    for i, side in enumerate(sides):
        skey = f"{key}.sides[{i}]"
        if not isinstance(side, Mapping):
            raise ConfigError(skey, f"must be a mapping (name, dram, capacity_bytes, ...), "
                              f"got {side!r}")
        side = dict(side)
        if "dram" in side and not isinstance(side["dram"], DramSpec):
            side["dram"] = load_standard(side["dram"], key=f"{skey}.dram")
        if "chip" in side and not isinstance(side["chip"], NpuChipConfig):
            side["chip"] = resolve_chip(side["chip"], f"{skey}.chip")
        out.append(side)
    return dict(data, sides=out)


def build_system(data: Any, key: str = "system") -> SystemSpec:
    """A :class:`SystemSpec` from a full mapping (no preset lookup)."""
    if not isinstance(data, Mapping):
        raise ConfigError(key, f"must be a mapping, got {data!r}")
    return load(SystemSpec, _prepare_sides(dict(data), key), key)


def _check_new_sides(base: dict, data: dict, preset: str, key: str) -> None:
    """Overriding ``sides`` by name may add a side, but only a complete one: a name that
    is not in the preset and comes without ``dram`` is most likely a typo."""
    over = data.get("sides")
    if not isinstance(over, Mapping):
        return
    names = [s.get("name") for s in base.get("sides", []) if isinstance(s, Mapping)]
    for name, val in over.items():
        if name not in names and isinstance(val, Mapping) and "dram" not in val:
            raise ConfigError(f"{key}.sides.{name}", f"no side {name!r} in preset "
                              f"{preset!r}" + suggest(str(name), [str(n) for n in names])
                              + f"; sides: {', '.join(map(str, names))} (a new side needs "
                              "name, dram and capacity_bytes)")


# ----------------------------------------------------------------------------- presets
PRESET_DIR = Path(__file__).resolve().parent / "presets"

#: Built-in systems: one YAML file per system in ``h2m2sim/system/presets/``, every
#: number commented with its source (``h2m2sim presets systems`` lists them).
SYSTEMS: Registry[Path] = Registry("system preset", key="system",
                                   hint="or a path to a .yaml file")
for _path in sorted(PRESET_DIR.glob("*.yaml")):
    SYSTEMS.register(_path.stem, _path)


def list_presets() -> list[str]:
    """Names of the built-in system presets."""
    return SYSTEMS.names()


def preset_data(name: Any, key: str = "system", _chain: tuple[str, ...] = ()) -> dict:
    """Raw data of preset ``name`` or of a YAML file path (a file may itself name a
    ``preset`` to start from, or be a run configuration whose ``system`` is taken). A
    file that names itself, directly or through others, is refused with the chain."""
    if not isinstance(name, str) or not name:
        raise ConfigError(key, f"must be a system preset name or a YAML path, got {name!r}")
    if Path(name).suffix not in (".yaml", ".yml"):
        return preset_file(str(SYSTEMS.get(name, key)), PRESET_DIR, key, "system preset")
    here = str(Path(name).resolve())
    if here in _chain:
        loop = " -> ".join([*_chain[_chain.index(here):], here])
        raise ConfigError(key, f"presets name each other in a loop: {loop}")
    data = preset_file(name, PRESET_DIR, key, "system preset")
    if isinstance(data.get("system"), dict):
        data = data["system"]          # a run configuration: take its system section
    if "preset" in data:
        base = preset_data(data.pop("preset"), f"{key}.preset", (*_chain, here))
        data = deep_merge(base, data)
    return data


def load_system_preset(name: str) -> SystemSpec:
    """The resolved :class:`SystemSpec` of preset (or YAML file) ``name``."""
    return resolve_system(name, "system")


def expand_system(raw: Any, key: str = "system") -> dict:
    """A run configuration's ``system`` value (preset name, YAML path, or mapping with an
    optional ``preset`` and overrides) as the full mapping of its fields."""
    if isinstance(raw, str):
        return preset_data(raw, key)
    if not isinstance(raw, Mapping):
        raise ConfigError(key, f"must be a system preset name, a YAML path or a mapping, "
                          f"got {raw!r}")
    data = dict(raw)
    if "preset" in data:
        pname = data.pop("preset")
        base = preset_data(pname, f"{key}.preset")
        _check_new_sides(base, data, pname, key)
        try:
            data = deep_merge(base, data)
        except ConfigError as err:
            raise err.prefixed(f"{key}.sides") from None
    return data


def resolve_system(raw: Any, key: str = "system") -> SystemSpec:
    """Resolve a run configuration's ``system`` value (see the module docstring)."""
    if isinstance(raw, SystemSpec):
        return raw
    return build_system(expand_system(raw, key), key)

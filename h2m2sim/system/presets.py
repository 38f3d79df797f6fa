"""Built-in system presets: one YAML file per system in ``h2m2sim/system/presets/``,
every number commented with its source.

* ``h2m2`` -- the H2M2 asymmetric system: sides ``hbm`` (HBM3, 96 GB, 3.28 TB/s) and
  ``lpddr`` (LPDDR5X, 512 GB, 546 GB/s), each with a 4-core Table 2 chip;
* ``lpddr-only`` -- the H2M2 baseline (two chips on one capacity-centric LPDDR5X pool,
  see the file);
* ``hbm8`` -- eight HBM3 modules (768 GB) on two chips (provisional, see the file);
* ``mlu370-x4`` -- the ODMA device (LPDDR5, 24 GB);
* ``a100-80gb`` -- HBM2E, 80 GB (NPU stand-in for the GPU's compute);
* ``cpu-ddr5`` -- a 12-channel DDR5-4800 server (NPU stand-in for the CPU's compute).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dram_models.errors import ConfigError
from dram_models.spec import preset_file

from .config import SystemSpec, resolve_system

__all__ = ["PRESET_DIR", "list_presets", "preset_data", "load_system_preset"]

PRESET_DIR = Path(__file__).resolve().parent / "presets"


def list_presets() -> list[str]:
    """Names of the built-in system presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_data(name: Any, key: str = "system") -> dict:
    """Raw data of preset ``name`` or of a YAML file path (a file may itself name a
    ``preset`` to start from)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(key, f"must be a system preset name or a YAML path, got {name!r}")
    data = preset_file(name, PRESET_DIR, key, "system preset")
    if Path(name).suffix in (".yaml", ".yml"):
        if isinstance(data.get("system"), dict):
            data = data["system"]          # a run configuration: take its system section
        if "preset" in data:
            from dram_models.schema import deep_merge
            base = preset_data(data.pop("preset"), f"{key}.preset")
            data = deep_merge(base, data)
    return data


def load_system_preset(name: str) -> SystemSpec:
    """The resolved :class:`SystemSpec` of preset (or YAML file) ``name``."""
    return resolve_system(name, "system")

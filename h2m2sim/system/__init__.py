"""System layer: the hardware description of whole systems.

* :mod:`.config` -- memory sides, interconnect, synchronization, the built-in presets;
* :mod:`.chip` -- the accelerator chip attached to a side (H2M2 Table 2);
* :mod:`.mmu` -- the chips' address-translation hardware.

Running a decode iteration on a system is the job of :mod:`h2m2sim.decode`.
"""
from .chip import NpuChipConfig, resolve_chip
from .config import (SYSTEMS, InterconnectSpec, SideSpec, SyncSpec, SystemSpec, list_presets,
                     load_system_preset, resolve_system)
from .mmu import MmuSpec

__all__ = ["SideSpec", "InterconnectSpec", "SyncSpec", "SystemSpec", "resolve_system",
           "SYSTEMS", "list_presets", "load_system_preset", "NpuChipConfig", "resolve_chip",
           "MmuSpec"]

"""System layer: hardware description of whole systems (:mod:`.config`: memory sides,
interconnect, MMU, synchronization; :mod:`.presets`: built-in systems). Iteration
execution over the sides lives in sibling modules."""
from .config import InterconnectSpec, SideSpec, SyncSpec, SystemSpec, resolve_system
from .presets import list_presets, load_system_preset

__all__ = ["SideSpec", "InterconnectSpec", "SyncSpec", "SystemSpec", "resolve_system",
           "list_presets", "load_system_preset"]

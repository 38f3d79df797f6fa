"""KV-cache allocators behind one interface (see :mod:`.base`).

``ALLOCATORS`` maps a name to a class; every class is built as
``cls(capacity_bytes, bytes_per_token, *, base_address=0, max_context_tokens=None,
log_all_events=False, **options)`` and offers ``reserve / grow / release``,
``capacity_of``, ``extents`` / ``layout`` (the KV address layout of a request),
``kv_layout`` (the layout class for iteration-time tables), ``events`` and ``stats()``.
New allocators (e.g. ``bmc``, ``ellm``) subclass :class:`KVAllocator` and add themselves
with :func:`register`.
"""
from __future__ import annotations

from h2m2sim.errors import ConfigError
from dram_models.schema import suggest

from .base import AllocEvent, ContiguousAllocator, ExtentHeap, KVAllocator
from .odma import BucketManager, ODMAAllocator
from .paged import PagedAllocator
from .static import StaticAllocator

ALLOCATORS: dict[str, type[KVAllocator]] = {
    "static": StaticAllocator,
    "paged": PagedAllocator,
    "odma": ODMAAllocator,
}


def register(name: str, cls: type[KVAllocator]) -> None:
    """Add an allocator class under ``name``."""
    ALLOCATORS[name] = cls


def make_allocator(name: str, capacity_bytes: int, bytes_per_token: int, **options) -> KVAllocator:
    """Build allocator ``name``; unknown names and options are ConfigErrors."""
    cls = ALLOCATORS.get(name)
    if cls is None:
        raise ConfigError("allocator", f"unknown allocator {name!r}{suggest(name, list(ALLOCATORS))}"
                          f"; known: {', '.join(ALLOCATORS)}")
    try:
        return cls(capacity_bytes, bytes_per_token, **options)
    except TypeError as err:  # an option the class does not take
        raise ConfigError(f"allocator.{name}", str(err)) from None


__all__ = ["ALLOCATORS", "register", "make_allocator", "KVAllocator", "ContiguousAllocator",
           "ExtentHeap", "AllocEvent", "StaticAllocator", "PagedAllocator", "ODMAAllocator",
           "BucketManager"]
register("ellm", __import__(f"{__name__}.ellm", fromlist=["ElasticAllocator"]).ElasticAllocator)  # eLLM / static split
from . import bmc as _bmc  # noqa: E402,F401  (BMC; registers itself as "bmc")

"""KV-cache allocators behind one interface (see :mod:`.base`): the policies that decide
where each request's KV lives, and so which address stream attention sends the DRAM.

``ALLOCATORS`` (a :class:`~h2m2sim.registry.Registry`) maps a name to a class; every class
is built as ``cls(capacity_bytes, bytes_per_token, *, base_address=0,
max_context_tokens=None, log_all_events=False, **options)`` and offers ``reserve / grow
/ release``, ``capacity_of``, ``extents`` / ``layout`` (the KV address layout of a
request), ``kv_layout`` (its :class:`~h2m2sim.memory.kv_layout.KVLayout`), ``events``,
``stats()`` and the abilities declared on :class:`KVAllocator`. A class may declare a
dataclass ``Params``: the configuration's ``allocator_params`` are checked against it.

Allocators sit above the compute layer because a policy may consult a cost model: BMC's
``bmc-auto`` mode takes its re-allocation period from the analytical optimum measured on
a roofline device (:mod:`h2m2sim.compute.bmc`).
"""
from __future__ import annotations

from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

from .base import AllocEvent, ContiguousAllocator, ExtentHeap, KVAllocator, PrefixSharing
from .bmc import BMCAllocator
from .ellm import ElasticAllocator
from .odma import BucketManager, ODMAAllocator
from .paged import PagedAllocator
from .state import NO_STATE, RequestState, StateSlots
from .static import StaticAllocator

__all__ = ["ALLOCATORS", "make_allocator", "KVAllocator", "ContiguousAllocator",
           "ExtentHeap", "AllocEvent", "StaticAllocator", "PagedAllocator", "ODMAAllocator",
           "BucketManager", "BMCAllocator", "ElasticAllocator", "PrefixSharing",
           "RequestState", "NO_STATE", "StateSlots"]

ALLOCATORS: Registry[type[KVAllocator]] = Registry("allocator", key="allocator")
for _cls, _what in (
        (StaticAllocator, "one contiguous worst-case extent per request (FasterTransformer, "
                          "static vLLM)"),
        (PagedAllocator, "vLLM-style fixed-size blocks from one free list"),
        (ODMAAllocator, "ODMA: predictor-driven, bucketed, contiguous extents"),
        (ElasticAllocator, "eLLM: one chunk pool lent between activations and KV (or "
                           "vLLM's static split)"),
        (BMCAllocator, "BMC: contiguous extents with spare rows, re-allocated every r "
                       "tokens")):
    ALLOCATORS.register(_cls.name, _cls, description=_what)


def make_allocator(name: str, capacity_bytes: int, bytes_per_token: int, **options) -> KVAllocator:
    """Build allocator ``name``; unknown names and options are ConfigErrors."""
    cls = ALLOCATORS.get(name)
    try:
        return cls(capacity_bytes, bytes_per_token, **options)
    except TypeError as err:  # an option the class does not take
        raise ConfigError(f"allocator.{name}", str(err)) from None

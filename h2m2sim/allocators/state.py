"""The fixed-size recurrent state of a request of a hybrid (Mamba) model, beside its KV.

A Mamba layer keeps per request a conv state (d_inner x (d_conv - 1)) and an SSM state
(d_inner x d_state), whatever the request's length (:meth:`ModelSpec.state_bytes_per_request`
sums them over the Mamba layers). A serving engine holds it from admission to finish or
preemption, so an allocator grants it with the request's KV and frees it with it: a
*fixed per-request reservation* (:class:`RequestState`), allocated by ``reserve`` (no KV
without state, no state without KV) and freed by ``release``.

Where the bytes come from is the allocator's business:

* :class:`StateSlots` (the default of every allocator): a slab of ``slots`` slots of
  exactly one request's state, at the top of the allocator's region, so the KV region
  shrinks by ``slots x bytes_per_request``. It is how vLLM keeps a hybrid's state (one
  preallocated Mamba cache with a slot per schedulable sequence); the serving loop gives
  ``slots = max_batch``, the most requests that can run at once.
* eLLM's elastic pool takes each request's state as whole chunks of its unified pool
  (:class:`h2m2sim.allocators.ellm.ElasticAllocator`).

Units: bytes; addresses are byte addresses in the allocator's region.
"""
from __future__ import annotations

import dataclasses

from dram_models.schema import param
from h2m2sim.errors import ConfigError

__all__ = ["RequestState", "NO_STATE", "StateSlots"]


@dataclasses.dataclass(frozen=True)
class RequestState:
    """What one request holds besides its KV: ``bytes_per_request`` bytes over
    ``layers`` Mamba layers (both 0 for an attention-only model)."""

    bytes_per_request: int = param(0, ge=0, unit="bytes", doc="recurrent state of one "
                                   "request over all Mamba layers (conv + SSM state)")
    layers: int = param(0, ge=0, doc="Mamba layers the state is spread over")

    def __post_init__(self):
        if int(self.bytes_per_request) < 0 or int(self.layers) < 0:
            raise ConfigError("allocator.state", f"bytes and layers must be >= 0, got "
                              f"{self.bytes_per_request} and {self.layers}")
        if bool(self.bytes_per_request) != bool(self.layers):
            raise ConfigError("allocator.state", "a state needs both bytes and Mamba layers")

    @classmethod
    def of_model(cls, model, dtype: str | None = None) -> "RequestState":
        """The state of one request of ``model`` (a ModelSpec) in ``dtype``."""
        return cls(int(model.state_bytes_per_request(dtype)), int(model.ssm_layers))

    def __bool__(self) -> bool:
        return self.bytes_per_request > 0


#: The state of an attention-only model: nothing.
NO_STATE = RequestState()


class StateSlots:
    """``slots`` slots of ``slot_bytes`` bytes at ``[base, base + slots x slot_bytes)``;
    a request takes one (the lowest-addressed free one) and gives it back. Deterministic
    (the same call sequence gives the same addresses)."""

    def __init__(self, slots: int, slot_bytes: int, base: int):
        if int(slots) <= 0 or int(slot_bytes) <= 0:
            raise ConfigError("allocator.state_slots", f"needs > 0 slots of > 0 bytes, got "
                              f"{slots} of {slot_bytes}")
        self.slots, self.slot_bytes, self.base = int(slots), int(slot_bytes), int(base)
        self._free = list(range(self.slots - 1, -1, -1))     # stack: lowest slot on top
        self._of: dict[int, int] = {}

    @property
    def region_bytes(self) -> int:
        return self.slots * self.slot_bytes

    @property
    def held(self) -> int:
        """Slots taken."""
        return len(self._of)

    def take(self, req_id: int) -> bool:
        """A slot for ``req_id``; False (no change) when all are taken."""
        if not self._free:
            return False
        self._of[int(req_id)] = self._free.pop()
        return True

    def give_back(self, req_id: int) -> None:
        self._free.append(self._of.pop(int(req_id)))

    def address(self, req_id: int) -> int:
        """Byte address of the request's slot."""
        return self.base + self._of[int(req_id)] * self.slot_bytes

    def check(self) -> None:
        """Every slot either free or held once (tests)."""
        every = self._free + list(self._of.values())
        assert sorted(every) == list(range(self.slots)), "a state slot is lost or doubled"

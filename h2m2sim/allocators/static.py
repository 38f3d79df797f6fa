"""Static worst-case allocator: every request gets one contiguous extent big enough for the
longest request the server accepts (the FasterTransformer / static vLLM baseline)."""
from __future__ import annotations

from dataclasses import dataclass

from dram_models.schema import param
from h2m2sim.errors import ConfigError

from .base import ContiguousAllocator, PrefixSharing

__all__ = ["StaticAllocator"]


class StaticAllocator(ContiguousAllocator):
    """Reserve ``max_context_tokens`` per request (or, with ``max_new_tokens``, the
    request's own worst case ``min(max_context_tokens, prompt + max_new_tokens)``), rounded
    up to ``align_tokens``. The extent never grows: a request is cut off by the server
    before it exceeds the worst case, so ``grow`` beyond it fails.

    Shared prefixes: each cached prefix block is a contiguous region of its own, and a
    request that reuses ``s`` tokens of them reserves its worst case minus ``s`` as its
    private extent (its KV is then its prefix regions plus that extent)."""

    name = "static"
    bounded_by_max_new_tokens = True
    prefix_sharing = PrefixSharing.CONTIGUOUS_REGION

    @dataclass(frozen=True)
    class Params:
        """Options of the static allocator (``policy.allocator_params``)."""

        align_tokens: int = param(16, ge=1, unit="tokens",
                                  doc="Extents are rounded up to a multiple of this.")

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *,
                 max_new_tokens: int | None = None, **kw):
        super().__init__(capacity_bytes, bytes_per_token, **kw)
        if max_new_tokens is not None and int(max_new_tokens) <= 0:
            raise ConfigError("allocator.max_new_tokens", f"must be > 0, got {max_new_tokens}")
        self.max_new_tokens = None if max_new_tokens is None else int(max_new_tokens)
        if self._round(self.max_context_tokens) > self._heap.total:
            raise ConfigError("allocator.capacity_bytes",
                              f"holds {self.capacity_tokens} KV tokens, less than one "
                              f"worst-case reservation of {self.max_context_tokens} tokens")

    def worst_case_tokens(self, prompt_tokens: int) -> int:
        if self.max_new_tokens is None:
            return self.max_context_tokens
        return min(self.max_context_tokens, int(prompt_tokens) + self.max_new_tokens)

    def _reserve(self, req_id, prompt, need, predicted, uncertainty):
        shared = self._reserving_shared        # prompt and need are the private part
        tokens = self._round(max(need, self.worst_case_tokens(prompt + shared) - shared))
        off = self._take(tokens)
        if off is None:
            return None
        self._slot[req_id] = (off, tokens)
        return tokens

    def _grow(self, req_id, r, new_tokens):
        return None  # the worst case was reserved up front; nothing bigger is allowed

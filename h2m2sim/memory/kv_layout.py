"""How a KV-cache allocator lays a request's KV out in memory, as a value.

The layout decides the address pattern attention reads, so iteration times depend on it:
``contiguous`` (one extent per request: static, ODMA, BMC) streams each head's context;
``paged`` with blocks of ``block_tokens`` tokens (vLLM, eLLM) reads it as scattered
blocks. Allocators declare their layout, the iteration-time tables are built per layout,
and the cycle-level evaluator turns a layout into the DRAM stream it prices.

``str(layout)`` (``"contiguous"``, ``"paged:16"``) names a layout in results and files;
:meth:`KVLayout.parse` reads that name back where a layout was stored as text.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from h2m2sim.errors import ConfigError

__all__ = ["KVLayout", "CONTIGUOUS"]

KINDS = ("contiguous", "paged")


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """``kind`` contiguous (``block_tokens`` 0) or paged (``block_tokens`` > 0 tokens per
    block)."""

    kind: Literal["contiguous", "paged"]
    block_tokens: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError("kv_layout", f"unknown KV layout kind {self.kind!r}; known: "
                              f"{', '.join(KINDS)}")
        b = self.block_tokens
        if isinstance(b, bool) or not isinstance(b, int):
            raise ConfigError("kv_layout.block_tokens", f"must be an integer, got {b!r}")
        if self.kind == "contiguous" and b != 0:
            raise ConfigError("kv_layout.block_tokens", "a contiguous layout has no blocks")
        if self.kind == "paged" and b <= 0:
            raise ConfigError("kv_layout.block_tokens", f"must be > 0 for a paged layout, "
                              f"got {b}")

    @classmethod
    def paged(cls, block_tokens: int) -> "KVLayout":
        return cls("paged", int(block_tokens))

    @property
    def is_paged(self) -> bool:
        return self.kind == "paged"

    def __str__(self) -> str:
        return f"paged:{self.block_tokens}" if self.is_paged else "contiguous"

    @classmethod
    def parse(cls, text: str) -> "KVLayout":
        """The layout named ``text`` (``"contiguous"`` or ``"paged:<block tokens>"``)."""
        if text == "contiguous":
            return CONTIGUOUS
        kind, _, block = str(text).partition(":")
        if kind == "paged" and block.isdigit() and int(block) > 0:
            return cls.paged(int(block))
        raise ConfigError("kv_layout", f"unknown KV layout {text!r} (expected 'contiguous' "
                          "or 'paged:<block tokens>')")


#: The layout of every allocator that gives a request one extent.
CONTIGUOUS = KVLayout("contiguous")

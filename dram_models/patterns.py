"""Synthetic request patterns for benchmarks and tests.

Every request is one burst of the standard (``burst`` bytes, e.g. 32 B for an LPDDR5 x16
channel or an HBM3 pseudo-channel); addresses are burst-aligned and lie in [0, 4 GiB).

* ``seq``          -- address i x burst;
* ``random``       -- uniform burst-aligned addresses (seeded);
* ``stride:BYTES`` -- address i x BYTES modulo 4 GiB;
* ``paged:BYTES``  -- random BYTES-aligned chunks (seeded), each read fully and in order:
  the access pattern of scattered KV-cache blocks;
* ``mixed:R:W``    -- sequential addresses; R reads then W writes, repeating.
"""
from __future__ import annotations

import numpy as np

from .errors import ConfigError
from .schema import parse_size
from .trace import Trace

SPACE = 1 << 32   # 4 GiB
NAMES = ("seq", "random", "stride:BYTES", "paged:BYTES", "mixed:R:W")


def make(pattern: str, n: int, burst: int, seed: int = 0) -> Trace:
    """An open-loop trace of ``n`` requests following ``pattern`` (see module doc)."""
    if n < 1:
        raise ConfigError("requests", f"must be >= 1, got {n}")
    kind, _, arg = pattern.partition(":")
    i = np.arange(n, dtype=np.uint64)
    b = np.uint64(burst)
    writes = None
    rng = np.random.default_rng(seed)
    try:
        if kind == "seq" and not arg:
            addr = (i * b) % np.uint64(SPACE)
        elif kind == "random" and not arg:
            addr = rng.integers(0, SPACE // burst, n, dtype=np.uint64) * b
        elif kind == "stride":
            stride = parse_size(arg)
            if stride <= 0 or stride % burst:
                raise ValueError(f"stride must be a positive multiple of the burst ({burst} B)")
            addr = (i * np.uint64(stride)) % np.uint64(SPACE)
        elif kind == "paged":
            chunk = parse_size(arg)
            if chunk <= 0 or chunk % burst:
                raise ValueError(f"chunk must be a positive multiple of the burst ({burst} B)")
            per = chunk // burst
            chunks = -(-n // per)
            base = rng.integers(0, SPACE // chunk, chunks, dtype=np.uint64) * np.uint64(chunk)
            addr = (np.repeat(base, per)[:n] + (i % np.uint64(per)) * b)
        elif kind == "mixed":
            r, _, w = arg.partition(":")
            r, w = int(r), int(w)
            if r < 0 or w < 0 or r + w == 0:
                raise ValueError("needs R, W >= 0 and R + W > 0")
            addr = (i * b) % np.uint64(SPACE)
            writes = (np.arange(n) % (r + w)) >= r
        else:
            raise ValueError("unknown pattern")
    except (ValueError, OverflowError) as err:     # (a size beyond 64 bits overflows)
        raise ConfigError("pattern", f"{pattern!r}: {err}; patterns: {', '.join(NAMES)}") \
            from None
    return Trace.open_loop(addr, writes)

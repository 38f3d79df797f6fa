"""User-facing errors (re-exported from dram_models so both packages share them)."""
from dram_models.errors import ConfigError, SimError, join_key


def format_bytes(n: float) -> str:
    """A size as people read it: decimal units (1 GB = 10^9 bytes), three significant
    figures, the unit that puts the number in [1, 1000): 329 GB, 20.1 TB, 512 B."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if unit == "B" and abs(n) < 999.5:
            return f"{n:.0f} B"
        if abs(n) < 999.5:
            return f"{n:.3g} {unit}"
        if unit == "PB":
            return f"{n:,.0f} PB"
        n /= 1000.0
    raise AssertionError("unreachable")


class OutOfMemoryError(SimError):
    """A memory side (or pool) cannot hold what was asked of it. The message names the
    side, what was being placed (``what``) and the sizes needed and free (readable units;
    the exact bytes are the attributes ``requested`` and ``free``)."""

    def __init__(self, side: str, requested: int, free: int, what: str = ""):
        self.side, self.requested, self.free = side, int(requested), int(free)
        extra = f" for {what}" if what else ""
        super().__init__(f"out of memory on side '{side}'{extra}: needs "
                         f"{format_bytes(self.requested)}, {format_bytes(self.free)} free")


__all__ = ["ConfigError", "SimError", "OutOfMemoryError", "format_bytes", "join_key"]

"""User-facing errors (re-exported from dram_models so both packages share them)."""
from dram_models.errors import ConfigError, SimError, join_key


class OutOfMemoryError(SimError):
    """A memory side (or pool) cannot hold what was asked of it. The message names the
    side, the requested bytes and the free bytes."""

    def __init__(self, side: str, requested: int, free: int, what: str = ""):
        self.side, self.requested, self.free = side, int(requested), int(free)
        extra = f" for {what}" if what else ""
        super().__init__(f"out of memory on side '{side}'{extra}: requested {self.requested} "
                         f"bytes, {self.free} bytes free")


__all__ = ["ConfigError", "SimError", "OutOfMemoryError", "join_key"]

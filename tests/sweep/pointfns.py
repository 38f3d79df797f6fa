"""Top-level point functions for the function-sweep tests (spawned pool workers import
them by name, so they live in a module of their own)."""
from __future__ import annotations

import os

from h2m2sim.errors import SimError

CALLS: list[dict] = []  # parameters of every call made in this process


def square(params: dict) -> dict:
    """A deterministic point: metrics from the parameters alone, plus a wall time."""
    CALLS.append(params)
    x = params["x"]
    if x == int(os.environ.get("POINTFNS_FAIL_AT", "-99")):
        raise RuntimeError(f"killed at x={x}")
    if x < 0:
        raise SimError(f"x={x} does not fit")
    return {"y": x * x, "half": x / 2, "nested": {"neg": -x}, "wall_s": 0.001}

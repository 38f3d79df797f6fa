"""Long-context serving with a simulating evaluator: the iteration tables simulate only
(batch, context) points whose KV fits the replica's pool, and every request the pool can
hold is served. A simulating evaluator cannot simulate more KV than the device holds
(the cycle evaluator places it in the simulated memory and ran out of it at the grid's
far corner); the stand-in here refuses those points the same way."""
from __future__ import annotations

import numpy as np
import pytest

from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.errors import OutOfMemoryError
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.serving.config import resolve_serving
from h2m2sim.serving.deployment import (kv_capacity_bytes, model_sizes, resolve_device,
                                        resolve_model)
from h2m2sim.serving.run import serve
from h2m2sim.serving.timing import TableGrid, build_tables, fill_unreachable, interp2
from h2m2sim.serving.traces import RequestTrace

MODEL = resolve_model("deepseek-r1-distill-qwen-7b")
DEVICE = resolve_device("mlu370-x4")


class BoundedSim(PointEvaluator):
    """Affine step times (exact under the tables' interpolation), from a "simulation"
    that fails, like placing the KV in the simulated memory, beyond ``kv_tokens``."""

    label = "bounded simulation"
    cycle_level = True

    def __init__(self, kv_tokens: float):
        self.kv_tokens = kv_tokens
        self.points = 0

    def cost(self, phase, batch, ctx, layout):
        n = float(np.sum(ctx))
        if phase != "kv_copy" and n > self.kv_tokens:
            raise OutOfMemoryError("kvpool", int(n), int(self.kv_tokens), "the KV pool")
        self.points += 1
        if phase == "decode":
            return PointCost(2e-3 + 1e-5 * batch + 1e-8 * n, 1.0 + 1e-6 * n)
        if phase == "prefill":
            return PointCost(2e-3 + 1e-6 * n, 1.0 + 1e-5 * n)
        return PointCost(1e-9 * n, 1e-7 * n)

    def evaluate(self, phase, batch, ctx, layout):
        return self.cost(phase, batch, ctx, layout).time_s

    def cache_key(self):
        return {"bounded-sim": self.kv_tokens}


def test_unreachable_points_are_not_simulated_and_reachable_ones_are_exact():
    grid = TableGrid(max_batch=64, max_tokens=131072, token_points=8, error_samples=6,
                     kv_tokens=200_000)
    ev = BoundedSim(grid.kv_tokens)
    tabs = build_tables(ev, [KVLayout.paged(16)], grid, cache=False)
    reach = grid.reachable()
    assert 0 < reach.sum() < reach.size
    bg, tg = grid.batches(), grid.tokens()
    for i, b in enumerate(bg):
        for j, c in enumerate(tg):
            if b * c <= grid.kv_tokens:
                want = ev.evaluate("decode", int(b), np.full(int(b), c), None)
                got = interp2(bg, tg, tabs.decode[KVLayout.paged(16)], b, c)
                assert got == pytest.approx(want, rel=1e-9)
    assert np.all(np.diff(tabs.decode[KVLayout.paged(16)], axis=1) >= 0)


def test_fill_extends_each_row_linearly_from_its_last_reachable_points():
    tokens = np.array([1.0, 10.0, 100.0, 1000.0])
    tab = np.array([[1.0, 2.0, 3.0, np.nan], [1.0, 3.0, np.nan, np.nan]])
    reach = np.isfinite(tab)
    out = fill_unreachable(tab, reach, tokens)
    assert out[0, 3] == pytest.approx(3.0 + 900 * (1.0 / 90))
    assert out[1, 2:] == pytest.approx([3.0 + 90 * (2.0 / 9), 3.0 + 990 * (2.0 / 9)])


def test_prompts_up_to_the_models_context_are_served():
    """Synthetic prompts up to the model's whole context on the four-card node: the
    tables skip what no state reaches, and every request is served."""
    cfg = resolve_serving({"max_batch": 64, "history_fraction": 0.0},
                          "workload.serving")
    kv_tokens = kv_capacity_bytes(DEVICE, model_sizes(MODEL, cfg.kv_dtype),
                                  cfg.memory_fraction) // model_sizes(
                                      MODEL, cfg.kv_dtype)["kv_bytes_per_token"]
    ctx = MODEL.max_context
    prompts = np.array([200, 4000, 32000, ctx // 2, ctx - 300, ctx - 64] * 4)
    n = len(prompts)
    trace = RequestTrace(np.arange(n) * 0.5, prompts, np.full(n, 32), None, "long", True, "")
    ev = BoundedSim(kv_tokens)
    m = serve(trace, cfg, allocator="paged", model=MODEL, device=DEVICE,
              evaluator=lambda *a: ev, cache=False).metrics
    assert m["requests_completed"] == n and m["requests_rejected"] == 0
    assert ev.points > 0

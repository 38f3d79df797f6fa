"""Serving a sliding-window model past its window: each request's KV stops at the
window (each new token's K and V replace its oldest), so the allocators hold and the
steps read the window, not the context; everything that would need the whole context
is refused with one line."""
from __future__ import annotations

import numpy as np
import pytest

from h2m2sim.allocators import make_allocator
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.replay import Replay
from h2m2sim.serving.traces import RequestTrace
from tests.serving.test_prefix_cache import BPT, CTX, _tables

W = 256


def _serve(alloc: str, window: int | None, n: int = 6):
    """``n`` requests of a 100-token prompt and 400 tokens out (a context of 500 >
    W), arriving together."""
    tr = RequestTrace(np.zeros(n), np.full(n, 100), np.full(n, 400))
    cfg = ServingConfig(max_batch=16, max_context_tokens=CTX, preemption="swap")
    a = make_allocator(alloc, 10**6 * BPT, BPT, max_context_tokens=window or CTX)
    loop = Replay(tr, cfg, a, _tables(), kv_window=window)
    return loop.run(), a


@pytest.mark.parametrize("alloc", ["paged", "static"])
def test_kv_stops_at_the_window_and_the_steps_read_it(alloc):
    res, a = _serve(alloc, W)
    full, _ = _serve(alloc, None)
    m, mf = res.metrics, full.metrics
    assert m["requests_completed"] == mf["requests_completed"] == 6
    assert (np.asarray(res.output_tokens) == 400).all()          # nothing cut
    # six requests never hold more than the window each (blocks of 16 rounded up)
    assert m["peak_reserved_bytes"] <= 6 * (W + 16) * BPT < mf["peak_reserved_bytes"]
    assert m["mean_used_bytes"] < mf["mean_used_bytes"]
    # QuadEval's decode step of six requests holding c tokens each: 2e-3 + 1e-5 * 6 +
    # 1e-7 * 6c; with the window no step reads more than c = 256, without it the last
    # ones read up to 500
    def step(c):
        return 2e-3 + 1e-5 * 6 + 1e-7 * 6 * c
    tpot = (res.finish_s - res.first_token_s) / 399
    tpot_full = (full.finish_s - full.first_token_s) / 399
    assert np.all((step(100) < tpot) & (tpot <= step(W) * 1.001))
    assert np.all(tpot_full > step(W) * 1.001)
    assert res.finish_s.max() < full.finish_s.max()


@pytest.mark.parametrize("alloc", ["paged", "static"])
def test_kv_utilization_counts_the_tokens_the_window_keeps(alloc):
    # each request holds 256 of its 500 tokens at the end: the KV in use over what was
    # reserved never exceeds 1, and is what the window keeps (paged: 16-token blocks)
    m = _serve(alloc, W)[0].metrics
    assert m["kv_utilization"] <= 1.0
    if alloc == "paged":
        assert m["kv_utilization"] == pytest.approx(W / (W + 16) if W % 16 else 1.0)


def test_what_needs_the_whole_context_is_refused(capsys):
    from h2m2sim.cli import main
    base = ["serve", "--trace", "alpaca", "--system", "mlu370-x4", "--model", "mistral-7b",
            "--allocator", "paged", "--evaluator", "analytic", "--max-requests", "20",
            "--preemption", "swap"]
    for extra, words in ((["--prefix-caching"], "shared prefix leaves its window"),
                         (["--chunked-prefill"], "chunked_prefill"),
                         (["--max-context", "4096", "--preemption", "recompute"], None)):
        code = main([*base, *extra])
        err = capsys.readouterr().err
        if words is None:
            assert code == 0               # within the window nothing is refused
        else:
            assert code == 2 and words in err
    assert main(["serve", "--trace", "alpaca", "--system", "mlu370-x4", "--model",
                 "gemma-2-9b", "--allocator", "paged", "--evaluator", "analytic",
                 "--max-requests", "5", "--preemption", "swap"]) == 2
    assert "mixes local and global layers" in capsys.readouterr().err

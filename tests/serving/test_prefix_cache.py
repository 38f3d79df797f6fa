"""Prefix caching: prefill tokens fall by the reuse ratio, the hit rate equals it with
ample memory, eviction under tight memory keeps every request correct (no block freed
while referenced, every request completes once), pricing of a cached prefix against a
closed form, the trace column's rules and every allocator's declared sharing."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from h2m2sim.allocators import ALLOCATORS, PrefixSharing, make_allocator
from h2m2sim.cli import main
from h2m2sim.compute.evaluator import PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.replay import Replay
from h2m2sim.serving.prefix_cache import cached_prefill_cost
from h2m2sim.serving.timing import TableGrid, build_tables
from h2m2sim.serving.traces import load_trace, prefix_reuse_trace

BPT = 1024
BLOCK = 64            # small hashed blocks keep the tests fast; the logic is the same
BLOCKS = 8            # blocks per prompt
CTX = BLOCK * BLOCKS + 64


class QuadEval(PointEvaluator):
    """Decode a + b*B + c*sum(ctx); prefill F + L*sum(p) + A*sum(p^2) (causal attention's
    quadratic term), copy e*n."""

    label = "test quadratic evaluator"
    cycle_level = False
    F, L, A = 2e-3, 1e-6, 1e-9

    def evaluate(self, phase, batch, ctx, layout):
        ctx = np.asarray(ctx, dtype=float)
        if phase == "decode":
            return 2e-3 + 1e-5 * batch + 1e-7 * ctx.sum()
        if phase == "prefill":
            return self.F + self.L * ctx.sum() + self.A * float(np.sum(ctx * ctx))
        return 1e-8 * ctx.sum()

    def cache_key(self):
        return {"quad": 1}


_TABLES = {}


def _tables(max_tokens=CTX, points=14):
    key = (max_tokens, points)
    if key not in _TABLES:
        _TABLES[key] = build_tables(QuadEval(), [CONTIGUOUS, KVLayout.paged(16)],
                                    TableGrid(16, max_tokens, token_points=points),
                                    cache=False)
    return _TABLES[key]


def _finished(replay) -> list[int]:
    """The request ids ``replay``'s engine finished, in order."""
    return [r.id for r in replay.engine.finished]


def _loop(trace, alloc="paged", cap_tokens=10**6, check=True, **cfg):
    cfg.setdefault("max_batch", 16)
    cfg.setdefault("max_context_tokens", CTX)
    cfg.setdefault("prefix_block_tokens", BLOCK)
    c = ServingConfig(**cfg)
    a = make_allocator(alloc, cap_tokens * BPT, BPT, max_context_tokens=c.max_context_tokens)
    loop = Replay(trace, c, a, _tables())
    if loop.engine.kv.prefix is not None:
        loop.engine.kv.prefix.check = check
    return loop, a


def _run(trace, **kw):
    loop, a = _loop(trace, **kw)
    res = loop.run()
    a.check_invariants()
    return res, a, _finished(loop), loop


def _ideal_hits(trace, k):
    """Hit blocks of an infinite cache when every request is prefilled before the next
    one arrives: k for each request whose prefix was used before, 0 for first uses."""
    seen, hits = set(), 0
    for i in range(len(trace)):
        first = int(trace.block_hashes(i)[0]) if k else -1
        if k and first in seen:
            hits += k
        seen.add(first)
    return hits


@pytest.mark.parametrize("alloc", ["paged", "static"])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_hit_rate_equals_reuse_ratio_with_ample_memory(alloc, ratio):
    n = 120
    tr = prefix_reuse_trace(n, ratio, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=3,
                            output_tokens=8, arrival_rate=1.0, seed=1)
    k = round(ratio * BLOCKS)
    res, a, finished, _ = _run(tr, alloc=alloc, prefix_caching=True)
    m = res.metrics
    hits = _ideal_hits(tr, k)
    assert m["prefix_hit_blocks"] == hits
    assert m["prefix_hit_rate_blocks"] == pytest.approx(hits / (n * BLOCKS), abs=1e-12)
    assert m["prefix_hit_rate"] == pytest.approx(hits / (n * BLOCKS), abs=1e-12)
    # only the 3 first uses miss: the rate is the ratio up to them
    assert m["prefix_hit_rate"] == pytest.approx(k / BLOCKS * (n - 3) / n, abs=1e-12)
    assert m["prefix_cache_evictions"] == 0
    assert sorted(finished) == list(range(n))


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_prefill_tokens_computed_fall_by_the_reuse_ratio(ratio):
    tr = prefix_reuse_trace(100, ratio, prompt_blocks=BLOCKS, block_tokens=BLOCK,
                            prefixes=2, output_tokens=8, arrival_rate=1.0, seed=2)
    off, *_ = _run(tr, prefix_caching=False)
    on, *_ = _run(tr, prefix_caching=True)
    total = 100 * BLOCKS * BLOCK
    assert off.metrics["prefill_tokens_computed"] == off.metrics["prefill_tokens_total"] \
        == total
    assert off.metrics["prefix_hit_rate"] is None
    k = round(ratio * BLOCKS)
    saved = k * BLOCK * (100 - 2)          # every request but the 2 first uses
    assert on.metrics["prefill_tokens_computed"] == total - saved
    assert on.metrics["prefill_tokens_saved"] == saved
    assert on.metrics["prefill_tokens_computed"] / total == \
        pytest.approx(1 - ratio, abs=2 / 100)
    # the saved prefill shows in the time spent prefilling
    assert on.metrics["time_breakdown_s"]["prefill_time_s"] < \
        off.metrics["time_breakdown_s"]["prefill_time_s"]


@pytest.mark.parametrize("alloc", ["paged", "static"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_tight_memory_eviction_keeps_requests_correct(alloc, preemption):
    n = 150
    tr = prefix_reuse_trace(n, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=6,
                            output_tokens=40, arrival_rate=400.0, seed=3)
    # room for a handful of requests: blocks are evicted and requests preempted
    cap = 6 * CTX if alloc == "static" else 4 * CTX
    res, a, finished, loop = _run(tr, alloc=alloc, cap_tokens=cap, prefix_caching=True,
                                  preemption=preemption)
    m = res.metrics
    assert sorted(finished) == list(range(n))            # every request once
    assert np.isfinite(res.finish_s).all()
    assert m["prefix_cache_evictions"] > 0
    assert 0 < m["prefix_hit_rate"] < 0.5
    assert not loop.engine.kv.prefix.held                          # every reference dropped
    if alloc == "paged":         # static reserves the worst case: it never grows
        assert m["preemptions"] > 0
    assert m["prefix_cache_peak_bytes"] <= a.capacity_bytes
    assert a.reserved_tokens == a.shared_tokens        # only cached blocks remain


def test_referenced_block_is_never_evicted():
    tr = prefix_reuse_trace(4, 1.0, prompt_blocks=2, block_tokens=BLOCK, prefixes=1,
                            output_tokens=4, seed=0)
    loop, a = _loop(tr, cap_tokens=4 * CTX, prefix_caching=True)
    cache = loop.engine.kv.prefix
    assert cache.admit(0, 2 * BLOCK, 2 * BLOCK, lambda s: a.reserve(0, 2 * BLOCK,
                                                                     shared_tokens=s))
    assert not cache.evict_one()            # both blocks referenced: nothing to evict
    cache.computed(0)
    a.release(0)
    cache.release(0)
    assert list(cache.lru) == [1, 0]        # tail first
    assert cache.evict_one() and list(cache.entries) == [0]
    cache.entries[0][1] = 1                 # a reference the LRU list does not know of
    with pytest.raises(AssertionError, match="freed while"):
        cache.evict_one()


def test_deterministic():
    tr = prefix_reuse_trace(80, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=3,
                            output_tokens=30, arrival_rate=300.0, seed=4)
    r1, *_ = _run(tr, cap_tokens=5 * CTX, prefix_caching=True, check=False)
    r2, *_ = _run(tr, cap_tokens=5 * CTX, prefix_caching=True, check=False)
    assert json.dumps(r1.metrics, sort_keys=True) == json.dumps(r2.metrics, sort_keys=True)
    assert np.array_equal(r1.finish_s, r2.finish_s)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ratio=st.sampled_from([0.0, 0.25, 0.5, 1.0]), prefixes=st.integers(1, 5),
       cap=st.integers(3, 12), rate=st.sampled_from([5.0, 100.0, 1000.0]),
       alloc=st.sampled_from(["paged", "static"]), seed=st.integers(0, 50))
def test_property_every_request_completes_once(ratio, prefixes, cap, rate, alloc, seed):
    n = 40
    tr = prefix_reuse_trace(n, ratio, prompt_blocks=4, block_tokens=BLOCK,
                            prefixes=prefixes, output_tokens=1 + seed % 30,
                            arrival_rate=rate, seed=seed)
    res, a, finished, loop = _run(tr, alloc=alloc, cap_tokens=cap * CTX,
                                  prefix_caching=True)
    assert sorted(finished) == list(range(n))
    m = res.metrics
    assert m["prefill_tokens_computed"] + m["prefill_tokens_saved"] == \
        m["prefill_tokens_total"]
    assert m["prefill_tokens_total"] >= n * 4 * BLOCK
    assert not loop.engine.kv.prefix.held and loop.engine.kv.prefix.dup_tokens == 0
    assert m["time_weighted_kv_occupancy"] <= 1 + 1e-12
    loop.engine.kv.prefix.check_invariants()


@pytest.mark.parametrize("alloc", ["paged", "static"])
def test_shared_blocks_count_once_in_the_occupancy(alloc):
    """Requests that share most of their prompt run together: their contexts count the
    shared blocks once each, the memory holds them once, and the time-weighted occupancy
    (KV in use over KV reserved) stays at most 1."""
    tr = prefix_reuse_trace(60, 1.0, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=1,
                            output_tokens=200, arrival_rate=1000.0, seed=3)
    res, *_ = _run(tr, alloc=alloc, prefix_caching=True, max_context_tokens=CTX + 256)
    assert res.metrics["prefix_hit_rate"] > 0.9
    assert 0.3 < res.metrics["time_weighted_kv_occupancy"] <= 1 + 1e-12


def test_cached_prefill_price_matches_the_closed_form():
    """f(T) - f(C) + f(1) against F + L*S + A*(T^2 - C^2), at grid points of T and C."""
    tab = _tables(max_tokens=4096, points=13)
    grid = tab.token_grid
    q = QuadEval()
    for ic, it in ((4, 12), (8, 12), (10, 11)):
        c, t = float(grid[ic]), float(grid[it])
        got, _ = cached_prefill_cost(tab, [t], [c])
        want = q.F + q.L * (t - c) + q.A * (t * t - c * c)
        assert got == pytest.approx(want, rel=2e-3)
        full, _ = cached_prefill_cost(tab, [t], [0])
        assert got < full
    assert cached_prefill_cost(tab, [], []) == (0.0, 0.0)


def test_every_allocator_declares_its_sharing():
    for name in ALLOCATORS:
        cls = ALLOCATORS.get(name)
        assert isinstance(cls.prefix_sharing, PrefixSharing)
    assert ALLOCATORS.get("paged").prefix_sharing is PrefixSharing.SHARED_BLOCKS
    assert ALLOCATORS.get("static").prefix_sharing is PrefixSharing.CONTIGUOUS_REGION
    a = make_allocator("odma", 10**6 * BPT, BPT, max_context_tokens=CTX)
    with pytest.raises(NotImplementedError):
        a.hold_shared(BLOCK)


def test_allocator_that_cannot_share_says_so():
    tr = prefix_reuse_trace(30, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=2,
                            output_tokens=8, arrival_rate=1.0)
    res, *_ = _run(tr, alloc="odma", prefix_caching=True)
    m = res.metrics
    assert m["prefix_sharing"] is False and m["prefix_caching"] is False
    assert m["prefix_hit_rate"] is None
    assert m["prefill_tokens_computed"] == m["prefill_tokens_total"]


def _write(tmp_path, rows, header="arrival_s,prompt_tokens,output_tokens,"
                                   "prefix_block_hashes"):
    p = tmp_path / "t.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


def test_trace_column_round_trip_and_subset(tmp_path):
    p = _write(tmp_path, ["0,1000,5,1 2", "0.5,900,5,1 3", "1,10,5,", "2,600,4,1 2"])
    tr = load_trace(p)
    assert tr.has_prefix_hashes
    assert [tr.block_hashes(i).tolist() for i in range(4)] == [[1, 2], [1, 3], [], [1, 2]]
    sub = tr.subset([3, 2, 1])
    assert [sub.block_hashes(i).tolist() for i in range(3)] == [[1, 2], [], [1, 3]]
    assert not load_trace(p.parent / "t.csv", keep_text=False).prompt_text


@pytest.mark.parametrize("value, message", [
    ("1 x", "not a whole number"), ("1 -2", "not a whole number"),
    ("1 1.5", "not a whole number"), (f"1 {2**63}", "not a whole number"),
    ("4 4", "repeats within the request"), ("2 1", "follows another prefix"),
    ("3 1", "follows another prefix"), ("9 2", "follows another prefix")])
def test_bad_hashes_name_row_and_column(tmp_path, capsys, value, message):
    p = _write(tmp_path, ["0,1000,5,1 2", f"1,1000,5,{value}"])
    with pytest.raises(ConfigError, match=message) as err:
        load_trace(p)
    assert "row 2" in str(err.value) and "prefix_block_hashes" in str(err.value)
    rc = main(["serve", "--trace", str(p), "--system", "mlu370-x4", "--model",
               "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator",
               "analytic", "--json"])
    err_text = capsys.readouterr().err.strip()
    assert rc == 2 and len(err_text.splitlines()) == 1 and "row 2" in err_text


def test_more_hashes_than_blocks_is_refused(tmp_path):
    p = _write(tmp_path, ["0,1000,5,1 2 3"])
    with pytest.raises(ConfigError, match="prefix_block_tokens"):
        _run(load_trace(p), prefix_caching=True, prefix_block_tokens=512)


def test_serve_cli_reports_prefix_metrics(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    tr = prefix_reuse_trace(60, 0.5, prompt_blocks=4, block_tokens=512, prefixes=2,
                            output_tokens=16, arrival_rate=2.0)
    rows = [f"{tr.arrival_s[i]:.6f},{tr.prompt_tokens[i]},{tr.output_tokens[i]},"
            + " ".join(map(str, tr.block_hashes(i).tolist())) for i in range(len(tr))]
    p = _write(tmp_path, rows)
    base = ["serve", "--trace", str(p), "--system", "mlu370-x4", "--model",
            "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator",
            "analytic", "--history-fraction", "0", "--json"]
    assert main(base + ["--prefix-caching"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["prefix_hit_rate"] == pytest.approx(0.5 * 58 / 60)
    assert on["prefill_tokens_computed"] < off["prefill_tokens_computed"] == \
        off["prefill_tokens_total"] == on["prefill_tokens_total"]
    assert off["prefix_hit_rate"] is None and on["prefix_sharing"] is True


class QuadMixedEval(QuadEval):
    """QuadEval plus mixed iterations: a decode step plus the chunks' prefill work
    (each chunk's own tokens and its causal attention over the tokens before it)."""

    def mixed_cost(self, decode_context, chunks, kv_layout):
        from h2m2sim.compute.evaluator import PointCost
        ctx = np.asarray(decode_context, dtype=float).ravel()
        ch = np.asarray(chunks, dtype=float).reshape(-1, 2)
        prior, take = ch[:, 0], ch[:, 1]
        t = self.evaluate("decode", ctx.size, ctx, kv_layout) if ctx.size else self.F
        return PointCost(t + self.L * take.sum()
                         + self.A * float(np.sum((prior + take) ** 2 - prior ** 2)))

    def cache_key(self):
        return {"quad-mixed": 1}


CHUNK_BUDGET = 96     # smaller than a prompt (8 blocks of 64): prefills span iterations


def _chunked_run(trace, alloc, cap_tokens, **cfg):
    c = ServingConfig(max_batch=16, max_context_tokens=CTX, prefix_block_tokens=BLOCK,
                      prefix_caching=True, chunked_prefill=True,
                      max_num_batched_tokens=CHUNK_BUDGET, **cfg)
    a = make_allocator(alloc, cap_tokens * BPT, BPT, max_context_tokens=CTX)
    tables = build_tables(QuadMixedEval(), [CONTIGUOUS, KVLayout.paged(16)],
                          TableGrid(16, CTX, token_points=10, chunk_tokens=CHUNK_BUDGET),
                          cache=False)
    loop = Replay(trace, c, a, tables)
    loop.engine.kv.prefix.check = True
    res = loop.run()
    a.check_invariants()
    return res, loop, _finished(loop)


@pytest.mark.parametrize("alloc", ["paged", "static"])
def test_chunked_prefill_with_prefix_caching_ample_memory(alloc):
    """Prefills spread apart in time: the hits are the ideal cache's, and the chunks the
    mixed iterations computed are exactly the prompt tokens the cache did not serve."""
    n = 60
    tr = prefix_reuse_trace(n, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=3,
                            output_tokens=8, arrival_rate=1.0, seed=7)
    res, loop, finished = _chunked_run(tr, alloc, 10**6)
    m = res.metrics
    k = round(0.5 * BLOCKS)
    assert sorted(finished) == list(range(n))
    assert m["mixed_iterations"] > 0 and m["prefill_iterations"] == 0
    assert m["prefix_hit_blocks"] == _ideal_hits(tr, k)
    total = n * BLOCKS * BLOCK
    assert m["prefill_tokens_total"] == total
    assert m["prefill_tokens_computed"] == total - loop.engine.kv.prefix.stats["hit_tokens"] \
        == total - k * BLOCK * (n - 3)
    assert m["prefix_cache_evictions"] == 0


@pytest.mark.parametrize("alloc", ["paged", "static"])
def test_chunked_prefill_with_prefix_caching_tight_memory(alloc):
    """Memory for a few requests, bursty arrivals: blocks are evicted and (paged) running
    requests preempted and prefilled again; every request completes once and the tokens
    the chunks computed equal what was asked (recomputation included) minus the cache's
    hits."""
    n = 120
    tr = prefix_reuse_trace(n, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=5,
                            output_tokens=60, arrival_rate=400.0, seed=8)
    cap = 6 * CTX if alloc == "static" else 4 * CTX
    res, loop, finished = _chunked_run(tr, alloc, cap)
    m = res.metrics
    assert sorted(finished) == list(range(n))
    if alloc == "paged":         # static reserves the worst case: it never grows
        assert m["preemptions"] > 0
    assert np.isfinite(res.finish_s).all()
    assert m["prefix_cache_evictions"] > 0 and 0 < m["prefix_hit_rate"] < 0.5
    assert m["prefill_tokens_total"] >= n * BLOCKS * BLOCK
    assert m["prefill_tokens_computed"] == \
        m["prefill_tokens_total"] - loop.engine.kv.prefix.stats["hit_tokens"]
    assert not loop.engine.kv.prefix.held and not loop.engine.stage.filling
    loop.engine.kv.prefix.check_invariants()

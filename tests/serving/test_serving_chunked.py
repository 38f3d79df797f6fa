"""Chunked prefill, inter-token latency, SLO goodput, shortest-first scheduling and the
preemption victim: conservation against the whole-prefill loop, the mixed table against
its evaluator, and hand-built cases with known answers."""
import numpy as np
import pytest

from h2m2sim.allocators import make_allocator
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.predictors import make_predictor
from h2m2sim.serving.config import ServingConfig, resolve_serving
from h2m2sim.serving.deployment import resolve_device, resolve_model
from h2m2sim.serving.latency import weighted_percentile
from h2m2sim.serving.run import serve, simulate
from h2m2sim.serving.timing import AnalyticEvaluator, TableGrid, build_tables
from h2m2sim.serving.traces import RequestTrace

BPT = 1024


class StepEval(PointEvaluator):
    """Constant iteration times: decode ``dec`` s, prefill ``pre`` s, mixed ``mix`` s
    (copies free): every gap of a run is known by hand."""

    label = "test constant evaluator"

    def __init__(self, dec=0.01, pre=0.1, mix=0.02):
        self.dec, self.pre, self.mix = dec, pre, mix

    def evaluate(self, phase, batch, ctx, layout):
        return {"decode": self.dec, "prefill": self.pre}.get(phase, 0.0)

    def mixed_cost(self, decode_context, chunks, kv_layout):
        return PointCost(self.mix)

    def cache_key(self):
        return {"step": [self.dec, self.pre, self.mix]}


def _sim(trace, ev=None, alloc="paged", cap_tokens=4096, pred=None, budget=64, **cfg):
    cfg.setdefault("max_batch", 16)
    cfg.setdefault("max_context_tokens", 512)
    if cfg.get("chunked_prefill"):
        cfg.setdefault("max_num_batched_tokens", budget)
    c = ServingConfig(**cfg)
    a = make_allocator(alloc, cap_tokens * BPT, BPT, max_context_tokens=c.max_context_tokens)
    grid = TableGrid(c.max_batch, c.max_context_tokens, chunk_tokens=budget)
    tables = build_tables(ev or StepEval(), [a.kv_layout], grid, cache=False)
    return simulate(trace, c, a, tables, pred), a


def _two():
    """A at t=0 (100-token prompt, 11 tokens); B arrives during A's decode (3 tokens)."""
    return RequestTrace(np.array([0.0, 0.145]), np.array([100, 40]), np.array([11, 3]),
                        None, "two")


def test_weighted_percentile_is_the_inverted_cdf():
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1, 97, 2])
    assert weighted_percentile(v, w, 50) == 1.0
    assert weighted_percentile(v, w, 97) == 1.0
    assert weighted_percentile(v, w, 98) == 2.0
    assert weighted_percentile(v, w, 99) == 2.0 and weighted_percentile(v, w, 99.5) == 3.0
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, 200).astype(float)
    assert weighted_percentile(x, np.ones(200), 90) == np.percentile(x, 90,
                                                                     method="inverted_cdf")
    assert weighted_percentile(np.zeros(0), np.zeros(0), 50) is None


def test_itl_of_a_prefill_stall_by_hand():
    """Whole prefills: B's prefill (0.1 s) pauses A, so one of A's gaps is 0.11 s; the
    other eleven tokens after a first one come 0.01 s apart."""
    res, _ = _sim(_two())
    m = res.metrics
    assert res.first_token_s[1] == pytest.approx(0.25)
    assert m["itl_tokens"] == 12 == int(res.output_tokens.sum()) - 2
    assert m["itl_p50_s"] == pytest.approx(0.01) and m["itl_p90_s"] == pytest.approx(0.01)
    assert m["itl_p99_s"] == pytest.approx(0.11)
    assert m["itl_mean_s"] == pytest.approx((11 * 0.01 + 0.11) / 12)


def test_itl_with_chunked_prefill_by_hand():
    """Chunked: B's prefill rides with A's decode in one mixed iteration (0.02 s)."""
    small, _ = _sim(_two(), chunked_prefill=True, budget=64)
    # A's prompt takes two chunks (64 + 36) of 0.1 s each, with nothing else running
    assert small.first_token_s[0] == pytest.approx(0.2)
    res, _ = _sim(_two(), chunked_prefill=True, budget=128)
    m = res.metrics
    assert res.first_token_s[0] == pytest.approx(0.1)       # alone: a prefill iteration
    assert res.first_token_s[1] == pytest.approx(0.17)
    assert m["mixed_iterations"] == 2 and m["itl_tokens"] == 12
    assert m["itl_p99_s"] == pytest.approx(0.02) and m["itl_p50_s"] == pytest.approx(0.01)
    assert m["time_breakdown_s"]["mixed_time_s"] == pytest.approx(0.12)


def test_slo_attainment_and_goodput_by_hand():
    tr = _two()
    res, _ = _sim(tr, slo_ttft_s=0.103)
    m = res.metrics
    # TTFT: A 0.1 s (met), B 0.25 - 0.145 = 0.105 s (missed)
    assert m["slo_attainment"] == 0.5
    assert m["goodput_rps"] == pytest.approx(1 / m["duration_s"])
    # TPOT: A (0.09 + 0.11) / 10 = 0.02 s, B 0.01 s
    m = _sim(tr, slo_ttft_s=1.0, slo_tpot_s=0.015)[0].metrics
    assert m["slo_attainment"] == 0.5
    m = _sim(tr, slo_ttft_s=1.0, slo_tpot_s=0.021)[0].metrics
    assert m["slo_attainment"] == 1.0 and m["goodput_rps"] == pytest.approx(
        2 / m["duration_s"])
    assert _sim(tr)[0].metrics["slo_attainment"] is None


@pytest.mark.parametrize("alloc", ["static", "paged"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_chunked_conserves_requests_and_tokens(alloc, preemption):
    rng = np.random.default_rng(4)
    n = 250
    tr = RequestTrace(np.cumsum(rng.exponential(1 / 150.0, n)), rng.integers(1, 200, n),
                      rng.integers(1, 150, n), None, "synthetic")
    ev = AnalyticEvaluator(weight_bytes=1e8, params=5e7, kv_bytes_per_token=BPT,
                           attn_flops_per_ctx_token=1e4, bandwidth_GBps=100.0,
                           peak_tflops=10.0, layout_efficiency={"contiguous": 1.0,
                                                                "paged": 0.7})
    whole, _ = _sim(tr, ev, alloc, cap_tokens=1500, preemption=preemption)
    chunk, a = _sim(tr, ev, alloc, cap_tokens=1500, preemption=preemption,
                    chunked_prefill=True, budget=64)
    for res in (whole, chunk):
        m = res.metrics
        assert m["requests_completed"] == n and np.all(np.isfinite(res.finish_s))
        assert m["output_tokens"] == int(tr.output_tokens.sum())
        assert m["itl_tokens"] == m["output_tokens"] - n
        assert m["prefill_tokens_computed"] == m["prefill_tokens_total"] >= \
            int(tr.prompt_tokens.sum())
    assert a.counts["release"] == n and a.reserved_tokens == 0 and not a.live_requests
    mc = chunk.metrics
    assert mc["mixed_iterations"] > 0 and mc["prefill_iterations"] == 0
    assert mc["max_num_batched_tokens"] == 64
    # a chunk never exceeds the budget: at least total / budget iterations carry prefill
    assert mc["mixed_iterations"] >= mc["prefill_tokens_total"] / 64
    assert np.all(chunk.first_token_s >= chunk.admit_s)


def test_mixed_table_equals_the_evaluator_at_grid_points():
    ev = AnalyticEvaluator(weight_bytes=1e9, params=5e8, kv_bytes_per_token=BPT * 64,
                           attn_flops_per_ctx_token=1e6, bandwidth_GBps=200.0,
                           peak_tflops=20.0, layout_efficiency={"contiguous": 1.0,
                                                                "paged": 0.6},
                           overhead_s=1e-4)
    paged = KVLayout.paged(16)
    grid = TableGrid(32, 2048, token_points=6, error_samples=20, chunk_tokens=512)
    tables = build_tables(ev, [paged], grid, cache=False)
    for lay in (paged, CONTIGUOUS):
        for b in grid.batches()[::2]:
            for c in grid.tokens()[::2]:
                for k in grid.chunks():
                    want = ev.mixed_cost(np.full(int(b), c), np.array([[0.0, k]]),
                                         lay).time_s
                    got, _ = tables.mixed_cost(int(b), b * c, k, lay)
                    assert got == pytest.approx(want, rel=1e-12)
    err = tables.error_summary()["mixed paged:16"]
    assert 0 <= err["mean"] <= err["max"] < 0.5 and err["max"] > 0    # measured, not 0
    # one pass of the weights for both: cheaper than a decode step plus a prefill
    mixed = ev.mixed_cost(np.full(8, 500.0), np.array([[0.0, 256.0]]), paged).time_s
    apart = ev.evaluate("decode", 8, np.full(8, 500.0), paged) + \
        ev.evaluate("prefill", 1, np.array([256.0]), CONTIGUOUS)
    assert mixed < apart


def test_chunked_needs_mixed_tables_and_a_budget_of_at_least_the_batch():
    tr = _two()
    c = ServingConfig(max_batch=16, max_context_tokens=512, chunked_prefill=True)
    a = make_allocator("paged", 4096 * BPT, BPT, max_context_tokens=512)
    tables = build_tables(StepEval(), [a.kv_layout], TableGrid(16, 512), cache=False)
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        simulate(tr, c, a, tables)
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        resolve_serving({"max_batch": 64, "max_num_batched_tokens": 32}, "serving")


def test_shortest_predicted_first_orders_admissions():
    # r0 runs alone (max_batch 1) while r1..r3 arrive; oracle predictions 30, 10, 20
    tr = RequestTrace(np.array([0.0, 0.01, 0.02, 0.03]), np.full(4, 20),
                      np.array([5, 30, 10, 20]), None, "order")
    pred = make_predictor("oracle").predict(tr)
    order = {}
    for sched in ("fcfs", "shortest"):
        res, _ = _sim(tr, pred=pred, scheduler=sched, max_batch=1)
        order[sched] = np.argsort(res.admit_s, kind="stable").tolist()
    assert order["fcfs"] == [0, 1, 2, 3]
    assert order["shortest"] == [0, 2, 3, 1]
    with pytest.raises(ConfigError, match="predictor"):
        _sim(tr, scheduler="shortest", max_batch=1)


@pytest.mark.parametrize("victim, preempted", [("latest-arrived", 1), ("most-memory", 0)])
def test_preemption_victim(victim, preempted):
    # A (200-token prompt) holds far more KV than B (10 tokens); 20 blocks of 16 run out
    tr = RequestTrace(np.array([0.0, 0.001]), np.array([200, 10]), np.array([100, 100]),
                      None, "victim")
    res, a = _sim(tr, cap_tokens=320, preemption_victim=victim, max_context_tokens=320)
    assert res.preemptions[preempted] > 0 and res.preemptions[1 - preempted] == 0
    assert res.metrics["requests_completed"] == 2 and a.counts["release"] == 2
    assert res.metrics["preemption_victim"] == victim


MODEL = resolve_model("deepseek-r1-distill-qwen-7b")
DEVICE = resolve_device("mlu370-x4")


def test_replicas_serve_with_chunked_prefill_and_slo():
    rng = np.random.default_rng(5)
    n = 240
    tr = RequestTrace(np.zeros(n), rng.integers(50, 3000, n), rng.integers(5, 300, n),
                      None, "synthetic", False, "")
    base = {"arrival_rate": 6.0, "max_context_tokens": 32768, "history_fraction": 0.5,
            "chunked_prefill": True, "slo_ttft_s": 2.0, "slo_tpot_s": 0.1}
    out = {}
    for reps in (1, 4):
        c = resolve_serving({**base, "deployment": {"replicas": reps,
                                                    "tensor_parallel": 4 // reps}}, "s")
        out[reps] = serve(tr, c, allocator="paged", model=MODEL, device=DEVICE,
                          cache=False).metrics
    one, four = out[1], out[4]
    assert four["replicas"] == 4 and sum(four["replica_requests"]) == 120
    for m in (one, four):
        assert m["requests_completed"] == 120 and m["mixed_iterations"] > 0
        assert m["itl_tokens"] == m["output_tokens"] - 120
        assert m["prefill_tokens_computed"] == m["prefill_tokens_total"]
        assert 0 <= m["slo_attainment"] <= 1 and m["itl_p99_s"] >= m["itl_p50_s"] > 0
        assert m["max_num_batched_tokens"] >= 2 * 256
    assert four["output_tokens"] == one["output_tokens"]


def test_default_budget_is_the_prefill_cost_rule_whatever_the_slo():
    """The smallest power-of-two budget (>= 2 x max_batch) whose prefill costs 2 batch-1
    decode steps: a linear prefill of 1 ms per 100 tokens and a 1 ms step need 200
    tokens -> 256; capped at the power of two above the longest request."""
    from h2m2sim.serving.timing import default_batched_tokens
    pre = lambda t: 1e-5 * t    # noqa: E731
    assert default_batched_tokens(pre, 1e-3, 8, 1 << 20) == 256
    assert default_batched_tokens(pre, 1.0, 8, 1000) == 1024
    assert default_batched_tokens(pre, 1e-9, 200, 1 << 20) == 512


class QuadraticPrefill(StepEval):
    """Prefill of one T-token prompt costs a + b T + c T^2 (causal attention is the T^2
    term); decode and mixed iterations as StepEval."""

    A, B, C = 1e-3, 1e-5, 1e-8

    def evaluate(self, phase, batch, ctx, layout):
        if phase == "prefill":
            t = float(np.mean(ctx))
            return batch * (self.A + self.B * t + self.C * t * t)
        return super().evaluate(phase, batch, ctx, layout)

    def cache_key(self):
        return {"quadratic": [self.A, self.B, self.C]}


def test_chunks_pay_attention_over_their_earlier_tokens():
    """A lone 2,048-token prompt in chunks of 256 costs what the whole prompt costs plus
    one token per extra chunk, f(2048) + 7 f(1), not 8 f(256): every chunk's queries
    attend to the chunks before it."""
    ev = QuadraticPrefill()
    f = lambda t: ev.A + ev.B * t + ev.C * t * t    # noqa: E731
    tr = RequestTrace(np.zeros(1), np.array([2048]), np.array([1]), None, "one")
    res, _ = _sim(tr, ev, chunked_prefill=True, budget=256, max_context_tokens=4096,
                  max_batch=8)
    ttft = res.first_token_s[0]
    assert ttft == pytest.approx(f(2048) + 7 * f(1), rel=0.02)
    assert ttft > 1.5 * 8 * f(256)

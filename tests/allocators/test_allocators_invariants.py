"""KV allocators: invariants under random reserve/grow/release sequences, layouts,
ODMA routing and migration, bucket quantiles, traffic generation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2m2sim.allocators import ALLOCATORS, BucketManager, ExtentHeap, make_allocator
from h2m2sim.allocators.odma import LARGE, WORST
from h2m2sim.allocators.traffic import kv_read_addresses, token_segments
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout

BPT = 64          # bytes per token in these tests
MAX_CTX = 256


def _make(name, cap_tokens=2048, **kw):
    opts = dict(max_context_tokens=MAX_CTX, base_address=1 << 20)
    if name == "paged":
        opts["block_tokens"] = kw.pop("block_tokens", 16)
    opts.update(kw)
    return make_allocator(name, cap_tokens * BPT, BPT, **opts)


ops = st.lists(st.tuples(st.sampled_from(["reserve", "grow", "release", "preempt"]),
                         st.integers(0, 11), st.integers(0, 120), st.integers(0, 200),
                         st.floats(0, 1)),
               min_size=1, max_size=80)


@pytest.mark.parametrize("name", ["static", "paged", "odma"])
@settings(max_examples=60, deadline=None)
@given(seq=ops, cap=st.integers(600, 3000))
def test_random_sequences_keep_invariants(name, seq, cap):
    a = _make(name, cap, **({"refresh_every": 3, "window": 8} if name == "odma" else {}))
    used, prompt_of = {}, {}
    for op, rid, prompt, pred, u in seq:
        if op == "reserve" and rid not in used:
            before = a.reserved_tokens
            if a.reserve(rid, prompt, predicted_output=float(pred), uncertainty=u):
                used[rid], prompt_of[rid] = prompt + 1, prompt
                assert a.capacity_of(rid) >= prompt + 1
            else:
                assert a.reserved_tokens == before     # a refusal changes nothing
        elif op == "grow" and rid in used:
            new = min(MAX_CTX, used[rid] + pred)
            cap_before, res_before = a.capacity_of(rid), a.reserved_tokens
            if a.grow(rid, new):
                used[rid] = new
                assert a.capacity_of(rid) >= new
            else:
                assert (a.capacity_of(rid), a.reserved_tokens) == (cap_before, res_before)
        elif op in ("release", "preempt") and rid in used:
            kv = used.pop(rid)
            a.release(rid, generated_tokens=kv - prompt_of[rid] if op == "release" else None,
                      completed=op == "release")
        a.check_invariants()
        assert a.reserved_tokens <= a.capacity_tokens
    for rid in list(used):
        a.release(rid, completed=False)
    a.check_invariants()
    assert a.reserved_tokens == 0 and a.free_tokens == a.capacity_tokens
    if name != "paged":  # everything coalesces back into one extent
        a._flush()
        assert a._heap.extents() == [(0, a._heap.total)]
    else:
        assert sorted(a._free) == list(range(a.n_blocks))


def test_registry_and_unknown_names():
    assert {"static", "paged", "odma"} <= set(ALLOCATORS)
    with pytest.raises(ConfigError, match="did you mean 'paged'"):
        make_allocator("pagd", 1 << 20, BPT)
    with pytest.raises(ConfigError, match="allocator.odma"):
        make_allocator("odma", 1 << 20, BPT, no_such_option=1)
    with pytest.raises(ConfigError, match="less than one"):
        make_allocator("static", 100 * BPT, BPT, max_context_tokens=4096)


def test_static_reserves_worst_case_and_never_grows():
    a = _make("static", 1024)
    assert a.reserve(0, 10)
    assert a.capacity_of(0) == MAX_CTX
    assert a.grow(0, MAX_CTX) and not a.grow(0, MAX_CTX + 1)
    for r in range(1, 4):
        assert a.reserve(r, 1)
    assert not a.reserve(9, 1)                       # 4 x 256 = 1024 tokens: full
    a.release(2, generated_tokens=5)
    assert a.reserve(9, 1) and a.counts["cache_hit"] == 1   # O(1) reuse of the freed slot
    assert a.extents(9)[0][0] == a.base_address + 2 * MAX_CTX * BPT
    s = make_allocator("static", 4096 * BPT, BPT, max_context_tokens=1024, max_new_tokens=100)
    assert s.reserve(0, 30) and s.capacity_of(0) == 144   # 130 rounded up to 16


def test_paged_layout_is_blocks_and_scatters_after_churn():
    a = _make("paged", 64 * 16)
    for r in range(6):
        assert a.reserve(r, 20)           # 2 blocks each
    for r in (1, 3):
        a.release(r, generated_tokens=0)
    assert a.reserve(10, 60)              # 4 blocks: reuses freed blocks first
    blocks = a.block_ids(10)
    assert blocks[:4] == [6, 7, 2, 3] or len(set(blocks)) == 4
    base, ln = a.extents(10)
    assert np.all(ln == 16 * BPT) and len(base) == 4
    assert np.any(np.diff(base.astype(np.int64)) != 16 * BPT)   # not one contiguous run
    a.check_invariants()


def test_paged_watermark_blocks_admission_not_growth():
    a = make_allocator("paged", 100 * 16 * BPT, BPT, max_context_tokens=256, watermark=0.1)
    n = 0
    while a.reserve(n, 15):
        n += 1
    assert a.free_tokens // 16 == 10      # 10 % of 100 blocks kept back at admission
    assert a.grow(0, 16 * 5)              # but running requests may use them


def test_odma_routing_inflation_and_tau():
    a = _make("odma", 8192, initial_boundaries=(32, 64, 128, 192))
    # basis 'total': footprint = prompt + L(1 + gamma u) -> smallest bound >= it
    assert a.route(10, 20, 0.0)[:2] == (0, 32)
    assert a.route(10, 20, 0.5)[:2] == (0, 32)         # 10 + 22 = 32
    assert a.route(10, 20, 0.6)[:2] == (1, 64)         # 10 + 22.4 > 32
    # no length seen yet: no large bucket, so beyond the regular ones is the worst case
    assert a.route(10, 20, 0.81)[:2] == (WORST, MAX_CTX)     # u > tau
    assert a.route(10, 500, 0.0) == (WORST, MAX_CTX, "large_no_bucket")
    o = _make("odma", 8192, basis="output", initial_boundaries=(32, 64))
    assert o.route(10, 20, 0.0)[:2] == (0, 48)         # prompt + b_0, rounded to 16


def test_odma_migration_event_and_accuracy():
    a = _make("odma", 8192, initial_boundaries=(32, 64, 128, 192))
    assert a.reserve(1, 10, predicted_output=15, uncertainty=0.0)
    assert a.capacity_of(1) == 32
    src = int(a.extents(1)[0][0])
    assert a.grow(1, 32)                               # still fits: no event
    assert a.grow(1, 33)                               # overflow -> large bucket
    ev = [e for e in a.events if e.kind == "migrate"]
    assert len(ev) == 1 and ev[0].nbytes == 32 * BPT and ev[0].src == src
    assert a.capacity_of(1) == MAX_CTX and int(a.extents(1)[0][0]) == ev[0].dst != src
    a.release(1, generated_tokens=40)
    assert a.reserve(2, 10, predicted_output=10, uncertainty=0.0)
    a.release(2, generated_tokens=5)
    st_ = a.stats()
    assert st_["predictor_accuracy"] == 0.5 and st_["migration_rate"] == 0.5
    assert a.kv_utilization() == pytest.approx((50 + 15) / (MAX_CTX + 32))


def test_odma_buckets_follow_recent_lengths_and_apply_to_new_requests():
    a = _make("odma", 1 << 15, window=8, refresh_every=4, initial_boundaries=(100,))
    assert a.reserve(99, 0, predicted_output=50)       # in flight across the refresh
    assert a.capacity_of(99) == 112
    for i, g in enumerate([10, 20, 30, 40]):
        assert a.reserve(i, 0, predicted_output=g)
        a.release(i, generated_tokens=g)
    assert a.buckets.boundaries == (16, 32, 48)        # quantiles 10,20,30,40 aligned to 16
    assert a.capacity_of(99) == 112                     # untouched
    assert a.reserve(5, 0, predicted_output=25) and a.capacity_of(5) == 32
    assert [e.kind for e in a.events].count("refresh") == 1


def test_bucket_manager_quantiles_and_window():
    m = BucketManager(num_buckets=4, window=100, refresh_every=100, align=1,
                      quantiles=(0.25, 0.5, 0.75, 1.0))
    for x in range(1, 101):
        m.observe(x)
    assert m.boundaries == (25, 50, 75, 100)
    for x in range(1001, 1101):                        # window slides past the old values
        m.observe(x)
    assert m.boundaries == (1025, 1050, 1075, 1100)
    assert m.choose(1050) == 1 and m.choose(1050.5) == 2 and m.choose(2000) == -1
    m2 = BucketManager(num_buckets=2, quantiles=(0.9, 1.0), refresh_every=10, align=16)
    for x in [1] * 9 + [500]:
        m2.observe(x)
    assert m2.boundaries == (16, 512)
    with pytest.raises(ConfigError, match="odma.quantiles"):
        BucketManager(num_buckets=2, quantiles=(0.5,))


def test_odma_starts_from_the_history_not_from_constants():
    a = _make("odma", 1 << 14)
    assert a.buckets.boundaries == () and a.buckets.large is None
    assert a.route(10, 20)[:2] == (WORST, MAX_CTX)          # nothing learned: worst case
    rng = np.random.default_rng(1)
    prompts = rng.integers(1, 40, 2000)
    outputs = rng.integers(1, 100, 2000)
    a.learn_lengths(prompts, outputs)
    totals = prompts + outputs
    b = a.buckets.boundaries
    assert len(b) == 4 and b[-1] >= np.quantile(totals, 0.99) - 16
    assert b[0] >= totals.min() and a.buckets.large <= MAX_CTX
    assert a.buckets.large == -(-int(np.quantile(totals, 0.999,
                                                 method="inverted_cdf")) // 16) * 16
    i, ext, why = a.route(5, 30)
    assert why == "regular" and ext == min(x for x in b if x >= 35)


def test_odma_large_bucket_then_doublings_then_worst_case():
    a = _make("odma", 1 << 14)
    a.learn_lengths(np.full(1000, 10), np.r_[np.full(990, 10), np.full(10, 30)])
    assert a.buckets.boundaries == (32,) and a.buckets.large == 48      # tail: 1 %
    assert a.route(8, 80, 0.0)[:2] == (LARGE, 96)           # a prediction past it: doubled
    assert a.route(8, 500, 0.0)[:2] == (WORST, MAX_CTX)     # capped by the context
    assert a.reserve(1, 8, predicted_output=10)
    sizes = [a.capacity_of(1)]
    for need in (33, 49, 97, 193, 256):
        assert a.grow(1, need)
        sizes.append(a.capacity_of(1))
    assert sizes == [32, 48, 96, 192, 256, 256]
    assert [e.kind for e in a.events].count("migrate") == 4
    assert not a.grow(1, 257)


def test_bucket_bounds_by_least_reservation_follow_clusters():
    """Without quantile levels the bounds are the least-reservation sizes of the window:
    on two clusters they sit at each cluster's top, where fixed levels would not."""
    m = BucketManager(num_buckets=2, window=1000, refresh_every=1000, align=1)
    m.seed(np.concatenate([np.full(700, 50), np.full(300, 1000)]))
    assert m.boundaries == (50, 1000)
    q = BucketManager(num_buckets=2, window=1000, refresh_every=1000, align=1,
                      quantiles=(0.5, 0.9))
    q.seed(np.concatenate([np.full(700, 50), np.full(300, 1000)]))
    assert q.boundaries == (50, 1000)
    m3 = BucketManager(num_buckets=1, window=1000, refresh_every=1000, align=1,
                       regular_quantile=0.5)
    m3.seed(np.arange(1, 1001))
    assert m3.boundaries == (500,) and m3.large == 999


def test_extent_heap_first_fit_and_coalescing():
    h = ExtentHeap(100)
    offs = [h.alloc(10) for _ in range(5)]
    assert offs == [0, 10, 20, 30, 40]
    h.free(10, 10)
    h.free(30, 10)
    assert h.alloc(15) == 50 and h.alloc(10) == 10
    h.free(20, 10)
    h.free(10, 10)                    # joins 20..30 and the still-free 30..40
    assert (10, 30) in h.extents() and h.free_tokens == 100 - 35
    with pytest.raises(AssertionError, match="double free"):
        h.free(12, 2)


def test_read_addresses_contiguous_vs_paged():
    c = _make("static", 1024)
    c.reserve(0, 0)
    addr = kv_read_addresses(c, [0], [20], planes=2, access_bytes=32)
    assert len(addr) == 20 * BPT // 32
    first_plane = addr[: len(addr) // 2].astype(np.int64)
    assert np.all(np.diff(first_plane) == 32)          # one streaming run per plane
    p = _make("paged", 1024, block_tokens=4)
    for r in range(3):
        p.reserve(r, 3)
    p.release(1, generated_tokens=0)
    p.reserve(5, 7)
    s, n = token_segments(p, 5, 7)
    assert n.tolist() == [4, 3] and s.tolist() == [4, 12]
    addr = kv_read_addresses(p, [5], [7], access_bytes=64)
    assert len(addr) == 7 and np.count_nonzero(np.diff(addr.astype(np.int64)) != 64) == 1


def test_sample_layout_reads_contiguous_streams_paged_scatters():
    from h2m2sim.allocators.traffic import sample_layout_reads
    ctx = [100, 1000, 37]
    c = sample_layout_reads(CONTIGUOUS, ctx, 2048, planes=2)
    p = sample_layout_reads(KVLayout.paged(16), ctx, 2048, planes=2, seed=3)
    assert len(c) == len(p) == sum(ctx) * 2048 // 64          # same bytes read
    assert len(np.unique(p)) == len(p)                          # no token read twice
    jumps = lambda a: np.count_nonzero(np.diff(a.astype(np.int64)) != 64)  # noqa: E731
    assert jumps(c) == 3 * 2 - 1                                # one run per request-plane
    assert jumps(p) > 100                                       # ~one run per block-plane
    assert np.array_equal(p, sample_layout_reads(KVLayout.paged(16), ctx, 2048, planes=2, seed=3))
    assert jumps(sample_layout_reads(KVLayout.paged(256), ctx, 2048, planes=2)) < jumps(p)

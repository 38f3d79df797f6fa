"""eLLM allocator: chunk conservation, lazy inflation/deflation of idle chunks only, the
static split's fixed partitions, the CPU buffer and the host-link price; hypothesis
property over random operation sequences."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2m2sim.allocators import ALLOCATORS, make_allocator
from h2m2sim.allocators.ellm import ElasticAllocator, HostLinkSpec
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

CH = 1024            # chunk bytes in these tests
BPT = 64             # KV bytes per token -> 16 tokens per chunk


def _alloc(chunks=100, reserve_chunks=40, elastic=True, buf=0, **kw):
    kw.setdefault("watermark", 0.0)
    kw.setdefault("max_context_tokens", 16 * (chunks if elastic else chunks - reserve_chunks))
    a = make_allocator("ellm", chunks * CH, BPT, chunk_bytes=CH, elastic=elastic,
                       cpu_buffer_bytes=buf, **kw)
    a.set_activation_reserve(reserve_chunks * CH)
    return a


def _conserved(a):
    s = a.pool_state()
    assert s["act_used"] + s["act_free"] + s["kv_used"] + s["kv_free"] == s["total"]
    a.check_invariants()


def test_registered_and_initial_split():
    assert ALLOCATORS["ellm"] is ElasticAllocator
    a = _alloc()
    assert a.pool_state() == {"act_used": 0, "act_free": 40, "kv_used": 0, "kv_free": 60,
                              "total": 100}
    assert a.block_tokens == 16 and a.kv_layout == KVLayout.paged(16)
    _conserved(a)


def test_inflation_borrows_only_idle_activation_chunks():
    a = _alloc()
    assert a.set_activation(10 * CH)               # 10 chunks of live activations
    assert a.reserve(0, 16 * 60 - 1)               # fills the KV pool exactly (60 chunks)
    assert a.counts["inflate"] == 0 and a.borrowed_chunks == 0
    assert a.grow(0, 16 * 70)                      # 10 more: borrowed from idle act chunks
    assert a.counts["inflated_chunks"] == 10 and a.borrowed_chunks == 10
    assert a.act_used_chunks == 10 and a.act_free_chunks == 20
    # 20 idle activation chunks remain; the 10 live ones can never be taken
    assert a.free_blocks == 20
    assert not a.grow(0, 16 * 91)                  # would need 21
    assert a.act_used_chunks == 10
    assert a.grow(0, 16 * 90)
    assert a.act_free_chunks == 0 and a.act_used_chunks == 10
    _conserved(a)


def test_deflation_returns_free_kv_chunks_lazily():
    a = _alloc()
    assert a.reserve(0, 16 * 80 - 1)                 # 80 chunks: 20 borrowed
    assert a.borrowed_chunks == 20
    a.release(0)
    # lazy: freed chunks stay with the KV pool until activations need them
    assert a.borrowed_chunks == 20 and a.act_free_chunks == 20
    assert a.set_activation(35 * CH)               # 20 idle + 15 deflated from free KV
    assert a.counts["deflated_chunks"] == 15 and a.borrowed_chunks == 5
    assert a.set_activation(0)                     # shrinking keeps them in the act pool
    assert a.act_free_chunks == 35 and a.borrowed_chunks == 5
    _conserved(a)


def test_deflation_never_takes_used_kv():
    a = _alloc()
    assert a.reserve(0, 16 * 90 - 1)
    assert not a.set_activation(11 * CH)           # 10 chunks free in total
    assert a.counts["act_deny"] == 1 and a.act_used_chunks == 0
    assert a.set_activation(10 * CH)
    _conserved(a)


def test_static_split_never_exceeds_its_partitions():
    a = _alloc(elastic=False)
    assert a.free_blocks == 60
    assert a.reserve(0, 16 * 60 - 1)
    assert not a.reserve(1, 1) and not a.grow(0, 16 * 61)
    assert not a.set_activation(41 * CH) and a.set_activation(40 * CH)
    assert a.act_owned_chunks == 40 and a.kv_owned_chunks == 60
    assert a.counts["inflate"] == a.counts["deflate"] == 0
    _conserved(a)


def test_static_split_needs_room_for_one_request():
    a = make_allocator("ellm", 100 * CH, BPT, chunk_bytes=CH, elastic=False,
                       max_context_tokens=16 * 70)
    with pytest.raises(ConfigError, match="static split"):
        a.set_activation_reserve(40 * CH)


def test_fits_is_algorithm1_test():
    a = _alloc(watermark=0.0)
    assert a.fits(100 - 5, 5 * CH) and not a.fits(96, 5 * CH)
    assert a.set_activation(5 * CH) and a.fits(95, 5 * CH)   # current activations replaced
    s = _alloc(elastic=False)
    assert s.fits(60, 40 * CH) and not s.fits(61, 0) and not s.fits(0, 41 * CH)


def test_host_link_transfer_time():
    link = HostLinkSpec()
    assert link.bandwidth_GBps == 25.0
    assert link.transfer_s(0) == 0.0
    assert link.transfer_s(25 * 10**9) == pytest.approx(1.0 + link.latency_s)
    a = _alloc(buf=10_000, host_link={"bandwidth_GBps": 1e-6, "latency_s": 0.5})
    assert a.offload(7, 100) and a.cpu_used_bytes == 6400
    assert not a.offload(8, 100)                    # 3600 bytes left
    dt = a.fetch(7, 101)
    assert dt == pytest.approx(6400 / 1e3 + 0.5)    # bytes / (1e-6 GB/s) + latency
    assert a.cpu_used_bytes == 0 and a.holds(7) and a.capacity_of(7) >= 101
    _conserved(a)


def test_fetch_without_device_room_changes_nothing():
    a = _alloc(buf=10**6)
    assert a.reserve(0, 16 * 100 - 1)               # the whole pool
    assert a.offload(1, 32)
    assert a.fetch(1, 33) is None
    assert a.is_offloaded(1) and a.cpu_used_bytes == 32 * BPT
    _conserved(a)


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="watermark"):
        make_allocator("ellm", 100 * CH, BPT, chunk_bytes=CH, watermark=1.5)
    with pytest.raises(ConfigError, match="host_link.bandwidth_GBps"):
        make_allocator("ellm", 100 * CH, BPT, chunk_bytes=CH,
                       host_link={"bandwidth_GBps": -1})
    with pytest.raises(ConfigError, match="allocator.ellm"):
        make_allocator("ellm", 100 * CH, BPT, nonsense=1)


ops = st.lists(st.tuples(st.sampled_from(["reserve", "grow", "release", "act", "offload",
                                           "fetch"]),
                         st.integers(0, 7), st.integers(1, 400)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops=ops, elastic=st.booleans(), reserve=st.integers(0, 60))
def test_pool_invariants_hold_under_random_operations(ops, elastic, reserve):
    a = make_allocator("ellm", 100 * CH, BPT, chunk_bytes=CH, elastic=elastic,
                       cpu_buffer_bytes=20_000, watermark=0.02, max_context_tokens=400)
    a.set_activation_reserve(reserve * CH)
    act0 = a.act_owned_chunks
    for op, r, n in ops:
        used_act = a.act_used_chunks
        if op == "reserve" and not a.holds(r) and not a.is_offloaded(r):
            a.reserve(r, n - 1, need_tokens=n)
        elif op == "grow" and a.holds(r):
            a.grow(r, min(400, a.capacity_of(r) + n))
        elif op == "release" and a.holds(r):
            a.release(r)
        elif op == "act":
            a.set_activation(n * CH // 8)
        elif op == "offload" and not a.holds(r) and not a.is_offloaded(r):
            a.offload(r, n)
        elif op == "fetch" and a.is_offloaded(r):
            a.fetch(r, min(400, n + 1))
        if op != "act":          # only set_activation changes live activations
            assert a.act_used_chunks == used_act
        _conserved(a)
        assert a.cpu_used_bytes <= a.cpu_buffer_bytes
        if not elastic:
            assert a.act_owned_chunks == act0
            assert a.kv_used_chunks <= 100 - act0

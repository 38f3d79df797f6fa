"""A second KV tier under the prefix cache: evicted prefix blocks are demoted to host or
CXL memory and hits there are promoted back over its link, so the hit rate climbs toward
what unbounded device memory would give; the rates by tier add up to it."""
from __future__ import annotations

import json

import pytest

from dram_models.spec import load_standard
from h2m2sim.allocators import make_allocator
from h2m2sim.errors import ConfigError
from h2m2sim.cli import main
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.links import kv_link
from h2m2sim.serving.kv_tier import LowerTier
from h2m2sim.serving.replay import Replay
from h2m2sim.serving.traces import prefix_reuse_trace
from tests.serving.test_prefix_cache import BLOCK, BLOCKS, BPT, CTX, _tables


def _tier(blocks: int, policy: str = "lru") -> LowerTier:
    lp = load_standard("lpddr5-6400")
    return LowerTier("host-ddr5", blocks * BLOCK, kv_link("pcie5-x16"), lp,
                     load_standard("ddr5-4800"), BPT, policy)


def _serve(trace, cap_tokens, tier=None, **cfg):
    cfg = ServingConfig(max_batch=16, max_context_tokens=CTX, prefix_block_tokens=BLOCK,
                        prefix_caching=True, **cfg)
    a = make_allocator("paged", cap_tokens * BPT, BPT, max_context_tokens=CTX)
    loop = Replay(trace, cfg, a, _tables(), lower_tier=tier)
    loop.engine.kv.prefix.check = True
    return loop.run().metrics


def test_a_lower_tier_restores_the_hits_small_device_memory_loses():
    """Eight prefixes in turn, each request alone: the device holds a couple of prompts,
    so a prefix is evicted before its next use; a tier that holds every block demoted
    keeps them all (least recently used: the requests' own tails are demoted too)."""
    n, ratio = 80, 0.75
    tr = prefix_reuse_trace(n, ratio, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=8,
                            output_tokens=4, arrival_rate=0.5, seed=3)
    ideal = _serve(tr, 10**6)["prefix_hit_rate"]
    small = _serve(tr, 2 * CTX)
    tiered = _serve(tr, 2 * CTX, _tier(n * BLOCKS))
    assert small["prefix_hit_rate"] < 0.5 * ideal
    assert tiered["prefix_hit_rate"] == pytest.approx(ideal, rel=1e-9)
    by = tiered["prefix_hit_rate_by_tier"]
    assert set(by) == {"device", "host-ddr5"} and by["host-ddr5"] > 0
    assert sum(by.values()) == pytest.approx(tiered["prefix_hit_rate"], rel=1e-12)
    assert tiered["promoted_bytes"] > 0 and tiered["offload_bytes"] >= tiered[
        "promoted_bytes"]
    assert tiered["offload_energy_j"] > 0
    # a tier too small for a prefix between its uses helps little
    tiny = _serve(tr, 2 * CTX, _tier(BLOCKS))
    assert small["prefix_hit_rate"] <= tiny["prefix_hit_rate"] < tiered["prefix_hit_rate"]
    assert tiny["offload_evictions"] > 0


def test_prefix_aware_keeps_the_shared_prefixes_a_small_tier_loses_to_tails():
    """Each request demotes its own two-block tail too: in a tier of 24 blocks LRU lets
    the tails push the shared prefixes out; prefix-aware eviction drops the tails (used
    once) first."""
    tr = prefix_reuse_trace(120, 0.75, prompt_blocks=BLOCKS, block_tokens=BLOCK,
                            prefixes=8, output_tokens=4, arrival_rate=0.5, seed=3)
    lru = _serve(tr, 2 * CTX, _tier(24, "lru"))["prefix_hit_rate"]
    aware = _serve(tr, 2 * CTX, _tier(24, "prefix-aware"))["prefix_hit_rate"]
    ideal = _serve(tr, 10**6)["prefix_hit_rate"]
    assert lru < aware <= ideal + 1e-12


def test_swapped_requests_hold_room_in_the_tier_or_are_recomputed():
    """Swap preemption with a tier: the preempted KV crosses the tier's link (PCIe 5,
    63 GB/s, against the 32 GB/s host link without a tier) and holds its room there
    until it returns; a tier too small for it makes the preemption a recomputation."""
    tr = prefix_reuse_trace(150, 0.5, prompt_blocks=BLOCKS, block_tokens=BLOCK,
                            prefixes=6, output_tokens=40, arrival_rate=400.0, seed=3)
    host = _serve(tr, 4 * CTX, preemption="swap")
    big = _serve(tr, 4 * CTX, _tier(1000), preemption="swap")
    tiny = _serve(tr, 4 * CTX, _tier(1), preemption="swap")
    assert host["preemptions"] > 0 and host["swap_bytes"] > 0
    # swap_bytes counts both crossings, out and back
    assert 2 * big["offload_swap_bytes"] == big["swap_bytes"] > 0
    link = kv_link("pcie5-x16")
    per_byte = big["time_breakdown_s"]["swap_time_s"] / big["swap_bytes"]
    assert 1 / (link.GBps * 1e9) < per_byte < 1 / (32e9)
    assert tiny["offload_swap_bytes"] == tiny["swap_bytes"] == 0
    assert tiny["preemptions"] > 0
    for m in (host, big, tiny):
        assert m["requests_completed"] == 150


def test_a_copy_between_tiers_costs_its_link_and_both_memories():
    t, link = _tier(64), kv_link("pcie5-x16")
    s = link.transfer_s(1000 * BPT)
    assert t.energy_j(1000 * BPT, s) > link.energy_j(1000 * BPT) > 0


SERVE = ["serve", "--trace", "mooncake2025_conv", "--system", "mlu370-x4", "--model",
         "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator", "analytic",
         "--max-requests", "1000", "--rate", "1", "--prefix-caching", "--json"]


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


@pytest.mark.usefixtures("_cache")
def test_mooncake_hits_climb_to_the_unbounded_ideal_with_a_host_tier(capsys):
    def serve(*extra):
        assert main([*SERVE, *extra]) == 0
        return json.loads(capsys.readouterr().out)
    ideal = serve("--kv-capacity", "10TB")["prefix_hit_rate"]
    small = serve("--kv-capacity", "20GB")
    tiered = serve("--kv-capacity", "20GB", "--kv-offload", "host-ddr5",
                   "--kv-offload-capacity", "1TB")
    assert small["prefix_hit_rate"] < 0.5 * ideal
    assert tiered["prefix_hit_rate"] > 0.95 * ideal
    assert sum(tiered["prefix_hit_rate_by_tier"].values()) == pytest.approx(
        tiered["prefix_hit_rate"], rel=1e-12)
    assert tiered["requests_completed"] == 1000
    assert tiered["ttft_p50_s"] < small["ttft_p50_s"]


@pytest.mark.usefixtures("_cache")
@pytest.mark.parametrize("extra, words", [
    (["--kv-offload", "host-ddr5"], "--kv-offload-capacity: is needed with --kv-offload"),
    (["--kv-offload", "host-dd5", "--kv-offload-capacity", "1TB"], "did you mean"),
])
def test_bad_tiers_are_refused(capsys, extra, words):
    assert main([*SERVE, *extra]) == 2
    assert words in capsys.readouterr().err


def test_the_lpddr_side_of_h2m2_is_a_tier_behind_a_faster_link():
    """H2M2's LPDDR side as the tier: the same hits as host memory (capacity decides
    them), each promotion over the 960 GB/s chip link instead of PCIe's 63 GB/s, so
    requests wait less for their prefixes and the copies cost less energy."""
    from h2m2sim.serving.links import TIERS
    preset = TIERS.get("h2m2-lpddr")
    link = kv_link(preset.link)
    assert (link.GBps, link.latency_us) == (960.0, 0.5)
    assert link.transfer_s(1e9) < kv_link("pcie5-x16").transfer_s(1e9) / 10
    n, ratio = 80, 0.75
    tr = prefix_reuse_trace(n, ratio, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=8,
                            output_tokens=4, arrival_rate=0.5, seed=3)
    lp = load_standard("lpddr5-6400")
    side = LowerTier("h2m2-lpddr", n * BLOCKS * BLOCK, link, lp,
                     load_standard(preset.dram), BPT)
    host = _serve(tr, 2 * CTX, _tier(n * BLOCKS))
    lpddr = _serve(tr, 2 * CTX, side)
    assert lpddr["prefix_hit_rate_by_tier"]["h2m2-lpddr"] == \
        host["prefix_hit_rate_by_tier"]["host-ddr5"] > 0
    assert lpddr["promoted_bytes"] == host["promoted_bytes"] > 0
    assert lpddr["ttft_p99_s"] < host["ttft_p99_s"]
    assert lpddr["offload_energy_j"] < host["offload_energy_j"]


def test_running_requests_go_cold_in_the_tier_instead_of_being_preempted():
    """kv_offload_running: where a preemption would recompute, the victim's KV moves to
    the tier and it keeps decoding, reading its KV back over the tier's link before each
    step: no recomputation, every request once, and the steps slower by the reads."""
    tr = prefix_reuse_trace(150, 0.5, prompt_blocks=BLOCKS // 2, block_tokens=BLOCK,
                            prefixes=6, output_tokens=300, arrival_rate=400.0, seed=3)
    plain = _serve(tr, 4 * CTX, _tier(100_000))
    cold = _serve(tr, 4 * CTX, _tier(100_000), kv_offload_running=True)
    assert plain["preemptions"] > 100 and plain["cold_requests"] == 0
    assert cold["preemptions"] == 0 and cold["cold_requests"] > 50
    assert cold["requests_completed"] == plain["requests_completed"] == 150
    assert cold["duration_s"] < plain["duration_s"]     # the batch is not cut back
    assert cold["prefill_tokens_total"] < plain["prefill_tokens_total"]   # no recompute
    link = kv_link("pcie5-x16")
    fetch_s = cold["time_breakdown_s"]["cold_fetch_time_s"]
    assert fetch_s >= cold["cold_fetch_bytes"] / (link.GBps * 1e9) > 0
    assert cold["offload_energy_j"] > plain["offload_energy_j"]
    # a tier that cannot hold a request's whole KV leaves it to preemption
    tiny = _serve(tr, 4 * CTX, _tier(1), kv_offload_running=True)
    assert tiny["cold_requests"] == 0
    assert tiny["preemptions"] == _serve(tr, 4 * CTX, _tier(1))["preemptions"] > 0


def test_cold_reads_cost_their_closed_form():
    """One step of n cold requests holding c tokens reads c x bytes per token over the
    link after its latency; k steps read k c + n k (k - 1) / 2 tokens."""
    tr = prefix_reuse_trace(4, 0.0, prompt_blocks=BLOCKS, block_tokens=BLOCK, prefixes=1,
                            output_tokens=4, arrival_rate=1.0, seed=1)
    cfg = ServingConfig(max_batch=16, max_context_tokens=CTX, prefix_block_tokens=BLOCK,
                        prefix_caching=True, kv_offload="host-ddr5",
                        kv_offload_capacity_bytes=10**9, kv_offload_running=True)
    a = make_allocator("paged", 10 * CTX * BPT, BPT, max_context_tokens=CTX)
    kv = Replay(tr, cfg, a, _tables(), lower_tier=_tier(100)).engine.kv
    link = kv_link("pcie5-x16")
    s, first, got = kv.cold_fetch(3, 1000.0, 2)
    read = BPT * (3 * 1000 + 2 * 3)
    assert s == pytest.approx(3 * link.latency_us * 1e-6 + read / (link.GBps * 1e9))
    assert first == pytest.approx(link.transfer_s(1000 * BPT))
    assert got == read
    # the bytes read back, and the 2 x 3 new tokens' KV written there, cross the link
    assert kv.tier.stats["copy_bytes"] == read + 2 * 3 * BPT
    assert kv.cold_fetch(0, 1000.0, 2) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("extra", [{}, {"chunked_prefill": True}])
def test_cold_kv_needs_a_tier_and_plain_decode_steps(extra):
    from dram_models.schema import load
    tier = {"kv_offload": "host-ddr5", "kv_offload_capacity_bytes": 10**9} if extra else {}
    with pytest.raises(ConfigError, match="kv_offload_running"):
        load(ServingConfig, {"prefix_caching": True, "kv_offload_running": True,
                             **tier, **extra})

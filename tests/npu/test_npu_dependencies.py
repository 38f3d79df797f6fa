"""Dependency-driven execution of graph kernels on one chip: independent kernels
overlap, dependent ones keep their barrier, and the TLB carries from kernel to kernel."""
from __future__ import annotations

import dataclasses

import pytest

from h2m2sim.decode.iteration import layer_kernels
from h2m2sim.model import load_model
from h2m2sim.npu.simulate import is_chain, kernel_dependencies, run_kernels
from h2m2sim.system.config import resolve_system


@pytest.fixture(scope="module")
def attention():
    """Per-request attention kernels (score, softmax, value) of two Llama2 requests."""
    system = resolve_system("h2m2", "system")
    model = load_model("llama2-70b")
    per, _ = layer_kernels(model, 2, 512, {"qkv": 0, "attention": 2, "fc": 0},
                           system.side_names)
    ks = [k for k in per[("hbm", "attention")] if k.request is not None]
    return system, {(k.request, k.op): k for k in ks}


def test_dependencies_follow_the_tensors(attention):
    _, k = attention
    ks = [k[(0, "attn_score")], k[(0, "softmax")], k[(1, "attn_score")],
          k[(0, "attn_value")]]
    # the value reads the probabilities, a view of the scores both earlier kernels write
    assert kernel_dependencies(ks) == [[], [0], [], [0, 1]]
    assert not is_chain(kernel_dependencies(ks))
    assert is_chain(kernel_dependencies(ks[:2]))


def test_independent_kernels_on_different_units_overlap(attention):
    system, k = attention
    a, b = k[(0, "attn_value")], k[(1, "softmax")]     # MV/MM unit and vector unit
    ta = run_kernels(system, "hbm", [a], translate="ideal").time_ns
    tb = run_kernels(system, "hbm", [b], translate="ideal").time_ns
    both = run_kernels(system, "hbm", [a, b], translate="ideal")
    assert both.time_ns < 0.9 * (ta + tb)
    # the second kernel started before the first ended
    ka, kb = both.kernels
    assert kb["start_ns"] < ka["start_ns"] + ka["time_ns"]


def test_dependent_kernels_do_not_overlap(attention):
    system, k = attention
    a, b = k[(0, "attn_score")], k[(0, "softmax")]
    ta = run_kernels(system, "hbm", [a], translate="ideal").time_ns
    tb = run_kernels(system, "hbm", [b], translate="ideal").time_ns
    both = run_kernels(system, "hbm", [a, b], translate="ideal")
    ka, kb = both.kernels
    assert kb["start_ns"] >= ka["start_ns"] + ka["time_ns"] - 1e-6
    # sequential: the sum of the two alone (plus the barrier's flag read)
    assert both.time_ns == pytest.approx(ta + tb, rel=0.1)
    assert both.time_ns >= 0.97 * (ta + tb)


def test_tlb_carries_across_kernels(attention):
    system, k = attention
    a = k[(0, "attn_score")]
    once = run_kernels(system, "hbm", [a])
    twice = run_kernels(system, "hbm", [a, a])
    assert once.tlb_misses > 0
    # the second kernel touches the same pages: no new fill
    assert twice.tlb_misses == once.tlb_misses
    warm = run_kernels(system, "hbm", [a], warm=list(a.operands) + list(a.outputs))
    assert warm.tlb_misses == 0 and warm.tlb_hits > 0


def test_packed_kv_shares_pages_across_requests(attention):
    """Two requests' K (and V) of 128 KiB each: per-request tensors take a page each,
    packed they share one, so the run fills fewer pages."""
    system, k = attention
    ks = [k[(r, op)] for r in (0, 1) for op in ("attn_score", "softmax", "attn_value")]
    per_req = run_kernels(system, "hbm", ks)
    packed_sys = dataclasses.replace(system, mmu=dataclasses.replace(system.mmu,
                                                                     kv_layout="packed"))
    packed = run_kernels(packed_sys, "hbm", ks)
    # K and V: a page each per request (4), packed one K page and one V page (2)
    assert per_req.tlb_misses - packed.tlb_misses >= 2
    assert packed.bytes == pytest.approx(per_req.bytes, rel=1e-3)

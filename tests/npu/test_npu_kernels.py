"""Closed-loop kernel simulation: compute-bound GEMM near the array's ideal, memory-bound
GEMV near the side's streaming bandwidth, sampled vs cycle fidelity, translation cost,
determinism, graph kernels back to back, errors."""
import dataclasses

import pytest

from dram_models.errors import ConfigError
from h2m2sim.memory.dram import measure_stream
from h2m2sim.memory.system_memory import SystemMemory
from h2m2sim.model import partition_layer, kernels as graph_kernels
from h2m2sim.npu import run_kernel, run_kernels, simulate_kernel
from h2m2sim.npu.units import ideal_mm_cycles
from h2m2sim.system import load_system_preset, resolve_system

SMALL = {"preset": "h2m2", "sides": {"hbm": {"channels": 4, "capacity_bytes": "4 GiB"},
                                     "lpddr": {"channels": 2, "capacity_bytes": "4 GiB"}},
         "mmu": {"virtual_bytes": "64 GiB"}}


@pytest.fixture(scope="module")
def small():
    return resolve_system(SMALL)


@pytest.fixture(scope="module")
def h2m2():
    return load_system_preset("h2m2")


def test_gemm_is_compute_bound_within_margin_of_ideal(h2m2):
    m, k, n = 2048, 2048, 2048
    r = simulate_kernel(h2m2, "hbm", "gemm", m, k, n, fidelity="sampled")
    chip = h2m2.side("hbm").chip
    ideal_ns = ideal_mm_cycles(chip, m, k, n) / chip.cores * chip.cycle_ns
    assert r.compute_bound and r.unit == "mm"
    assert r.time_ns >= r.compute_ns >= ideal_ns
    # margin: preload + fill/drain per tile (analytic, in compute_ns) plus the exposed
    # first loads and last result writes
    assert r.time_ns <= 1.04 * ideal_ns
    assert r.time_ns - r.compute_ns < 0.03 * r.time_ns
    assert r.achieved_gbps < r.peak_gbps


@pytest.mark.parametrize("side", ["hbm", "lpddr"])
def test_gemv_is_memory_bound_near_streaming_bandwidth(small, side):
    stream = measure_stream(small.side(side)).gbps
    r = simulate_kernel(small, side, "gemv", 1, 4096, 4096)
    assert not r.compute_bound and r.unit == "mv"
    assert r.achieved_gbps <= r.peak_gbps
    assert r.achieved_gbps >= 0.93 * stream
    assert r.bytes >= 4096 * 4096


@pytest.mark.parametrize("side, op, m, k, n, batch", [
    ("hbm", "gemv", 1, 4096, 4096, 1),
    ("lpddr", "gemv", 1, 4096, 6144, 1),
    ("hbm", "gemm", 512, 1024, 4096, 1),
    ("lpddr", "attention", 8, 128, 8192, 8),
])
def test_sampled_matches_cycle(small, side, op, m, k, n, batch):
    full = simulate_kernel(small, side, op, m, k, n, batch=batch)
    samp = simulate_kernel(small, side, op, m, k, n, batch=batch, fidelity="sampled")
    assert samp.simulated_fraction < 0.5 or full.tiles < 32 * 4
    assert abs(samp.time_ns / full.time_ns - 1) < 0.03
    assert samp.bytes == pytest.approx(full.bytes, rel=0.01)
    assert samp.compute_bound == full.compute_bound


def test_sampled_matches_cycle_compute_bound():
    # one core: long tile chains of a compute-bound batched GEMM
    one = resolve_system({**SMALL, "sides": {"hbm": {**SMALL["sides"]["hbm"],
                                                     "chip": {"cores": 1}}}})
    full = simulate_kernel(one, "hbm", "gemm", 256, 512, 512, batch=64)
    samp = simulate_kernel(one, "hbm", "gemm", 256, 512, 512, batch=64, fidelity="sampled")
    assert full.compute_bound and samp.simulated_fraction < 0.3
    assert abs(samp.time_ns / full.time_ns - 1) < 0.01


@pytest.mark.slow
def test_large_gemm_and_gemv_full_size(h2m2):
    """The reference GEMM and GEMV of docs/validation/npu.md at full size (about 40 s)."""
    m, k, n = 2048, 12288, 12288
    chip = h2m2.side("hbm").chip
    ideal_ns = ideal_mm_cycles(chip, m, k, n) / chip.cores * chip.cycle_ns
    samp = {}
    for side in ("hbm", "lpddr"):
        samp[side] = simulate_kernel(h2m2, side, "gemm", m, k, n, fidelity="sampled")
        assert samp[side].compute_bound
        assert ideal_ns <= samp[side].time_ns <= 1.01 * ideal_ns
        gemv = simulate_kernel(h2m2, side, "gemv", 1, k, n)
        stream = measure_stream(h2m2.side(side)).gbps
        assert not gemv.compute_bound and 0.93 * stream <= gemv.achieved_gbps <= gemv.peak_gbps
    full = simulate_kernel(h2m2, "hbm", "gemm", m, k, n)
    assert abs(samp["hbm"].time_ns / full.time_ns - 1) < 0.01


def test_deterministic(small):
    a = simulate_kernel(small, "hbm", "attention", 4, 128, 4096, batch=4,
                        placement="scattered", page_size=4096, seed=7)
    b = simulate_kernel(small, "hbm", "attention", 4, 128, 4096, batch=4,
                        placement="scattered", page_size=4096, seed=7)
    assert a.as_dict() == b.as_dict()


def test_translation_cost_small_with_huge_pages_large_with_4k(small):
    """2 MiB pages cost under 2 %. 4 KiB pages are a compulsory fill each: without TLB
    prefetch every one stalls its queue (> 50 %); the default prefetch (several fills in
    flight per queue) hides part of that, but never below the huge-page cost."""
    ideal = simulate_kernel(small, "hbm", "gemv", 1, 4096, 4096, translate="ideal")
    huge = simulate_kernel(small, "hbm", "gemv", 1, 4096, 4096)
    small_pages = simulate_kernel(small, "hbm", "gemv", 1, 4096, 4096, page_size=4096,
                                  placement="scattered")
    no_prefetch = dataclasses.replace(small, mmu=dataclasses.replace(small.mmu,
                                                                     prefetch="none"))
    blocking = simulate_kernel(no_prefetch, "hbm", "gemv", 1, 4096, 4096, page_size=4096,
                               placement="scattered")
    assert ideal.tlb_misses == 0 and ideal.stall_tlb_ns == 0
    assert huge.tlb_misses > 0
    assert huge.time_ns / ideal.time_ns - 1 < 0.02
    assert small_pages.tlb_misses >= 4096 * 4096 // 4096
    assert blocking.time_ns / ideal.time_ns - 1 > 0.5
    assert huge.time_ns < small_pages.time_ns < blocking.time_ns


def test_walk_mode_reads_page_table_entries(small):
    walk = dataclasses.replace(small, mmu=dataclasses.replace(small.mmu, miss_mode="walk"))
    r = simulate_kernel(walk, "lpddr", "gemv", 1, 2048, 2048, page_size=4096)
    assert r.dram.pte_reads > 0 and r.stall_tlb_ns > 0


def test_graph_kernels_back_to_back(small):
    G = partition_layer("opt-350m", 4, 256, {"qkv": 8, "attention": 8, "fc": 8},
                        dtype="int8", sides=("hbm", "lpddr"))
    ks = [k for k in graph_kernels(G) if k.side == "hbm" and k.sublayer == "fc"]
    r = run_kernels(small, "hbm", ks)
    assert [d["name"] for d in r.kernels] == [k.name for k in ks]
    starts = [d["start_ns"] for d in r.kernels]
    assert starts == sorted(starts) and starts[0] == 0
    total = sum(d["time_ns"] for d in r.kernels)
    assert total == pytest.approx(r.time_ns, rel=1e-6)
    assert r.flops == sum(k.flops for k in ks)
    # each kernel alone is no slower than inside the list (the list adds barriers)
    one = run_kernel(small, "hbm", ks[0])
    assert one.time_ns <= r.kernels[0]["time_ns"] * 1.05
    samp = run_kernels(small, "hbm", ks, fidelity="sampled")
    assert abs(samp.time_ns / r.time_ns - 1) < 0.05


def test_graph_kernel_needs_resident_tensors(small):
    G = partition_layer("opt-350m", 2, 64, {"qkv": 8, "attention": 8, "fc": 8},
                        dtype="int8", sides=("hbm", "lpddr"))
    k = next(k for k in graph_kernels(G) if k.side == "hbm" and k.op in ("gemm", "gemv"))
    mem = SystemMemory(small)
    for t in list(k.operands) + list(k.outputs):
        if t.base not in mem.tensors:
            mem.place(t.base, t.offset + t.bytes, "lpddr", kind=t.kind)
    with pytest.raises(ConfigError, match="not resident on side 'hbm'"):
        run_kernel(small, "hbm", k, memory=mem)
    for t in list(k.operands) + list(k.outputs):
        mem.duplicate(t.base, "hbm")
    r = run_kernel(small, "hbm", k, memory=mem)
    assert r.time_ns > 0 and r.side == "hbm"
    with pytest.raises(ConfigError, match="has no address"):
        run_kernel(small, "hbm", k, addresses={})


@pytest.mark.parametrize("kwargs, key", [
    (dict(op="gemx", m=1, k=8, n=8), "op"),
    (dict(op="gemv", m=2, k=8, n=8), "m"),
    (dict(op="gemm", m=0, k=8, n=8), "m"),
    (dict(op="gemm", m=1, k=8, n=8, fidelity="exact"), "fidelity"),
    (dict(op="gemm", m=1, k=8, n=8, unit="tpu"), "unit"),
    (dict(op="gemm", m=1, k=8, n=8, dtype="int3"), "dtype"),
    (dict(op="gemm", m=1, k=8, n=8, page_size=5000), "page_size"),
])
def test_bad_arguments(small, kwargs, key):
    with pytest.raises(ConfigError) as ei:
        simulate_kernel(small, "hbm", **kwargs)
    assert ei.value.key == key


def test_unknown_side(small):
    with pytest.raises(ConfigError, match="did you mean 'hbm'"):
        simulate_kernel(small, "hbn", "gemv", 1, 64, 64)


def test_out_of_memory_is_reported(small):
    from h2m2sim.errors import OutOfMemoryError
    with pytest.raises(OutOfMemoryError, match="'lpddr'"):
        simulate_kernel(small, "lpddr", "gemv", 1, 65536, 65536)

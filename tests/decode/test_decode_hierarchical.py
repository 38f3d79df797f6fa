"""Hierarchical memory: the page cache's replacement policies and how migration combines
with compute (h2m2sim.decode.page_cache, h2m2sim.decode.hierarchical).

Independent truths: closed forms of the three policies on a cyclic reference string (the
shape of a decode iteration's sweep over weights and KV), a brute-force reference
implementation on random strings, Belady's optimality, and the iteration time as the
max (overlapped) or sum (added) of compute and migration.
"""
from __future__ import annotations

import numpy as np
import pytest

from h2m2sim.config import load_config
from h2m2sim.decode.hierarchical import HierarchicalOptions, reference_string, run_hierarchical
from h2m2sim.decode.page_cache import cyclic_string, miss_flags
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import SUBLAYERS
from h2m2sim.memory.dram import stream_bandwidth_gbps
from h2m2sim.model import footprint, load_model
from h2m2sim.system.config import resolve_system

CYCLIC = [(10, 5, 3), (10, 5, 10), (7, 3, 5), (100, 40, 4), (9, 1, 3), (9, 8, 4),
          (257, 100, 6)]


@pytest.mark.parametrize("n,c,k", CYCLIC)
def test_lru_thrashes_on_a_cyclic_string_larger_than_the_cache(n, c, k):
    assert miss_flags(cyclic_string(n, k), c, "lru").all()


@pytest.mark.parametrize("n,c,k", CYCLIC)
def test_fifo_equals_lru_on_a_cyclic_string(n, c, k):
    refs = cyclic_string(n, k)
    assert np.array_equal(miss_flags(refs, c, "fifo"), miss_flags(refs, c, "lru"))


@pytest.mark.parametrize("policy", ["lru", "fifo", "belady"])
def test_a_cyclic_string_that_fits_misses_only_its_first_pass(policy):
    miss = miss_flags(cyclic_string(50, 4), 50, policy)
    assert miss[:50].all() and not miss[50:].any()


@pytest.mark.parametrize("n,c,k", CYCLIC)
def test_belady_on_a_cyclic_string_has_its_closed_form(n, c, k):
    """After the n compulsory misses of the first pass, Belady evicts the page used
    last (the one needed farthest ahead), so every n - 1 references repeat c - 1 hits
    then n - c misses: misses = n + q (n - c) + max(0, r - (c - 1)) with
    k n - n = q (n - 1) + r."""
    q, r = divmod(k * n - n, n - 1)
    want = n + q * (n - c) + max(0, r - (c - 1))
    assert miss_flags(cyclic_string(n, k), c, "belady").sum() == want


def _reference(refs, c, policy):
    """Brute force: a list of resident pages in order of arrival / last use."""
    res, out = [], []
    for i, p in enumerate(refs):
        if p in res:
            out.append(False)
            if policy == "lru":
                res.remove(p)
                res.append(p)
            continue
        out.append(True)
        if len(res) == c:
            if policy == "belady":
                ahead = list(refs[i + 1:])
                res.remove(max(res, key=lambda q: ahead.index(q) if q in ahead else 1e9))
            else:
                res.pop(0)
        res.append(p)
    return np.array(out)


def test_policies_match_a_brute_force_cache_on_random_strings():
    rng = np.random.default_rng(7)
    for _ in range(120):
        refs = rng.integers(0, rng.integers(1, 12), size=rng.integers(1, 50))
        c = int(rng.integers(1, 8))
        for policy in ("lru", "fifo"):
            assert np.array_equal(miss_flags(refs, c, policy), _reference(refs, c, policy))
        # Belady's victim among ties is arbitrary; its miss count is not
        opt = miss_flags(refs, c, "belady").sum()
        assert opt == _reference(refs, c, "belady").sum()
        assert opt <= min(miss_flags(refs, c, p).sum() for p in ("lru", "fifo"))


def test_an_unknown_replacement_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError) as e:
        load_config({"system": "h2m2", "model": "gpt3-175b",
                     "policy": {"mapper": "hierarchical",
                                "mapper_params": {"hierarchical": {"replacement": "mru"}}}})
    assert "hierarchical.replacement" in str(e.value) and "\n" not in str(e.value)


def test_reference_string_has_every_weight_and_kv_page_once_and_reused_activations():
    model = load_model("opt-1.3b")
    page = 2 << 20
    refs, F = reference_string(model, 4, 256, page)
    fp = footprint(model, 4, 256)
    per_layer = sum(-(-fp[sl]["weight"] // page) + -(-fp[sl]["kv"] // page)
                    for sl in SUBLAYERS)
    act = sum(-(-fp[sl]["activation"] // page) for sl in SUBLAYERS)
    assert np.unique(refs).size == per_layer * model.layers + act == F / page
    assert refs.size == (per_layer + act) * model.layers


@pytest.fixture(scope="module")
def small_hbm():
    """The h2m2 system with 1 GB of HBM: opt-1.3b's 2.6 GB of weights do not fit."""
    return resolve_system({"preset": "h2m2", "sides": {"hbm": {"capacity_bytes": "1 GB"}}},
                          "system")


def test_migration_combines_with_compute_as_max_or_sum(small_hbm, tmp_path):
    model = load_model("opt-1.3b")
    cache = {"cache_dir": tmp_path, "enabled": True}
    runs = {(r, o): run_hierarchical(small_hbm, model, 4, 256,
                                     HierarchicalOptions(replacement=r, overlap=o),
                                     cache=cache)
            for r in ("lru", "belady") for o in (True, False)}
    compute = runs[("lru", True)].compute_ns
    rate = min(stream_bandwidth_gbps(small_hbm.side("lpddr")),
               small_hbm.interconnect.bandwidth_gbps)
    for (r, o), h in runs.items():
        assert h.compute_ns == compute
        assert h.migration_ns == pytest.approx(h.migrated_bytes / rate)
        want = max(compute, h.migration_ns) if o else compute + h.migration_ns
        assert h.iteration_ns == pytest.approx(want)
    # LRU misses every weight and KV page (reuse distance = the whole footprint), but
    # hits the activation buffers every layer reuses; Belady misses fewer
    page = small_hbm.mmu.page_size
    fp = footprint(model, 4, 256)
    streamed = sum(-(-fp[sl]["weight"] // page) + -(-fp[sl]["kv"] // page)
                   for sl in SUBLAYERS) * model.layers * page
    assert runs[("lru", True)].migrated_bytes == streamed
    assert runs[("belady", True)].migrated_bytes < streamed


def test_a_footprint_that_fits_migrates_nothing(tmp_path):
    system = resolve_system("h2m2", "system")
    h = run_hierarchical(system, load_model("opt-1.3b"), 4, 256,
                         HierarchicalOptions(replacement="lru", overlap=False),
                         cache={"cache_dir": tmp_path, "enabled": True})
    assert h.migrated_bytes == 0 and h.hit_rate == 1.0 and h.iteration_ns == h.compute_ns


def test_pages_too_small_for_the_cache_simulation_are_refused_naming_the_key():
    system = resolve_system({"preset": "h2m2", "mmu": {"page_size": "4 KiB",
                                                       "virtual_bytes": "1 TiB"}}, "system")
    with pytest.raises(ConfigError) as e:
        run_hierarchical(system, load_model("gpt3-175b"), 32, 2048)
    assert e.value.key == "system.mmu.page_size"

"""The cycle-level serving evaluator (h2m2sim.serving.timing.cycle_eval) on a tiny model: layout
effects on the DRAM engine, monotonicity, determinism, tables, tensor-parallel sharding,
and the reproduction script's JSON."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.model import ModelSpec, load_model
from h2m2sim.serving.timing.cycle_eval import CycleEvaluator, _split_groups, shard_model
from h2m2sim.serving.run import EVALUATORS
from h2m2sim.serving.timing import TableGrid, build_tables

ROOT = Path(__file__).resolve().parents[2]

# one KV head of 128 (as each card of the 4-way sharded 7B model): a 16-token block is a
# 4 KiB run per layer, half of the mlu370-x4 channel-interleave unit
TINY = ModelSpec(name="tiny-gqa", layers=2, hidden=512, heads=4, kv_heads=1, head_dim=128,
                 ffn_dim=1024, vocab=1024, max_context=8192, dtype="bf16")


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    return CycleEvaluator(TINY, "mlu370-x4", cards=1,
                          cache_dir=str(tmp_path_factory.mktemp("cache")))


def test_paged_small_blocks_slower_than_contiguous_on_lpddr5(ev):
    c = ev.attention_detail(16, 512, CONTIGUOUS)
    p = ev.attention_detail(16, 512, KVLayout.paged(16))
    assert p["runs"] == 16 * 512 // 16 and c["runs"] == 16
    assert p["kv_bytes"] == c["kv_bytes"]
    assert p["kv_gbps"] < 0.97 * c["kv_gbps"]
    assert p["row_hit_rate"] < c["row_hit_rate"]


def test_paged_block_covering_the_context_prices_like_contiguous(ev):
    c = ev.attention_ns(8, 200, CONTIGUOUS)
    p = ev.attention_ns(8, 200, KVLayout.paged(256))
    assert abs(p - c) / c < 0.05


def test_decode_time_grows_with_context_and_batch(ev):
    t = [ev.evaluate("decode", 4, np.full(4, n), KVLayout.paged(16)) for n in (32, 256, 1024)]
    assert t[0] < t[1] < t[2]
    assert ev.evaluate("decode", 16, np.full(16, 256), CONTIGUOUS) > \
        ev.evaluate("decode", 4, np.full(4, 256), CONTIGUOUS)
    assert ev.evaluate("prefill", 2, np.full(2, 256), CONTIGUOUS) > \
        ev.evaluate("prefill", 1, np.full(1, 256), CONTIGUOUS)
    assert 0 < ev.evaluate("kv_copy", 1, np.array([64]), CONTIGUOUS) < \
        ev.evaluate("kv_copy", 1, np.array([1024]), CONTIGUOUS)


def test_deterministic_without_cache():
    a = CycleEvaluator(TINY, "mlu370-x4", cards=1, cache=False)
    b = CycleEvaluator(TINY, "mlu370-x4", cards=1, cache=False)
    x = [a.evaluate("decode", 3, np.array([40, 90, 300]), KVLayout.paged(16)) for _ in range(2)]
    y = b.evaluate("decode", 3, np.array([40, 90, 300]), KVLayout.paged(16))
    assert x[0] == x[1] == y


def test_tables_from_the_cycle_evaluator(ev, tmp_path):
    grid = TableGrid(max_batch=4, max_tokens=256, token_points=3, error_samples=2)
    t = build_tables(ev, [KVLayout.paged(16)], grid, cache_dir=str(tmp_path))
    assert t.cycle_level and "cycle-level" in t.label
    # grid points are the evaluator's own values (the decode table of each layout)
    for lay in (KVLayout.paged(16), CONTIGUOUS):
        for i, b in enumerate(t.batch_grid):
            for j, c in enumerate(t.token_grid):
                assert t.table(lay)[i, j] == ev.evaluate("decode", int(b), np.full(int(b), c),
                                                         lay)
    assert set(t.errors) >= {"decode paged:16", "decode contiguous", "prefill"}


def test_tables_do_not_depend_on_the_thread_count():
    from h2m2sim.parallel import use_threads
    grid = TableGrid(max_batch=4, max_tokens=256, token_points=3, error_samples=2)
    from h2m2sim.serving.timing.build import _compute_tables
    out = []
    for n in (1, 2):
        ev = CycleEvaluator(TINY, "mlu370-x4", cards=1, cache=False)
        with use_threads(n):
            out.append(_compute_tables(ev, [CONTIGUOUS, KVLayout.paged(16)], grid, seed=3))
    a, b = out
    assert a.keys() == b.keys() and "err[decode paged:16]" in a
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_evaluator_pickles_without_its_locks():
    import pickle
    ev = CycleEvaluator(TINY, "mlu370-x4", cards=1, cache=False)
    ev2 = pickle.loads(pickle.dumps(ev))
    x = np.array([40, 90])
    assert ev2.evaluate("decode", 2, x, CONTIGUOUS) == ev.evaluate("decode", 2, x, CONTIGUOUS)


def test_shard_and_groups():
    m = load_model("deepseek-r1-distill-qwen-7b")
    s = shard_model(m, 4)
    assert (s.heads, s.kv_heads, s.ffn_dim, s.hidden) == (7, 1, 4736, 3584)
    assert s.kv_bytes_per_token_per_layer() * 4 == m.kv_bytes_per_token_per_layer()
    with pytest.raises(ConfigError, match="cards"):
        shard_model(m, 3)
    assert _split_groups(np.array([5, 5, 5])) == [(3, 5)]
    g = _split_groups(np.array([1, 2, 100, 101, 1000, 1001]))
    assert [n for n, _ in g] == [2, 2, 2] and g[-1][1] == 1000


def test_cycle_evaluator_is_registered_and_uses_the_node():
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device
    dev = resolve_device("mlu370-x4")
    assert dev.devices == 4 and dev.total_capacity_bytes == 96 * 10**9
    ev = EVALUATORS["cycle"](load_model("deepseek-r1-distill-qwen-7b"), dev, ServingConfig())
    assert ev.cards == 4 and ev.side == "lpddr" and ev.cycle_level


def test_reproduce_odma_json_keys_with_analytic_times(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce_odma.py"), "--out",
                        str(tmp_path), "--json", "--max-requests", "60", "--traces", "alpaca",
                        "--evaluator", "analytic", "--allocators", "static,paged,odma",
                        "--rates", "40,150"],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    _check_keys(out)
    assert (tmp_path / "odma_results.csv").exists() and (tmp_path / "odma_utilization.png").exists()
    curve = out["alpaca"]["curve"]
    assert len(curve) == 6 and {c["rate"] for c in curve} == {40.0, 150.0}
    assert set(curve[0]) == {"rate", "allocator", "tokens_per_s", "kv_utilization",
                             "ttft_p99_s"}
    assert "curve" in out["alpaca@tp4"] and (tmp_path / "odma_curve_alpaca.png").exists()


@pytest.mark.slow
def test_reproduce_odma_json_keys_cycle_level(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce_odma.py"), "--out",
                        str(tmp_path), "--json", "--max-requests", "40", "--traces", "alpaca",
                        "--allocators", "static,paged,odma", "--rates", "150"],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=3600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    _check_keys(out)
    assert out["alpaca"]["paged"]["cycle_level"] is True


def _env(tmp_path):
    import os
    env = dict(os.environ)
    env.setdefault("H2M2SIM_CACHE", str(tmp_path / "cache"))
    return env


def _check_keys(out):
    assert "alpaca" in out
    for a in ("static", "paged", "odma"):
        d = out["alpaca"][a]
        for k in ("kv_utilization", "tokens_per_s", "ttft_p50_s", "tpot_p50_s",
                  "predictor_accuracy", "migration_rate"):
            assert k in d
        assert 0 < d["kv_utilization"] <= 1 and d["tokens_per_s"] > 0
    assert out["alpaca"]["static"]["predictor_accuracy"] is None
    assert out["alpaca"]["paged"]["migration_rate"] is None
    assert 0 <= out["alpaca"]["odma"]["predictor_accuracy"] <= 1
    assert 0 <= out["alpaca"]["odma"]["migration_rate"] <= 1


def test_label_says_what_the_times_of_a_several_sided_system_stand_for():
    one = CycleEvaluator(TINY, "mlu370-x4", cards=1, cache=False)
    assert "lower bound" not in one.label and "mlu370-x4:" in one.label
    two = CycleEvaluator(TINY, "h2m2", cards=1, cache=False)
    assert two.label.startswith("cycle-level") and "h2m2:hbm" in two.label
    assert "lpddr add KV capacity, not their time (a lower bound)" in two.label

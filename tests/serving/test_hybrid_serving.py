"""Serving hybrid (Mamba) models: each request holds a fixed-size state beside the KV of
the attention layers; every allocator grants it at admission and frees it at finish or
preemption, and held memory is always KV tokens x bytes per token + requests x state."""
import numpy as np
import pytest

from h2m2sim.allocators import NO_STATE, RequestState, make_allocator
from h2m2sim.compute.llm_roofline import RooflineEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.model import load_model
from h2m2sim.model.shard import shard_model
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.deployment import model_sizes
from h2m2sim.serving.ellm import ActivationModel
from h2m2sim.serving.replay import Replay
from h2m2sim.serving.timing import AnalyticEvaluator, TableGrid, build_tables
from h2m2sim.serving.traces import RequestTrace

JAMBA = load_model("jamba-mini")
STATE = RequestState.of_model(JAMBA, "bf16")
BPT = 4 * 2 * 8 * 128 * 2          # K and V of 4 attention layers, 8 KV heads of 128, bf16


def test_jamba_sizes_count_kv_in_attention_layers_and_state_per_request():
    s = model_sizes(JAMBA, "bf16")
    assert s["kv_bytes_per_token"] == BPT == JAMBA.kv_bytes_per_token("bf16")
    # 28 Mamba layers x d_inner 8192 x (d_state 16 + d_conv 3) x 2 bytes
    assert s["state_bytes_per_request"] == 28 * 8192 * 19 * 2 == STATE.bytes_per_request
    assert STATE.layers == 28 and not NO_STATE
    assert s["active_params"] < s["params"]
    llama = load_model("llama3-8b")
    dense = model_sizes(llama)
    # a dense model computes with all its parameters but the input embedding table, of
    # which a token reads one row
    assert dense["state_bytes_per_request"] == 0 and \
        dense["active_params"] == dense["params"] - (llama.vocab - 1) * llama.hidden


def _churn(a, state, rng, steps=400):
    """Random reserve / grow / release; after each call held memory is exact."""
    live = {}
    for i in range(steps):
        op = rng.integers(3)
        if op == 0 or not live:
            ok = a.reserve(i, int(rng.integers(1, 200)))
            if ok:
                live[i] = a.capacity_of(i)
        elif op == 1:
            r = int(rng.choice(list(live)))
            if a.grow(r, a.capacity_of(r) + int(rng.integers(1, 64))):
                live[r] = a.capacity_of(r)
        else:
            r = int(rng.choice(list(live)))
            a.release(r, completed=bool(rng.integers(2)))
            del live[r]
        a.check_invariants()
        assert a.state_held_bytes == len(live) * state.bytes_per_request
        assert a.held_bytes == sum(live.values()) * a.bytes_per_token + \
            len(live) * state.bytes_per_request
    return live


@pytest.mark.parametrize("name,opts", [("paged", {}), ("static", {}), ("odma", {}),
                                       ("bmc", {}), ("ellm", {"elastic": False}),
                                       ("ellm", {"elastic": True})])
def test_state_is_reserved_with_kv_and_conserved(name, opts):
    state = RequestState(3 * 2**20 + 5, 3)           # not a multiple of anything
    slots = 6
    a = make_allocator(name, 64 * 2**20, 4096, max_context_tokens=1024, state=state,
                       state_slots=slots, **opts)
    if name == "ellm":
        a.set_activation_reserve(4 * 2**20)
    if a.pools_state:      # eLLM's pool: whole chunks of the pool, no slab
        assert a.state_slab is None and a.state_chunks == 2
    else:                  # a slab of one slot per schedulable request above the KV
        assert a.state_slab.region_bytes == slots * state.bytes_per_request
        assert a.capacity_bytes <= 64 * 2**20 - slots * state.bytes_per_request
    _churn(a, state, np.random.default_rng(1))
    for r in list(a.live_requests):
        a.release(r)
    a.check_invariants()
    assert a.held_bytes == 0 and a.state_held_bytes == 0


def test_full_slab_denies_without_side_effect():
    state = RequestState(1000, 1)
    a = make_allocator("paged", 2**20, 64, max_context_tokens=256, state=state,
                       state_slots=2)
    assert a.reserve(0, 10) and a.reserve(1, 10)
    before = (a.reserved_tokens, a.free_tokens, a.counts["deny"])
    assert not a.reserve(2, 10)                      # KV room, but no state slot
    assert (a.reserved_tokens, a.free_tokens) == before[:2]
    assert a.counts["deny"] == before[2] + 1
    a.release(0)
    assert a.reserve(2, 10)
    a.check_invariants()


def test_state_needs_slots_and_a_typed_state():
    with pytest.raises(ConfigError, match="state_slots"):
        make_allocator("paged", 2**20, 64, state=RequestState(1000, 1))
    with pytest.raises(ConfigError, match="allocator.state"):
        make_allocator("paged", 2**20, 64, state=1000, state_slots=4)
    with pytest.raises(ConfigError, match="allocator.state"):
        RequestState(1000, 0)


def _jamba_tables(layout, max_batch, max_tokens):
    ev = AnalyticEvaluator.from_model(JAMBA, bandwidth_GBps=4000.0, peak_tflops=600.0,
                                      layout_efficiency={"contiguous": 1.0, "paged": 0.8},
                                      dtype="bf16")
    return build_tables(ev, [layout], TableGrid(max_batch, max_tokens), cache=False)


def _trace(n=60, seed=3):
    rng = np.random.default_rng(seed)
    return RequestTrace(np.cumsum(rng.exponential(0.05, n)), rng.integers(100, 3000, n),
                        rng.integers(10, 600, n), None, "synthetic")


@pytest.mark.parametrize("alloc,opts", [("paged", {}), ("odma", {}),
                                        ("ellm", {"elastic": True, "cpu_buffer_bytes": 2**31})])
def test_jamba_serve_runs_to_completion_with_state_accounted(alloc, opts):
    """A memory-tight Jamba server (preemptions happen) serves every request; after
    every loop turn the allocator holds exactly the running requests' KV tokens x
    per-token KV of the attention layers plus one state each."""
    cfg = ServingConfig(max_batch=16, max_context_tokens=4096, max_prefill_tokens=4096)
    cap = 6 * 4096 * BPT + 16 * STATE.bytes_per_request
    a = make_allocator(alloc, cap, BPT, max_context_tokens=4096, state=STATE,
                       state_slots=cfg.max_batch, **opts)
    tables = _jamba_tables(a.kv_layout, cfg.max_batch, cfg.max_context_tokens)
    trace = _trace()
    acts = ActivationModel(2048, 4096, "test") if a.manages_activations else None
    loop = Replay(trace, cfg, a, tables, activations=acts)
    while loop.step():
        run = loop.engine.batch
        a.check_invariants()
        holders = set(a.live_requests)
        assert holders == set(run.idx[:run.m].tolist())
        assert a.held_bytes == int(run.cap[:run.m].sum()) * BPT + \
            run.m * STATE.bytes_per_request
    m = loop.result().metrics
    assert m["requests_completed"] == len(trace)
    assert m["state_bytes_per_request"] == STATE.bytes_per_request
    assert 0 < m["peak_state_bytes"] <= cfg.max_batch * STATE.bytes_per_request
    assert a.held_bytes == 0
    if alloc == "paged":
        assert m["preemptions"] > 0          # the case does exercise preempt -> free


def test_state_makes_decode_slower_by_its_traffic():
    """Analytic placeholder: a decode step reads and writes each request's state once."""
    kw = dict(bandwidth_GBps=1000.0, peak_tflops=1e6, layout_efficiency={"contiguous": 1.0})
    with_state = AnalyticEvaluator.from_model(JAMBA, dtype="bf16", **kw)
    without = AnalyticEvaluator(**{**with_state.__dict__, "state_bytes_per_request": 0.0})
    lay = CONTIGUOUS
    dt = with_state.evaluate("decode", 8, [1000] * 8, lay) - \
        without.evaluate("decode", 8, [1000] * 8, lay)
    assert dt == pytest.approx(2 * 8 * STATE.bytes_per_request / 1e12, rel=1e-9)


def test_tensor_parallel_shard_of_jamba():
    s = shard_model(JAMBA, 2)
    assert (s.heads, s.kv_heads, s.ffn_dim, s.moe_ffn_dim, s.ssm_d_inner) == \
        (16, 4, 7168, 7168, 4096)
    assert s.state_bytes_per_request("bf16") * 2 == STATE.bytes_per_request
    assert s.kv_bytes_per_token("bf16") * 2 == BPT
    with pytest.raises(ConfigError, match="cards"):
        shard_model(JAMBA, 3)


def test_roofline_prices_mamba_state_and_kv_only_in_attention_layers():
    """Roofline, two cards: decode grows with context only through the 4 attention
    layers, and a Mamba stack without attention does not grow at all."""
    ev = RooflineEvaluator(JAMBA, "bf16", cards=2)
    lay = KVLayout.paged(128)
    t1, t2 = (ev.evaluate("decode", 4, [n] * 4, lay) for n in (4096, 65536))
    assert t2 > t1
    ssm_only = RooflineEvaluator(load_model({"base": "jamba-mini",
                                            "attn_layer_period": 0}), "bf16", cards=2)
    s1, s2 = (ssm_only.evaluate("decode", 4, [n] * 4, lay) for n in (4096, 65536))
    assert s1 == s2 and s1 > 0


def test_dense_serve_case_is_bit_identical_to_before_state_support():
    """The paged case of tests/serving/test_serving_job.py (a dense 7B model): the
    numbers it gave before hybrid serving existed, to the last bit, but for the compute
    of the input embedding table, which a step no longer counts as matrix work (its
    lookup reads one row per token)."""
    from types import SimpleNamespace as NS

    from h2m2sim.serving.job import run_serving
    from h2m2sim.system import resolve_system
    system = resolve_system({"preset": "mlu370-x4", "name": "two-lpddr", "cards": 2})
    # the history split those numbers were made with (paged alone now holds none out)
    cfg = NS(workload=NS(serving=ServingConfig(trace="azure2023_code", max_requests=120,
                                               max_context_tokens=8192,
                                               history_fraction=0.5)),
             policy=NS(allocator="paged", allocator_params={"block_tokens": 32}),
             system=system, model=load_model("deepseek-r1-distill-qwen-7b"),
             simulation=NS(fidelity="estimate", seed=0, cache=False, cache_dir=None))
    m = run_serving(cfg)
    assert m["total_time_ns"] == 204981963550.48822
    assert m["tokens_per_s"] == 12.576716289309152
    assert "state_bytes_per_request" not in m

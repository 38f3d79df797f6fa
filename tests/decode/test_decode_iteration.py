"""System layer: one decode iteration across the sides (h2m2sim.decode.iteration / job).

Independent truths checked here: layers are identical, so two layers simulated back to
back cost twice one (the scaling run_iteration relies on); the interpolated sublayer tables
equal direct cycle-level runs at the grid points and stay close in between; a mapping's
iteration time is the sum of per-sublayer maxima plus barriers and copies; more HBM
never hurts the greedy mapper; same inputs give identical results.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from h2m2sim.mapping import SUBLAYERS, Mapping
from h2m2sim.model import load_model, split_units
from h2m2sim.npu.simulate import run_kernels
from h2m2sim.system.config import resolve_system
from h2m2sim.decode.iteration import (CONCURRENT_GROUPS, SAMPLED_GROUP_BYTES, _groups,
                                      build_problem, group_bytes, layer_kernels,
                                      run_iteration, run_layer, run_piece, sampled_groups,
                                      sublayer_tables, table_grid, touched_before)
from h2m2sim.decode.job import simulate

NOCACHE = {"enabled": False}
MODEL = "opt-1.3b"          # 32 heads x 64, small enough for cycle-level runs in seconds
BATCH, SEQ = 4, 256


@pytest.fixture(scope="module")
def system():
    return resolve_system("h2m2", "system")


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


def _relabel(k, prefix: str):
    """The same kernel in another layer: every tensor renamed, so it gets its own
    addresses (another layer's weights and KV)."""
    ren = lambda t: dataclasses.replace(  # noqa: E731
        t, name=prefix + t.name, view_of=(prefix + t.view_of) if t.view_of else None)
    return dataclasses.replace(k, name=prefix + k.name,
                               operands=tuple(ren(t) for t in k.operands),
                               outputs=tuple(ren(t) for t in k.outputs))


@pytest.mark.parametrize("sublayer", SUBLAYERS)
def test_two_layers_cost_twice_one(system, model, sublayer):
    """run_iteration scales one layer by the layer count; check it: the kernels of two
    layers (distinct tensors) run back to back on one side take 2x one layer within 3 %."""
    split = {sl: split_units(model, sl) // 2 for sl in SUBLAYERS}
    per, _ = layer_kernels(model, BATCH, SEQ, split, system.side_names)
    side = system.side_names[1]       # LPDDR side: the bandwidth-bound one
    ks = per[(side, sublayer)]
    one = run_kernels(system, side, ks, fidelity="sampled")
    two = run_kernels(system, side, list(ks) + [_relabel(k, "L2.") for k in ks],
                      fidelity="sampled")
    assert two.time_ns == pytest.approx(2 * one.time_ns, rel=0.03)


def test_iteration_is_layers_times_layer_and_layer_is_sum_of_sublayer_maxima(system, model):
    split = {"qkv": 10, "attention": 20, "fc": 5}
    it = run_iteration(system, model, BATCH, SEQ, Mapping(split=split, mapper="fixed"),
                       cache=NOCACHE)
    lay = run_layer(system, model, BATCH, SEQ, split, cache=NOCACHE)
    assert it.layers == model.layers
    assert it.iteration_ns == pytest.approx(model.layers * lay.time_ns, rel=1e-12)
    total = sum(max(p.time_ns for p in lay.sublayers[sl].values()) + lay.boundary_ns[sl]
                for sl in SUBLAYERS)
    assert lay.time_ns == pytest.approx(total, rel=1e-12)
    # every sublayer boundary pays the barrier plus its copies; activations cross the link
    for sl in SUBLAYERS:
        assert lay.boundary_ns[sl] == pytest.approx(system.sync.barrier_ns +
                                                    lay.interconnect_ns[sl], rel=1e-12)
    assert lay.transfer_bytes > 0
    link = system.interconnect
    assert sum(lay.interconnect_ns.values()) >= lay.transfer_bytes / 2 / link.bandwidth_gbps


def test_run_piece_overlaps_identical_requests(system, model):
    """Requests with equal context run together, each request's kernels as their
    dependencies allow: the piece is the one engine run of all of them (B <= the
    simulated group count, so no extrapolation), never slower than B requests one after
    another, and it moves the same bytes."""
    per, _ = layer_kernels(model, BATCH, SEQ, {"qkv": 32, "attention": 32, "fc": 0},
                           system.side_names)
    side = system.side_names[0]
    att = per[(side, "attention")]
    by_req = {}
    for k in att:
        by_req.setdefault(k.request, []).append(k)
    shared = by_req.pop(None, [])            # batched kernels (the KV append)
    assert len(by_req) == BATCH <= CONCURRENT_GROUPS
    whole = run_piece(system, side, att, cache=NOCACHE)
    one = run_piece(system, side, by_req[min(by_req)], cache=NOCACHE)
    rest = sum((run_piece(system, side, [k], cache=NOCACHE) for k in shared),
               start=run_piece(system, side, [], cache=NOCACHE))
    reqs = [k for r in sorted(by_req) for k in by_req[r]]
    # each group runs with the pages the piece's other kernels touch resident
    together = run_kernels(system, side, reqs, fidelity="sampled",
                           warm=touched_before(reqs, shared))
    append = [run_kernels(system, side, [k], fidelity="sampled",
                          warm=touched_before([k], reqs)) for k in shared]
    assert whole.time_ns == pytest.approx(together.time_ns + sum(r.time_ns for r in append),
                                          rel=1e-9)
    assert whole.time_ns < BATCH * one.time_ns + rest.time_ns
    # the kernels' own data is conserved exactly; only the flag reads of the joins and
    # barriers depend on how the kernels were launched
    data = lambda p: p.bytes - p.sync_bytes  # noqa: E731
    assert data(whole) == BATCH * data(one) + data(rest)
    assert whole.sync_bytes > 0


def test_sampled_request_groups_match_the_cycle_run(system, model):
    """Sampled fidelity runs CONCURRENT_GROUPS of B identical small request groups and
    counts that run B / CONCURRENT_GROUPS times; the whole batch run together (cycle)
    must agree within the documented error (2.2 %, docs/validation/npu.md), on both
    sides."""
    B = 4 * CONCURRENT_GROUPS
    per, _ = layer_kernels(model, B, SEQ, {"qkv": 32, "attention": 16, "fc": 0},
                           system.side_names)
    for side in system.side_names:
        att = per[(side, "attention")]
        cyc = run_piece(system, side, att, fidelity="cycle", cache=NOCACHE)
        smp = run_piece(system, side, att, fidelity="sampled", cache=NOCACHE)
        assert smp.time_ns == pytest.approx(cyc.time_ns, rel=0.025)
        assert smp.bytes - smp.sync_bytes == cyc.bytes - cyc.sync_bytes


def _request_group(system, model_name, batch, seq, heads, side):
    """The per-request attention group of a layer with ``heads`` on the first side, and
    how many requests share it."""
    per, _ = layer_kernels(load_model(model_name), batch, seq,
                           {"qkv": 0, "attention": heads, "fc": 0}, system.side_names)
    group, count, _ = max(_groups(per[(side, "attention")]), key=lambda g: g[1])
    return per[(side, "attention")], group, count


@pytest.mark.parametrize("model_name,batch,seq,heads", [
    ("opt-1.3b", 128, 256, 16),          # 0.5 MB per request: the cap of 32 groups
    ("gpt3-175b", 32, 2048, 59),         # 31 MB: fewer groups hold the byte budget
    ("gpt3-175b", 32, 4096, 59),
    ("gpt3-175b", 3, 2048, 59),          # fewer requests than the budget asks for
])
def test_sampled_run_holds_the_byte_budget_with_the_fewest_groups(system, model_name,
                                                                  batch, seq, heads):
    """A sampled run of identical request groups holds at least SAMPLED_GROUP_BYTES of
    their data, with no group more than needed, never more than CONCURRENT_GROUPS or
    the batch."""
    _, group, count = _request_group(system, model_name, batch, seq, heads, "hbm")
    W, b = sampled_groups(group, count), group_bytes(group)
    assert count == batch and 1 <= W <= min(count, CONCURRENT_GROUPS)
    assert W * b >= SAMPLED_GROUP_BYTES or W == min(count, CONCURRENT_GROUPS)
    assert (W - 1) * b < SAMPLED_GROUP_BYTES
    if model_name == "gpt3-175b" and batch == 32:
        assert W < CONCURRENT_GROUPS         # the case the budget speeds up


@pytest.mark.slow
def test_sampled_large_request_groups_match_the_cycle_run(system):
    """Large request groups (GPT3-175B, 59 heads of 31 MB per request at S = 2048) run
    fewer per sampled run (:func:`sampled_groups`, 9 of 32); the whole batch run together
    must still agree within the documented error (2.2 %, docs/validation/npu.md)."""
    att, group, count = _request_group(system, "gpt3-175b", 32, 2048, 59, "hbm")
    assert sampled_groups(group, count) < count
    cyc = run_piece(system, "hbm", att, fidelity="cycle", cache=NOCACHE)
    smp = run_piece(system, "hbm", att, fidelity="sampled", cache=NOCACHE)
    assert smp.time_ns == pytest.approx(cyc.time_ns, rel=0.022)
    assert smp.bytes - smp.sync_bytes == pytest.approx(cyc.bytes - cyc.sync_bytes, rel=1e-9)


def test_tables_match_direct_runs_at_grid_points_and_interpolate_between(system, model):
    prob = build_problem(system, model, BATCH, SEQ)
    tabs = sublayer_tables(system, model, BATCH, SEQ, prob, cache=NOCACHE)
    first = prob.sides[0]
    sl = "attention"
    N = prob.units[sl]
    for n in table_grid(N):
        split = {x: (N if x == sl else 0) for x in SUBLAYERS}
        split[sl] = n
        per, _ = layer_kernels(model, BATCH, SEQ, split, prob.sides)
        direct = run_piece(system, first, per[(first, sl)], cache=NOCACHE).time_ns
        assert tabs.table[first][sl][n] == pytest.approx(direct, rel=1e-9)
    # in between: close to linear in the head count. Small kernels (32 heads, B=4) are
    # step-like (heads per core, tiles), measured up to 11 % off the line here; the
    # GPT3-size error is reported by scripts/h2m2_table_error.py (docs/validation/h2m2.md)
    n = table_grid(N)[1] + 3
    split = {"qkv": N, "attention": n, "fc": 0}
    per, _ = layer_kernels(model, BATCH, SEQ, split, prob.sides)
    direct = run_piece(system, first, per[(first, sl)], cache=NOCACHE).time_ns
    assert tabs.table[first][sl][n] == pytest.approx(direct, rel=0.12)
    assert np.all(np.diff(tabs.table[first][sl]) >= 0)     # more heads never faster


def test_simulate_is_deterministic_and_greedy_fits(system, model):
    a = simulate(system, model, BATCH, SEQ, "greedy", fidelity="sampled")
    b = simulate(system, model, BATCH, SEQ, "greedy", fidelity="sampled")
    assert a["iteration_time_ns"] == b["iteration_time_ns"]
    assert [a[f"split_{sl}"] for sl in SUBLAYERS] == [b[f"split_{sl}"] for sl in SUBLAYERS]
    occ = a["hbm_occupancy_bytes"]
    cap = system.side(system.side_names[0]).capacity_bytes
    assert all(0 <= v <= cap for v in occ.values())


def test_more_hbm_capacity_never_slows_greedy(model):
    """GPT3-class capacity pressure is emulated with a tiny HBM: a bigger HBM side lets
    the mapper keep more in HBM, so the iteration is no slower."""
    times = []
    for cap in ("1 GB", "2 GB", "8 GB"):
        sysm = resolve_system({"preset": "h2m2",
                               "sides": {"hbm": {"capacity_bytes": cap}}}, "system")
        times.append(simulate(sysm, model, BATCH, SEQ, "greedy",
                              fidelity="estimate")["iteration_time_ns"])
    assert times[0] >= times[1] >= times[2]


def test_fused_attention_moves_the_same_bytes_and_saves_launch_overhead(system, model):
    """Fusing the decode attention of identical requests into one launch per stage keeps
    the work (bytes read, flops) and removes per-request launch/barrier overhead: no
    slower than per-request launches, and never faster than streaming its bytes at the
    side's peak bandwidth."""
    from h2m2sim.decode.iteration import fuse_requests, _groups

    per, _ = layer_kernels(model, 8, 512, {"qkv": 0, "attention": 0, "fc": 0},
                           system.side_names)
    side = system.side_names[1]       # all units on the second (LPDDR) side
    att = per[(side, "attention")]
    groups = [(g, c, m) for g, c, m in _groups(att) if c > 1]
    assert len(groups) == 1 and groups[0][1] == 8
    fused = fuse_requests(groups[0][2])
    assert [k.op for k in fused] == ["attn_score", "softmax", "attn_value"]
    req = [k for k in att if k.request is not None]
    assert sum(k.flops for k in fused) == sum(k.flops for k in req)
    assert sum(t.bytes for k in fused for t in k.operands if t.kind == "kv") == \
        sum(t.bytes for k in req for t in k.operands if t.kind == "kv")
    a = run_piece(system, side, att, cache=NOCACHE)
    b = run_piece(system, side, att, cache=NOCACHE, attention="fused")
    assert b.time_ns <= a.time_ns * 1.01
    peak = system.side(side).bandwidth_gbps           # GB/s = bytes per ns
    assert b.time_ns >= b.bytes / peak
    with pytest.raises(Exception, match="attention"):
        run_piece(system, side, att, cache=NOCACHE, attention="batched")


def test_hybrid_layer_is_count_weighted_mean_of_kinds(system):
    """A small Jamba-shaped stack (Mamba and attention mixers, dense and MoE FFNs),
    partitioned over both sides at cycle level: the layer run_iteration scales is the
    layer-count-weighted mean of one simulated layer per kind, every kind finite."""
    from h2m2sim.decode.iteration import layer_kinds
    m = load_model({"base": "jamba-mini", "layers": 8, "hidden": 1024, "heads": 8,
                    "kv_heads": 2, "head_dim": 128, "ffn_dim": 2048, "vocab": 1000,
                    "moe_experts": 4, "ssm_dt_rank": 64})
    assert len(m.layer_groups()) == 3
    split = {"qkv": 1, "attention": 1, "fc": 4}
    lay = run_layer(system, m, 2, 256, split, cache=NOCACHE)
    parts = [(n, run_layer(system, v, 2, 256, split, cache=NOCACHE))
             for _, v, n in layer_kinds(m)]
    assert all(np.isfinite(p.time_ns) and p.time_ns > 0 for _, p in parts)
    assert lay.time_ns == pytest.approx(sum(n * p.time_ns for n, p in parts) / 8)
    it = run_iteration(system, m, 2, 256, Mapping(split=split, mapper="fixed"), cache=NOCACHE)
    assert it.iteration_ns == pytest.approx(8 * lay.time_ns)
    assert "per kind" in it.note


def test_sides_built_alike_share_their_simulations():
    """Two sides of one spec under different names present the same pieces: their keys
    agree, so a piece simulated on one serves the other (the 8-HBM system's halves)."""
    from h2m2sim.decode.iteration import _side_key
    from h2m2sim.system import resolve_system
    s = resolve_system({"preset": "hbm8"})
    assert s.side_names == ("hbm0", "hbm1")
    assert _side_key(s, "hbm0") == _side_key(s, "hbm1")
    h = resolve_system({"preset": "h2m2"})
    assert _side_key(h, "hbm") != _side_key(h, "lpddr")

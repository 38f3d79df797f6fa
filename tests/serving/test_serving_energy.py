"""Serving energy from the iteration tables: conservation, a hand check of one request,
monotonic in output length, determinism, the measured interpolation error, the analytic
estimate against a decode iteration at ``estimate``, and ``serve --json``."""
import json

import numpy as np
import pytest

from h2m2sim.allocators import make_allocator
from h2m2sim.cli import main
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.decode.energy import estimate_energy, iteration_energy
from h2m2sim.decode.job import simulate as decode_iteration
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.deployment import resolve_model
from h2m2sim.serving.energy import EstimateEnergy
from h2m2sim.serving.run import simulate
from h2m2sim.serving.timing import TableGrid, build_tables
from h2m2sim.serving.traces import RequestTrace
from h2m2sim.system.config import resolve_system

BPT = 1024


class AffineEnergyEval(PointEvaluator):
    """Times and energies affine in (batch, total tokens): exact in the bilinear tables."""

    label = "test affine evaluator with energy"
    cycle_level = False

    def evaluate(self, phase, batch, ctx, layout):
        return self.cost(phase, batch, ctx, layout).time_s

    def cost(self, phase, batch, ctx, layout):
        n = float(np.sum(ctx))
        if phase == "decode":
            return PointCost(2e-3 + 1e-5 * batch + 1e-7 * n, 0.5 + 1e-3 * batch + 2e-5 * n)
        if phase == "prefill":
            return PointCost(2e-3 + 1e-6 * n, 0.4 + 3e-4 * n)
        return PointCost(1e-8 * n, 1e-6 * n)

    def cache_key(self):
        return {"affine-energy": 1}


def _tables(layouts, ev=None, max_batch=16, max_tokens=512):
    return build_tables(ev or AffineEnergyEval(), layouts, TableGrid(max_batch, max_tokens),
                        cache=False)


def _run(trace, alloc="paged", cap_tokens=4096, **cfg):
    cfg.setdefault("max_batch", 16)
    cfg.setdefault("max_context_tokens", 512)
    c = ServingConfig(**cfg)
    opts = {"max_context_tokens": c.max_context_tokens}
    if alloc == "odma":
        opts.update(window=50, refresh_every=20)
    a = make_allocator(alloc, cap_tokens * BPT, BPT, **opts)
    return simulate(trace, c, a, _tables([a.kv_layout], None, c.max_batch,
                                         c.max_context_tokens))


def _trace(n=200, seed=0, rate=20.0, max_out=200):
    rng = np.random.default_rng(seed)
    return RequestTrace(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(1, 100, n),
                        rng.integers(1, max_out, n), None, "synthetic")


def _one(prompt, out):
    return RequestTrace(np.array([1.0]), np.array([prompt]), np.array([out]), None, "one")


def test_one_request_is_its_iterations_energies():
    # prefill of 100 tokens, then 4 decode steps at 101..104 tokens held
    m = _run(_one(100, 5)).metrics
    want = 0.4 + 3e-4 * 100 + sum(0.5 + 1e-3 + 2e-5 * c for c in (101, 102, 103, 104))
    assert m["energy_j"] == pytest.approx(want, rel=1e-9)
    assert m["energy_per_output_token_j"] == pytest.approx(want / 5, rel=1e-9)
    assert m["energy_breakdown_j"]["decode_energy_j"] == pytest.approx(want - 0.43, rel=1e-9)


@pytest.mark.parametrize("alloc", ["static", "paged", "odma"])
def test_breakdown_conserves_and_steps_add_up(alloc):
    res = _run(_trace(), alloc, cap_tokens=3000)
    m = res.metrics
    assert m["energy_j"] == pytest.approx(sum(m["energy_breakdown_j"].values()), rel=1e-12)
    # the decode windows sum the same per-step energies the tables give step by step
    steps, tokens = m["decode_steps"], m["decode_steps"] * m["mean_decode_batch"]
    assert m["energy_breakdown_j"]["decode_energy_j"] >= 0.5 * steps + 1e-3 * tokens
    assert m["energy_per_output_token_j"] == pytest.approx(m["energy_j"] / m["output_tokens"])


def test_requests_apart_add_up():
    # arrivals far apart: the run is the requests one after another
    prompts, outs = np.array([10, 50, 30]), np.array([7, 3, 20])
    t = RequestTrace(np.array([0.0, 100.0, 200.0]), prompts, outs, None, "apart")
    m = _run(t).metrics
    want = sum(_run(_one(p, o)).metrics["energy_j"] for p, o in zip(prompts, outs))
    assert m["energy_j"] == pytest.approx(want, rel=1e-12)


def test_energy_grows_with_output_length():
    e = [_run(_one(60, n)).metrics["energy_j"] for n in (1, 2, 10, 100)]
    assert all(a < b for a, b in zip(e, e[1:]))
    base, more = _trace(seed=3), _trace(seed=3)
    more = RequestTrace(more.arrival_s, more.prompt_tokens, more.output_tokens + 20, None, "x")
    assert _run(more, "static").metrics["energy_j"] > _run(base, "static").metrics["energy_j"]


def test_deterministic():
    a, b = (json.dumps(_run(_trace(seed=5), "odma").metrics, sort_keys=True, default=str)
            for _ in range(2))
    assert a == b


def test_time_only_evaluator_reports_no_energy():
    class TimeOnly(AffineEnergyEval):
        def cost(self, phase, batch, ctx, layout):
            return PointCost(super().cost(phase, batch, ctx, layout).time_s)

    tabs = _tables([CONTIGUOUS], TimeOnly())
    assert not tabs.prices_energy and tabs.energy_error_summary() == {}
    a = make_allocator("static", 4096 * BPT, BPT, max_context_tokens=512)
    m = simulate(_one(10, 5), ServingConfig(max_batch=16, max_context_tokens=512), a,
                 tabs).metrics
    assert m["energy_j"] is None and m["energy_per_output_token_j"] is None
    assert m["decode_steps"] == 4


def test_energy_interpolation_error_is_measured():
    tabs = _tables([CONTIGUOUS, KVLayout.paged(16)])
    errs = tabs.energy_error_summary()
    assert set(errs) == set(tabs.error_summary())
    for e in errs.values():                      # affine: exact up to rounding
        assert e["max"] < 1e-9
    assert tabs.decode_step_j(3, [10, 20, 30], CONTIGUOUS) == pytest.approx(
        0.5 + 3e-3 + 2e-5 * 60)
    assert tabs.prefill_j(np.array([10, 20])) == pytest.approx(0.4 + 3e-4 * 30)
    assert tabs.kv_copy_j(1000) == pytest.approx(1e-3)


def test_analytic_estimate_is_the_decode_estimate_of_the_same_iteration():
    """The analytic evaluator's energy is what a decode iteration at ``estimate`` prices
    for the mapping that keeps everything on the serving side (the decode job's own
    estimate path with that split), over the same iteration time."""
    system, model = resolve_system("h2m2", "system"), resolve_model("opt-1.3b")
    d = decode_iteration(system, model, 2, 256, "greedy", fidelity="estimate")
    all_first = {k[len("units_"):]: v for k, v in d.items() if k.startswith("units_")}
    t_ns = d["iteration_time_ns"]
    e = estimate_energy(system, model, 2, (256, 256), all_first, system.side_names)
    want = iteration_energy(system, e, t_ns, 2, "estimate")["energy_j"]
    est = EstimateEnergy(system, system.side_names[0], model, 1)
    got = est.iteration_j("decode", 2, np.array([256, 256]), t_ns * 1e-9)
    assert got == pytest.approx(want, rel=1e-6)


def test_an_iteration_shapes_kernels_are_counted_once_whatever_its_time(monkeypatch):
    """The analytic energy of one (phase, batch, contexts) is its kernels' work, which
    does not depend on the time, plus background over the time: tables ask for the same
    shape at several times (each layout's table, a mixed step's affine parts, each
    point's evaluator of the same system), and the kernel graph is built once for it,
    with the same joules as built each time."""
    import h2m2sim.serving.energy as serving_energy
    system, model = resolve_system("h2m2", "system"), resolve_model("opt-1.3b")
    ctx = np.array([100, 300])

    def evaluator():
        return EstimateEnergy(system, system.side_names[0], model, 1)

    def alone(t):
        monkeypatch.setattr(serving_energy, "_WORK", {})
        return evaluator().iteration_j("decode", 2, ctx, t)
    want = [alone(0.0), alone(1e-3)]
    monkeypatch.setattr(serving_energy, "_WORK", {})
    built = []
    monkeypatch.setattr(serving_energy, "estimate_energy",
                        lambda *a, **k: built.append(a) or estimate_energy(*a, **k))
    est = evaluator()
    got = [est.iteration_j("decode", 2, ctx, t) for t in (0.0, 1e-3, 0.0)]
    got.append(evaluator().iteration_j("decode", 2, ctx, 1e-3))
    assert got == [*want, *want] and want[1] > want[0]
    assert len(built) == 1
    est.iteration_j("prefill", 2, ctx, 1e-3)
    est.iteration_j("decode", 2, np.array([100, 301]), 1e-3)
    EstimateEnergy(system, system.side_names[0], model, 2).iteration_j("decode", 2, ctx, 0)
    assert len(built) == 4


def test_serve_json_has_energy(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    assert main(["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4",
                 "--model", "deepseek-r1-distill-qwen-7b", "--max-requests", "60", "--json",
                 "--evaluator", "analytic", "--allocator", "paged"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["energy_j"] > 0
    assert m["energy_per_output_token_j"] == pytest.approx(m["energy_j"] / m["output_tokens"])
    assert m["energy_j"] == pytest.approx(sum(m["energy_breakdown_j"].values()))
    assert set(m["energy_interpolation_error"]) == set(m["interpolation_error"])


def test_cycle_evaluator_prices_energy_like_the_estimate():
    """The cycle-level points price their simulated pieces' activities: energy grows with
    context and batch, and lands near the analytic estimate of the same iteration (the
    estimate leaves out the LM head and streams DRAM ideally)."""
    from h2m2sim.model import ModelSpec
    from h2m2sim.serving.timing.cycle_eval import CycleEvaluator
    tiny = ModelSpec(name="tiny-gqa", layers=2, hidden=512, heads=4, kv_heads=1,
                     head_dim=128, ffn_dim=1024, vocab=1024, max_context=8192, dtype="bf16")
    ev = CycleEvaluator(tiny, "mlu370-x4", cards=1, cache=False)
    est = EstimateEnergy(ev.system, ev.side, tiny, 1)
    pts = [(1, 64), (1, 256), (4, 256)]
    costs = [ev.cost("decode", b, np.full(b, n), CONTIGUOUS) for b, n in pts]
    assert costs[0].energy_j < costs[1].energy_j < costs[2].energy_j
    for (b, n), c in zip(pts, costs):
        ratio = est.iteration_j("decode", b, np.full(b, n), c.time_s) / c.energy_j
        assert 0.7 < ratio < 1.0
    assert ev.cost("kv_copy", 1, np.array([256]), CONTIGUOUS).energy_j > 0


def test_serving_job_with_a_baseline_has_relative_energy():
    from types import SimpleNamespace as NS

    from h2m2sim.model import load_model
    from h2m2sim.runner import ENERGY_METRIC, _relative_energy
    from h2m2sim.serving.job import run_serving

    def cfg(cards):
        system = resolve_system({"preset": "mlu370-x4", "name": f"x{cards}", "cards": cards})
        return NS(workload=NS(serving=ServingConfig(trace="azure2023_code", max_requests=60,
                                                    max_context_tokens=8192)),
                  policy=NS(allocator="paged", allocator_params={}), system=system,
                  model=load_model("deepseek-r1-distill-qwen-7b"),
                  simulation=NS(fidelity="estimate", seed=0, cache=False, cache_dir=None))

    ours, base = run_serving(cfg(2)), run_serving(cfg(1))
    r = _relative_energy(ours, base, ENERGY_METRIC["serving"])
    assert r["baseline_energy_per_output_token_j"] == base["energy_per_output_token_j"]
    assert r["relative_energy"] == pytest.approx(ours["energy_per_output_token_j"]
                                                 / base["energy_per_output_token_j"])
    assert _relative_energy({"energy_per_output_token_j": None}, base,
                            ENERGY_METRIC["serving"]) == {}

"""BMC cost model: schedules (allocation and copy counts), the U shape, the analytical
optimum and speculative-decoding accounting."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2m2sim.compute import RooflineDevice
from h2m2sim.compute.bmc import (
    TABLE4_RESPECIALIZE_FACTOR,
    AttentionShape,
    BMCCostModel,
    round_pow2,
    rows_per_allocation,
    schedule,
)
from h2m2sim.errors import ConfigError


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    return RooflineDevice("cpu-ddr5", cache_dir=tmp_path_factory.mktemp("bmc_cache"))


@pytest.fixture(scope="module")
def model(cpu):
    return BMCCostModel(cpu, AttentionShape.from_model("opt-13b", 8))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 3000), r=st.integers(1, 3000))
def test_schedule_counts(n, r):
    s = schedule(n, r)
    rr = min(r, n)
    assert s.steps == n and s.tokens == n
    assert s.allocations == math.ceil(n / rr)          # T = ceil(N / r)
    assert s.copies == s.allocations - 1               # every re-allocation copies
    assert np.all(s.padded >= np.arange(1, n + 1))     # attention covers the valid rows
    assert np.all(s.padded - np.arange(1, n + 1) < rr)  # ... plus fewer than r spare rows
    assert np.all(s.padded <= n)
    # copied rows are the tokens already written: r, 2r, 3r, ...
    assert list(s.copy_rows[s.copy_rows > 0]) == [i * rr for i in range(1, s.allocations)]


def test_iterative_and_upfront():
    it = schedule(100, 1)
    assert it.allocations == 100 and it.copies == 99
    assert list(it.copy_rows) == list(range(100))       # copies every step
    assert list(it.padded) == list(range(1, 101))       # no padding
    up = schedule(100, 100)
    assert up.allocations == 1 and up.copies == 0 and int(up.copy_rows.sum()) == 0
    assert np.all(up.padded == 100)
    assert rows_per_allocation("iterative", 100) == 1
    assert rows_per_allocation("upfront", 100) == 100
    assert rows_per_allocation("bmc", 1024, T=16) == 64
    assert rows_per_allocation("bmc", 1024, r=10) == 10
    assert rows_per_allocation("bmc-auto", 1024, auto_T=22.5) == 64
    with pytest.raises(ConfigError, match="did you mean 'upfront'"):
        rows_per_allocation("upfornt", 100)


def test_speculative_accounting():
    # acceptance independent of the tree size (exponent 0): exactly m tokens per step
    s = schedule(4096, 512, k=26, m=4, acceptance_exponent=0)
    assert s.tokens == 4096
    assert s.steps == 1024                               # m tokens per step
    before = np.cumsum(s.accepted) - s.accepted           # tokens held before each step
    assert np.all(s.queries == np.minimum(26, s.padded - before))  # candidates in spare rows
    assert np.all(s.accepted == 4)
    # default: fewer candidates near the end of a block accept fewer tokens
    d = schedule(4096, 512, k=26, m=4)
    assert d.tokens == 4096 and d.steps > 1024 and d.allocations == 8
    full = d.queries == 26
    assert np.all(d.accepted <= d.queries)
    assert d.accepted[full].mean() == pytest.approx(4, abs=0.05)
    lin = schedule(4096, 512, k=26, m=4, acceptance_exponent=1)
    assert lin.steps > d.steps
    assert s.allocations == 8 and s.copies == 7
    # fractional m: the average over the run
    f = schedule(4000, 4000, k=8, m=2.5, acceptance_exponent=0)
    assert f.steps == 1600 and set(np.unique(f.accepted)) == {2, 3}
    # spare rows limit the candidates (and so the accepted tokens)
    small = schedule(64, 4, k=26, m=4, acceptance_exponent=0)
    assert np.all(small.queries <= 4) and small.tokens == 64 and small.steps == 16
    tight = schedule(64, 3, k=26, m=4, acceptance_exponent=0)
    assert tight.steps > 64 / 4 and np.all(tight.accepted <= tight.queries)
    with pytest.raises(ConfigError):
        schedule(100, 4, k=2, m=3)
    # prompt rows are written by prefill, not copied
    p = schedule(100, 16, prompt=40)
    assert p.steps == 60 and p.copy_rows[0] == 0 and p.padded[0] == 48


def test_costs_u_shaped_and_optimum(model):
    for n in (128, 512, 2048):
        sw = model.sweep(n)
        tot = np.array([b.total_ns for _, b in sw])
        i = int(np.argmin(tot))
        assert 0 < i < len(tot) - 1                      # interior optimum
        assert np.all(np.diff(tot[:i + 1]) < 0)          # decreasing then ...
        assert np.all(np.diff(tot[i:]) > 0)              # ... increasing: U shape
    # extremes: upfront has no copies, iterative copies every step
    it = model.run(512, 1)
    up = model.run(512, 512)
    assert up.copy_ns == 0 and up.copies == 0 and it.copies == 511
    assert it.copy_ns > 0 and up.sdpa_ns > it.sdpa_ns
    # the optimum doubles when N quadruples
    assert model.optimal_T(2048) == 2 * model.optimal_T(512)


def test_analytical_T_formula(model):
    n = 1024
    pt = model.paper_terms(n)
    assert pt["c_prime"] == pytest.approx(pt["c_sdpa_ns_per_row"] / pt["c_copy_ns_per_row"])
    t = model.analytical_T(n)
    assert t == pytest.approx(math.sqrt(n * pt["c_prime"]))
    # Eq. 7 in the paper's units for fp16 MHA: sqrt(N alpha*BW / (2 beta*C)) with
    # alpha*BW in bytes/s and beta*C in MAC/s
    assert t == pytest.approx(math.sqrt(n * pt["alpha_bw_gbps"] * 1e9
                                        / (2 * pt["beta_c_tmacs"] * 1e12)), rel=1e-9)
    # the measured copy rate is the device's
    assert pt["alpha_bw_gbps"] == pytest.approx(model.device.copy_gbps())
    # speculative: sqrt(N c_sdpa(k) / (m c_copy))
    ts = model.analytical_T(n, k=26, m=4)
    assert ts == pytest.approx(math.sqrt(n * model.c_sdpa_ns(n, 26)
                                         / (4 * model.c_copy_ns(n))))
    # bmc-auto uses the rounded analytical T; it is within 2x of the simulated optimum
    assert model.auto_r(n) == n // round_pow2(t)
    opt = model.optimal_T(n)
    assert opt / 2 <= round_pow2(t) <= 2 * opt
    assert round_pow2(22.5) == 16 and round_pow2(23) == 32 and round_pow2(0.3) == 1


def test_breakdown_adds_up_and_scales(model, cpu):
    b = model.run(1024, 64)
    assert b.total_ns == pytest.approx(b.alloc_ns + b.copy_ns + b.sdpa_ns)
    assert b.allocations == 16 and b.copies == 15
    assert b.copied_bytes == sum(64 * i for i in range(1, 16)) * \
        model.shape.row_bytes * model.shape.layers
    # copy time is priced at the measured copy rate
    per_row = model.shape.row_bytes * model.shape.layers / cpu.copy_gbps()
    assert model.c_copy_ns(1024) == pytest.approx(per_row)
    # the optimum does not depend on the model size (same device)
    small = BMCCostModel(cpu, AttentionShape.from_model("opt-1.3b", 8))
    for n in (512, 2048):
        assert small.optimal_T(n) == model.optimal_T(n)


def test_zero_fill_allocation_moves_optimum_down(tmp_path):
    base = RooflineDevice("cpu-ddr5", cache_dir=tmp_path)
    zf = RooflineDevice("cpu-ddr5", spec={"zero_fill_alloc": True}, cache_dir=tmp_path)
    sh = AttentionShape.from_model("opt-13b", 8)
    a, b = BMCCostModel(base, sh), BMCCostModel(zf, sh)
    assert b.c_copy_ns(1024) > a.c_copy_ns(1024)
    assert b.analytical_T(1024) < a.analytical_T(1024)
    assert b.run(1024, 64).alloc_ns > a.run(1024, 64).alloc_ns


def test_respecialize_factor_prices_only_allocating_steps(model, cpu):
    """The Table IV per-shape SDPA overhead applies to the steps that allocate: every
    step of the iterative scheme, T of BMC's, one of upfront's; off by default."""
    assert model.respecialize_factor == 1.0
    jit = BMCCostModel(cpu, model.shape, respecialize_factor=TABLE4_RESPECIALIZE_FACTOR)
    f = TABLE4_RESPECIALIZE_FACTOR
    assert f == pytest.approx(1 / 0.93, rel=0.01)
    n = 1024
    it0, it1 = model.run(n, 1), jit.run(n, 1)
    assert it1.sdpa_ns == pytest.approx(f * it0.sdpa_ns)
    assert it1.copy_ns == it0.copy_ns and it1.alloc_ns == it0.alloc_ns
    s = schedule(n, 64)
    first = model.sdpa_ns(s.padded[s.alloc > 0]).sum()
    assert jit.run(n, 64).sdpa_ns == pytest.approx(model.run(n, 64).sdpa_ns
                                                   + (f - 1) * first)
    up0, up1 = model.run(n, n), jit.run(n, n)
    assert up1.sdpa_ns == pytest.approx(up0.sdpa_ns + (f - 1) * model.sdpa_ns(n))
    with pytest.raises(ConfigError):
        BMCCostModel(cpu, model.shape, respecialize_factor=0.9)

"""BMC allocator: extents in multiples of r, copies on re-allocation, invariants."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2m2sim.allocators import ALLOCATORS, make_allocator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS

BPT = 1000


def _run(alloc, req, prompt, n_max):
    assert alloc.reserve(req, prompt)
    for n in range(prompt + 1, n_max + 1):
        if not alloc.grow(req, n):
            return False
    return True


def test_registered_and_modes():
    assert "bmc" in ALLOCATORS
    a = make_allocator("bmc", 10**8, BPT, max_context_tokens=1024)
    assert a.r == 64 and a.kv_layout == CONTIGUOUS     # default T = 16
    it = make_allocator("bmc", 10**8, BPT, max_context_tokens=256, mode="iterative")
    assert _run(it, 1, 0, 256)
    assert it.counts["alloc"] == 256 and it.counts["migrate"] == 255
    up = make_allocator("bmc", 10**8, BPT, max_context_tokens=256, mode="upfront")
    assert _run(up, 1, 0, 256)
    assert up.counts["alloc"] == 1 and up.counts["migrate"] == 0 and up.migrated_bytes == 0
    assert up.attention_tokens(1) == 256


def test_copy_count_and_bytes():
    a = make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, spare_rows=100)
    assert _run(a, 7, 0, 1024)
    assert a.counts["alloc"] == 11 and a.counts["migrate"] == 10   # ceil(1024/100)
    assert a.capacity_of(7) == 1024                                  # capped at N
    assert a.migrated_bytes == sum(range(100, 1001, 100)) * BPT
    ev = [e for e in a.events if e.kind == "migrate"]
    assert [e.tokens for e in ev] == list(range(100, 1001, 100))
    a.release(7)
    assert a.reserved_tokens == 0


def test_bmc_auto_from_device(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path))
    a = make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, mode="bmc-auto",
                       system="cpu-ddr5", model="opt-13b", batch=8)
    assert a.r in (32, 64) and 10 < a.auto_T < 40
    b = make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, mode="bmc-auto", auto_T=7)
    assert b.r == 128
    with pytest.raises(ConfigError, match="bmc-auto"):
        make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, mode="bmc-auto")
    with pytest.raises(ConfigError, match="allocator"):
        make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, mode="sometimes")
    with pytest.raises(ConfigError):
        make_allocator("bmc", 10**8, BPT, max_context_tokens=1024, bogus=1)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 300)), min_size=1,
                    max_size=60),
       r=st.integers(1, 64))
def test_invariants_random_ops(ops, r):
    a = make_allocator("bmc", 4000 * BPT, BPT, max_context_tokens=512, spare_rows=r)
    live = {}
    for req, amount in ops:
        if req in live:
            if amount % 5 == 0:
                a.release(req)
                del live[req]
            else:
                new = min(512, live[req] + amount)
                if a.grow(req, new):
                    live[req] = new
                    cap = a.capacity_of(req)
                    assert cap >= new and (cap % r == 0 or cap == 512)
        elif a.reserve(req, min(amount, 500)):
            live[req] = min(amount, 500) + 1
        a.check_invariants()
    for req in list(live):
        a.release(req)
    a.check_invariants()
    assert a.reserved_tokens == 0


def test_serving_charges_bmc_copies(capsys, tmp_path, monkeypatch):
    """End to end through ``h2m2sim serve``: iterative copies cost far more migration
    time than BMC with r = 64, and upfront none."""
    import json

    from h2m2sim.cli import main
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    base = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4", "--model",
            "deepseek-r1-distill-qwen-7b", "--max-requests", "60", "--json",
            "--evaluator", "analytic", "--allocator", "bmc"]
    mig = {}
    for mode in ("mode=iterative", "spare_rows=64", "mode=upfront"):
        assert main(base + ["--allocator-param", mode]) == 0
        m = json.loads(capsys.readouterr().out)
        mig[mode] = m["time_breakdown_s"]["migration_time_s"]
    assert mig["mode=iterative"] > 10 * mig["spare_rows=64"] > 0
    assert mig["mode=upfront"] == 0

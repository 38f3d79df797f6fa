"""Trace formats: our npz, Ramulator 2 LoadStore and DRAMsim3 text round-trip."""
import numpy as np
import pytest

from dram_models import trace as tr
from dram_models.errors import ConfigError


@pytest.mark.parametrize("fmt", tr.FORMATS)
def test_round_trip(tmp_path, fmt):
    rng = np.random.default_rng(1)
    t = tr.Trace(rng.integers(0, 2**32, 100).astype(np.uint64) & ~np.uint64(31),
                 rng.random(100) < 0.3, np.arange(100) * 3)
    path = tr.save(t, tmp_path / f"t.{fmt}", fmt)
    back = tr.load(path, fmt)
    assert np.array_equal(back.addr, t.addr) and np.array_equal(back.is_write, t.is_write)
    if fmt != "ramulator":  # Ramulator 2 trace lines carry no time
        assert np.array_equal(back.arrival, t.arrival)


def test_malformed_line_named(tmp_path):
    p = tmp_path / "bad.trace"
    p.write_text("0x40 READ 1\n0x80 RAED 2\n")
    with pytest.raises(ConfigError) as info:
        tr.load(p, "dramsim3")
    assert info.value.key.endswith("bad.trace:2")
    p.write_text("LD 0x40\nLD\n")
    with pytest.raises(ConfigError) as info:
        tr.load(p, "ramulator")
    assert info.value.key.endswith(":2")

"""tools/store_forward_probe.py: its controls are controls (the store of mode
"elsewhere" never reaches the lanes the pass reads, so the chain computes what the pass
alone does, while "same" does change them; "register" stores nothing), and the command
prints one line per lane count. Its timings are a measurement, not a test."""
from __future__ import annotations

import inspect
import sys

import numpy as np

from scriptmod import load_tool

sfp = load_tool("store_forward_probe")


def _run(mode: str, lanes: int, n: int = 500):
    a = np.arange(lanes + 64, dtype=np.int64)
    s = sfp._chain(a, n, lanes, sfp.MODES[mode])
    return s, a


def test_elsewhere_stores_leave_the_passed_lanes_alone():
    for lanes in (16, 64):
        s0, a0 = _run("none", lanes)
        s1, a1 = _run("elsewhere", lanes)
        s2, a2 = _run("same", lanes)
        assert s1 == s0
        assert np.array_equal(a1[:lanes], a0[:lanes])
        assert not np.array_equal(a1[lanes:], a0[lanes:])     # it did store
        assert not np.array_equal(a2[:lanes], a0[:lanes])     # "same" stores into them


def test_probe_prints_a_line_per_lane_count(capsys):
    assert sfp.main(["--iterations", "1000"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["16", "64"]
    assert all("stall" in ln for ln in lines)


def test_register_control_leaves_the_array_as_the_pass_alone_does():
    for lanes in (16, 64):
        _, a0 = _run("none", lanes)
        _, a3 = _run("register", lanes)
        assert np.array_equal(a3, a0)


def test_the_probe_module_is_one_numbas_disk_cache_can_import_again():
    """The compiled chain's module is found by name (tests/scriptmod registers it): a
    function of an unregistered module is cached under "<dynamic>", and every later run
    that loads it from the cache fails to import that."""
    assert inspect.getmodule(sfp._chain.py_func) is sfp
    assert sys.modules[sfp.__name__] is sfp

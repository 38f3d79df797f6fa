"""The guard of ``python -m dram_models.bench`` and ``replay``: user errors are one line
and status 2, bugs one line and status 70 (the traceback with --debug), Ctrl-C 130 and a
closed stdout 141, both silent; counts of zero are refused, never replaced by defaults;
a bad number in a standard is blamed on its own key."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from dram_models import _cli, bench, replay
from dram_models.errors import ConfigError
from dram_models.spec import PRESET_DIR, load_standard

BENCH = ["--standard", "lpddr5-6400", "--channels", "1", "--pattern", "seq",
         "--requests", "200"]


def _raising(exc):
    def run(*args, **kwargs):
        raise exc
    return run


def test_user_error_is_one_line(capsys):
    assert bench.main(BENCH + ["--pattern", "stride:1e30"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: pattern: 'stride:1e30'")


def test_internal_error_is_one_line_and_debug_shows_it(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "timed_run", _raising(RuntimeError("engine\nfell over")))
    assert bench.main(BENCH) == 70
    err = capsys.readouterr().err
    assert err == ("internal error: RuntimeError: engine fell over (rerun with --debug for "
                   "the traceback)\n")
    with pytest.raises(RuntimeError, match="fell over"):
        bench.main(BENCH + ["--debug"])


@pytest.mark.parametrize("exc,status", [(KeyboardInterrupt(), 130), (BrokenPipeError(), 141)])
def test_interrupt_and_closed_pipe_are_silent(monkeypatch, tmp_path, capsys, exc, status):
    monkeypatch.setattr(_cli, "timed_run", _raising(exc))
    p = tmp_path / "t.trace"
    p.write_text("LD 0x40\n")
    for run in (lambda: bench.main(BENCH), lambda: replay.main([str(p), *BENCH[:4]])):
        assert run() == status
        cap = capsys.readouterr()
        assert cap.err == "" and cap.out == ""


def test_replay_has_the_same_guard(monkeypatch, tmp_path, capsys):
    p = tmp_path / "t.trace"
    p.write_text("LD 0x40\n")
    monkeypatch.setattr(_cli, "timed_run", _raising(ValueError("bad state")))
    assert replay.main([str(p), "--standard", "lpddr5-6400"]) == 70
    assert capsys.readouterr().err.startswith("internal error: ValueError: bad state")
    with pytest.raises(ValueError):
        replay.main([str(p), "--standard", "lpddr5-6400", "--debug"])


def test_a_closed_stdout_ends_quietly_with_141():
    """``... | head -c0``: the reader is gone before the report is written."""
    proc = subprocess.Popen([sys.executable, "-m", "dram_models.bench", *BENCH],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and err == ""


@pytest.mark.parametrize("option", ["--queue-depth", "--channels", "--threads", "--repeat",
                                    "--requests"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_counts_below_one_are_refused(capsys, option, value):
    with pytest.raises(SystemExit) as info:
        bench.main(BENCH + [option, value])
    assert info.value.code == 2
    assert f"argument {option}: must be >= 1, got {value}" in capsys.readouterr().err


def test_a_given_queue_depth_and_mapping_are_used_not_defaulted(capsys):
    assert bench.main(BENCH + ["--queue-depth", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queue_depth"] == 5
    assert bench.main(BENCH + ["--mapping", ""]) == 2
    assert "controller.mapping" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(BENCH + ["--seed", "-1"])
    assert "argument --seed: must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("key,value", [
    ("tCK_ps", math.inf), ("tCK_ps", -math.inf), ("tCK_ps", math.nan), ("tCK_ps", 1e300),
    ("tCK_ps", 1e-300), ("data_rate_mtps", math.inf), ("command_bus.ACT", math.inf),
    ("command_bus.REF", 1e300), ("timing.tREFI", 1e30), ("timing.tCL", 2**62),
    ("organization.rows", 2**62), ("organization.channel_width_bits", 2**40),
])
def test_a_standard_blames_the_key_that_is_wrong(tmp_path, capsys, key, value):
    """A non-finite or absurd number in a standard file or an override is refused naming
    its own key (tCK_ps: .inf used to blame organization.burst_length)."""
    data = yaml.safe_load((PRESET_DIR / "lpddr5-6400.yaml").read_text())
    *parents, leaf = key.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[leaf] = value
    path = tmp_path / "std.yaml"
    path.write_text(yaml.safe_dump(data))
    assert bench.main(["--standard", str(path), *BENCH[2:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: standard.{key}: ")
    override = {leaf: value}
    for p in reversed(parents):
        override = {p: override}
    with pytest.raises(ConfigError) as info:
        load_standard("lpddr5-6400", override, key="side.dram")
    assert info.value.key == f"side.dram.{key}"


def test_a_size_this_machine_cannot_allocate_is_a_user_error(monkeypatch, capsys):
    """--requests 10^12 (or any count past the machine's memory) ends in one line and
    exit status 2, not in an internal error."""
    import dram_models.bench as bench_mod

    def huge(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(bench_mod, "make", huge)
    assert bench_mod.main(["--standard", "lpddr5-6400", "--pattern", "seq",
                           "--requests", str(10**12)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: out of memory") and "\n" not in err

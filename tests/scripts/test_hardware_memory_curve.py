"""scripts/hardware_memory_curve.py re-simulates a GPU memory measurement on a system
preset: its JSON report has one point per measured chunk size, the chunk sizes below one
L2 fetch share the same DRAM accesses (so their useful bandwidths are in the ratio of
their sizes), the simulated DRAM + I/O energy stays below the board's, the plot is a PNG,
and a bad measurement file or preset is one line and exit status 2. A small --requests
keeps every run to seconds (the full-size numbers are not checked here)."""
import contextlib
import io
import json
import subprocess
import sys

import pytest
from scriptmod import ROOT, SCRIPTS, load_script

MEASURED = ROOT / "workloads" / "hardware" / "h200.json"
SMALL = ["--requests", "200000"]


def _run(argv) -> tuple[int, str]:
    """(exit status, stdout) of the script's main."""
    mod = load_script("hardware_memory_curve")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = mod.main(argv)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The JSON report of a small run on h200, and the plot it wrote."""
    plot = tmp_path_factory.mktemp("plot") / "curve.png"
    rc, out = _run(["--system", "h200", "--measured", str(MEASURED), "--json",
                    "--plot", str(plot), *SMALL])
    assert rc == 0
    return json.loads(out), plot


def test_json_schema(report):
    r, _ = report
    measured = json.loads(MEASURED.read_text())["bandwidth"]["random_gather_by_bytes"]
    assert r["system"] == "h200" and r["measured_file"] == str(MEASURED)
    assert [p["bytes"] for p in r["points"]] == sorted(int(k) for k in measured)
    for p in r["points"]:
        assert set(p) >= {"bytes", "simulated_fraction", "measured_fraction",
                          "access_bytes"}
        assert 0 < p["simulated_fraction"] <= 1 and 0 < p["measured_fraction"] <= 1
        assert p["measured_fraction"] == measured[str(p["bytes"])]["frac_of_stream"]
        assert p["access_bytes"] == max(p["bytes"], 64)     # the H200's L2 fetch
    for key in ("stream_read_efficiency", "measured_stream_read_efficiency",
                "stream_write_efficiency", "measured_stream_write_efficiency"):
        assert 0 < r[key] <= 1
    lo, hi = r["measured_dram_latency_ns"]
    assert 0 < lo <= hi
    assert r["dram_latency_ns"] > 147          # the on-chip path plus a DRAM access
    assert set(r["energy"]) == {"stream_read", "gather_64B", "gather_4KiB"}
    assert set(r["targets"]) == {"stream_within_3_points", "chunks_within_8_points",
                                 "chunk_128_at_least_0.80"}
    assert all(isinstance(v, bool) for v in r["targets"].values())


def test_sub_fetch_chunks_scale_with_size(report):
    """16, 32 and 64 B chunks all cost one 64 B access: the same access rate, so their
    useful bandwidths are 1:2:4."""
    frac = {p["bytes"]: p["simulated_fraction"] for p in report[0]["points"]}
    assert frac[32] / frac[16] == pytest.approx(2, rel=0.15)
    assert frac[64] / frac[16] == pytest.approx(4, rel=0.15)


def test_energy_below_board(report):
    for name, e in report[0]["energy"].items():
        assert e["simulated_pj_per_bit"] > 0, name
        assert 0 < e["ratio"] < 1, name


def test_plot_is_png(report):
    _, plot = report
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in plot.parent.iterdir() if p != plot]   # no temporary left


def test_same_inputs_same_output():
    argv = ["--system", "h200", "--measured", str(MEASURED), "--json", "--requests",
            "20000"]
    assert _run(argv) == _run(argv)


def _bad_file(tmp_path, edit) -> str:
    data = json.loads(MEASURED.read_text())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("bandwidth"), "bandwidth"),
    (lambda d: d["bandwidth"]["random_gather_by_bytes"]["128"].pop("frac_of_stream"),
     "bandwidth.random_gather_by_bytes.128.frac_of_stream"),
    (lambda d: d["bandwidth"].update(stream_read_GBps="fast"),
     "bandwidth.stream_read_GBps"),
    (lambda d: d["energy"]["gather_64B"].pop("pj_per_bit_above_idle"),
     "energy.gather_64B.pj_per_bit_above_idle"),
])
def test_malformed_measurement_is_one_line(tmp_path, capsys, edit, key):
    path = _bad_file(tmp_path, edit)
    rc, out = _run(["--system", "h200", "--measured", path, *SMALL])
    err = capsys.readouterr().err
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and path in err and key in err
    assert "Traceback" not in err


def test_unknown_system_exits_2():
    """The real process: exit status 2 and one line, no traceback."""
    proc = subprocess.run([sys.executable, str(SCRIPTS / "hardware_memory_curve.py"),
                           "--system", "no-such-gpu", "--measured", str(MEASURED)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert "no-such-gpu" in proc.stderr and "Traceback" not in proc.stderr

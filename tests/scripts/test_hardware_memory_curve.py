"""scripts/hardware_memory_curve.py re-simulates a GPU memory measurement on a system
preset: its JSON report has one point per measured chunk size, the chunk sizes below one
L2 fetch share the same DRAM accesses (so their useful bandwidths are in the ratio of
their sizes), the simulated DRAM + I/O energy stays below the board's, the plot is a PNG,
and a bad measurement file or preset (or a measurement of another device) is one line and
exit status 2. A small --requests keeps every run to seconds; the full-size runs, whose
targets must hold for every shipped measurement, are marked slow."""
import contextlib
import io
import json
import subprocess
import sys

import pytest
from scriptmod import ROOT, SCRIPTS, load_script

HW = ROOT / "workloads" / "hardware"
MEASURED = HW / "h200.json"
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
    """The JSON report of a small run on h200, and the plot it wrote (into a folder it
    made)."""
    plot = tmp_path_factory.mktemp("plot") / "new" / "curve.png"
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
    (lambda d: d["bandwidth"]["random_gather_by_bytes"]["128"].update(frac_of_stream=1.5),
     "bandwidth.random_gather_by_bytes.128.frac_of_stream"),
    (lambda d: d["bandwidth"]["random_gather_by_bytes"]["64"].update(
        frac_of_stream=float("inf")), "bandwidth.random_gather_by_bytes.64.frac_of_stream"),
    (lambda d: d["bandwidth"].update(stream_read_GBps=1e9), "bandwidth.stream_read_GBps"),
    (lambda d: d["bandwidth"].update(stream_write_GBps=float("nan")),
     "bandwidth.stream_write_GBps"),
    (lambda d: d["device"].update(mem_bus_bits="wide"), "device.mem_bus_bits"),
    (lambda d: d["device"].update(mem_bus_bits=True), "device.mem_bus_bits"),
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


@pytest.mark.parametrize("system, measured, edit, key", [
    # an H200 against a card of 384-bit LPDDR5: by its bus width, or (without one) by its
    # stream read, 14 times the card's peak
    ("mlu370-x4", MEASURED, None, "device.mem_bus_bits"),
    ("mlu370-x4", MEASURED, lambda d: d["device"].pop("mem_bus_bits"),
     "bandwidth.stream_read_GBps"),
    # an H100 against the H200: below the H200's peak, but a 5,120-bit bus, not 6,016
    ("h200", HW / "h100-memory.json", None, "device.mem_bus_bits"),
])
def test_another_device_is_refused(tmp_path, capsys, system, measured, edit, key):
    path = str(measured) if edit is None else _bad_file(tmp_path, edit)
    rc, out = _run(["--system", system, "--measured", path, *SMALL])
    err = capsys.readouterr().err
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and key in err and "do not match" in err and system in err


def test_plot_onto_a_directory_leaves_nothing(tmp_path, capsys):
    rc, out = _run(["--system", "h200", "--measured", str(MEASURED), "--plot",
                    str(tmp_path), "--requests", "1000"])
    err = capsys.readouterr().err
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--plot" in err
    assert not list(tmp_path.iterdir())


def test_plot_onto_the_measured_file_is_refused(tmp_path, capsys):
    path = _bad_file(tmp_path, lambda d: None)      # a copy of the shipped file
    before = (tmp_path / "bad.json").read_text()
    rc, out = _run(["--system", "h200", "--measured", path, "--plot", path, *SMALL])
    err = capsys.readouterr().err
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--plot" in err and "--measured" in err
    assert (tmp_path / "bad.json").read_text() == before


def test_a_refused_run_removes_the_plot_folder_it_made(tmp_path, capsys):
    path = _bad_file(tmp_path, lambda d: d.pop("bandwidth"))
    rc, _ = _run(["--system", "h200", "--measured", path, "--plot",
                  str(tmp_path / "new" / "deeper" / "curve.png")])
    assert rc == 2 and "bandwidth" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
@pytest.mark.parametrize("system, measured", [("h200", "h200.json"),
                                              ("h200", "h200-memory.json"),
                                              ("h100-sxm", "h100-memory.json")])
def test_targets_hold_at_full_size(system, measured):
    """The script's own pass/fail criteria, at its default request counts, for every
    shipped memory measurement: both streams within 3 points, every chunk within 8
    points, 128 B chunks at >= 0.80 of the stream read."""
    rc, out = _run(["--system", system, "--measured", str(HW / measured), "--json"])
    assert rc == 0
    assert json.loads(out)["targets"] == {"stream_within_3_points": True,
                                          "chunks_within_8_points": True,
                                          "chunk_128_at_least_0.80": True}

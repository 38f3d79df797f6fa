"""Plots from sweep results: speedup matching, figure files, one-line errors."""
from __future__ import annotations

import csv

import fakes
import pytest

from h2m2sim import plotting
from h2m2sim.cli import main
from h2m2sim.store import read_csv
from h2m2sim.sweeps import build_sweep, run_sweep

SPEC = {"base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
        "grid": {"system": ["lpddr-only", "h2m2", "hbm-8"],
                 "workload.seq": [128, 512, 2048], "workload.batch": [1, 4]}}

MAGIC = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}


pytestmark = pytest.mark.usefixtures("fake_layers")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "sweep"
    with pytest.MonkeyPatch.context() as mp:
        fakes.install(mp.setitem)
        run_sweep(build_sweep(SPEC), out, workers=1, progress=False)
    return out


def test_speedup_matches_rows_on_the_other_swept_columns(results):
    res = plotting.load_results(results)
    col, val = plotting.find_baseline_column(res, "lpddr-only")
    assert (col, val) == ("system", "lpddr-only")
    rows = plotting.add_speedup(res.rows, "iteration_time_ns", col, val, res.axes, "lower")
    by = {(r["system"], r["workload.seq"], r["workload.batch"]): r for r in res.rows}
    assert len(rows) == 18
    for r in rows:
        base = by[("lpddr-only", r["workload.seq"], r["workload.batch"])]
        assert r["speedup"] == base["iteration_time_ns"] / r["iteration_time_ns"]
        if r["system"] == "lpddr-only":
            assert r["speedup"] == 1.0
    higher = plotting.add_speedup(res.rows, "tokens_per_s", col, val, res.axes, "higher")
    r = next(x for x in higher if x["system"] == "hbm-8")
    base = by[("lpddr-only", r["workload.seq"], r["workload.batch"])]
    assert r["speedup"] == r["tokens_per_s"] / base["tokens_per_s"] > 1


def test_guess_better():
    assert plotting.guess_better("iteration_time_ns") == "lower"
    assert plotting.guess_better("tokens_per_s") == "higher"
    with pytest.raises(plotting.ConfigError):
        plotting.guess_better("kv_mystery")


@pytest.mark.parametrize("kind,ext", [("line", ".png"), ("bar", ".pdf"), ("line", ".svg")])
def test_cli_writes_figure(results, tmp_path, capsys, ext, kind):
    out = tmp_path / f"fig{ext}"
    rc = main(["plot", str(results), "--x", "workload.seq", "--y", "iteration_time_ns",
               "--hue", "system", "--baseline", "lpddr-only", "--where", "workload.batch=4",
               "--kind", kind, "--out", str(out)])
    cap = capsys.readouterr()
    text = cap.out
    assert rc == 0
    assert out.read_bytes().startswith(MAGIC[ext])
    assert cap.err.splitlines()[-1] == f"wrote {out}"     # information goes to stderr
    lines = text.splitlines()
    assert lines[0] == "speedup over lpddr-only (iteration time) by sequence length:"
    assert lines[1].split() == ["workload.seq", "128", "512", "2048"]
    assert lines[2].split()[1:] == ["1", "1", "1"]  # the baseline row is 1x everywhere
    assert not any(line.startswith("wrote") for line in lines)


def test_plot_from_bare_csv_and_default_output(results, tmp_path, capsys):
    header, rows = read_csv(results / "results.csv")
    bare = tmp_path / "mine.csv"
    with open(bare, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            w.writerow(["" if r[c] is None else r[c] for c in header])
    assert main(["plot", str(bare), "--x", "workload.seq", "--y", "tokens_per_s",
                 "--hue", "system", "--where", "workload.batch=1"]) == 0
    assert (tmp_path / "tokens_per_s_vs_workload.seq.png").is_file()


ERRORS = [
    (["--x", "workload.sq", "--y", "iteration_time_ns"], "error: --x: no column 'workload.sq'",
     "did you mean 'workload.seq'"),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--hue", "system"],
     "error: --hue: several rows have workload.seq=128, system=lpddr-only",
     "they differ in workload.batch"),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--baseline", "h2m3"],
     "error: --baseline: no swept column has the value 'h2m3'", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--out", "fig.jpg"],
     "error: --out: must end in .png, .pdf, .svg", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--where", "system=tpu"],
     "error: --where: no rows with system=tpu", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--yunit", "kb"],
     "error: --yunit: 'kb' is not a time unit", "choose ns, us, ms, s"),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--yunit", "mss"],
     "error: --yunit: 'mss' is not a time unit", "did you mean 'ms'"),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--xunit", "ms"],
     "error: --xunit: 'sequence length' has no unit to convert to 'ms'", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--baseline", "lpddr-only",
      "--yunit", "ms"], "error: --yunit: 'speedup' has no unit", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--size", "3.4"],
     "error: --size: expected WIDTHxHEIGHT in inches", ""),
    (["--x", "workload.seq", "--y", "iteration_time_ns", "--size", "0x2"],
     "error: --size: expected WIDTHxHEIGHT in inches", ""),
]


@pytest.mark.parametrize("args,prefix,fragment", ERRORS)
def test_plot_errors_are_one_line(results, tmp_path, capsys, args, prefix, fragment):
    rc = main(["plot", str(results), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(prefix) and fragment in err[0], err[0]


def test_missing_results(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "none"), "--x", "a", "--y", "b"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'none'}: no such file")

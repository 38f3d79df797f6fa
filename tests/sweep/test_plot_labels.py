"""Plot axes: readable names, units scaled from the column's suffix, speedups that name
their baseline, and paper-sized figures whose tick labels never overlap."""
from __future__ import annotations

import fakes
import pytest

from h2m2sim import plotting
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.quantities import quantity_of
from h2m2sim.sweeps import build_sweep, run_sweep

BASE = {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}}


pytestmark = pytest.mark.usefixtures("fake_layers")


def _sweep(out, spec):
    with pytest.MonkeyPatch.context() as mp:
        fakes.install(mp.setitem)
        run_sweep(build_sweep(spec), out, workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def with_baseline(tmp_path_factory):
    spec = {"base": {**BASE, "policy": {"baseline": "lpddr-only"}},
            "grid": {"system": ["h2m2", "hbm-8"], "workload.seq": [128, 512, 2048]}}
    return _sweep(tmp_path_factory.mktemp("plot") / "sweep", spec)


@pytest.mark.parametrize("col,values,label,scale", [
    ("iteration_time_ns", [6.8e7, 4.8e8], "iteration time (ms)", 1e-6),
    ("iteration_time_ns", [900.0], "iteration time (ns)", 1.0),
    ("iteration_time_ns", [1000.0], "iteration time (us)", 1e-3),
    ("total_time_ns", [3.2e10], "total time (s)", 1e-9),
    ("ttft_ms", [0.25], "TTFT (us)", 1e3),
    ("decision_s", [0.004], "decision (ms)", 1e3),
    ("kv_bytes", [6.04e8, 2.4e9], "KV (GB)", 1e-9),
    ("system.sides.hbm.capacity_bytes", [9.6e10], "HBM capacity (GB)", 1e-9),
    ("bandwidth_gbps", [544.0], "bandwidth (GB/s)", 1.0),
    ("bandwidth_gbps", [1200.0], "bandwidth (TB/s)", 1e-3),
    ("tokens_per_s", [29.3], "tokens/s", 1.0),
    ("workload.seq", [128, 2048], "sequence length", 1.0),
    ("workload.batch", [1, 4], "batch size", 1.0),
    ("breakdown.hbm.kv_ns", [0.0], "breakdown HBM KV (ns)", 1.0),
])
def test_default_axis_label_and_scale(col, values, label, scale):
    ax = plotting.axis([{col: v} for v in values], col)
    assert ax.label == label
    assert ax.scale == pytest.approx(scale)


def test_unit_override_and_label_override():
    rows = [{"iteration_time_ns": 4.8e8}]
    assert plotting.axis(rows, "iteration_time_ns", unit="S") == plotting.Axis(
        "iteration time (s)", 1e-9)
    ax = plotting.axis(rows, "iteration_time_ns", unit="us", label="step (us)")
    assert ax == plotting.Axis("step (us)", 1e-3)
    with pytest.raises(ConfigError, match="'GB' is not a time unit"):
        plotting.axis(rows, "iteration_time_ns", unit="GB")
    assert quantity_of("speedup").dimension is None


def test_rescale_leaves_no_float_noise():
    rows = plotting.rescale([{"c": 128_000_000_000, "s": "x"}, {"c": None}], "c", 1e-9)
    assert rows == [{"c": 128.0, "s": "x"}, {"c": None}]


def test_cli_labels_and_units(with_baseline, tmp_path, capsys):
    out = tmp_path / "t.svg"
    assert main(["plot", str(with_baseline), "--x", "workload.seq",
                 "--y", "iteration_time_ns", "--hue", "system", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "iteration time (ms) by sequence length:"
    ms = [float(v) for v in lines[2].split()[1:]]
    assert all(1 <= v < 1000 for v in ms)  # fake times are ~7e7 ns
    assert main(["plot", str(with_baseline), "--x", "workload.seq", "--y",
                 "iteration_time_ns", "--hue", "system", "--yunit", "s", "--ylabel", "t",
                 "--xlabel", "S", "--title", "decode", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "t by S:"
    assert [float(v) for v in lines[2].split()[1:]] == pytest.approx([m / 1e3 for m in ms])


def test_speedup_metric_names_the_recorded_baseline(with_baseline, tmp_path, capsys):
    res = plotting.load_results(with_baseline)
    assert res.baselines == ["lpddr-only"]
    assert plotting.load_results(with_baseline / "results.csv").baselines == ["lpddr-only"]
    assert main(["plot", str(with_baseline), "--x", "workload.seq", "--y", "speedup",
                 "--hue", "system", "--out", str(tmp_path / "s.png")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == \
        "speedup over lpddr-only by sequence length:"


def test_speedup_label_without_a_recorded_baseline(tmp_path):
    res = plotting.Results(["speedup"], [], [], tmp_path)
    assert plotting.speedup_label(res, "speedup") == "speedup"
    res.baselines = ["a", "b"]
    assert plotting.speedup_label(res, "speedup") == "speedup over a / b"
    assert plotting.speedup_label(res, "total_time_ns", "c") == "speedup over c (total time)"


@pytest.mark.parametrize("y,compared", [("tokens_per_s", "tokens throughput"),
                                        ("requests_per_s", "requests throughput"),
                                        ("goodput_rps", "goodput"),
                                        ("energy_per_token_j", "energy per token")])
def test_speedup_of_a_rate_names_the_metric_not_a_unit(y, compared, tmp_path):
    res = plotting.Results([y], [], [], tmp_path)
    label = plotting.speedup_label(res, y, "lpddr-only")
    assert label == f"speedup over lpddr-only ({compared})"
    assert "/s" not in label and "(tokens)" not in label and "(requests)" not in label


def test_cli_speedup_of_throughput_has_no_unit(with_baseline, tmp_path, capsys):
    assert main(["plot", str(with_baseline), "--x", "workload.seq", "--y", "tokens_per_s",
                 "--hue", "system", "--baseline", "hbm-8",
                 "--out", str(tmp_path / "t.png")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == \
        "speedup over hbm-8 (tokens throughput) by sequence length:"


def _boxes(labels):
    return [t.get_window_extent() for t in labels if t.get_visible() and t.get_text()]


def _overlap(boxes):
    return any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:]))


@pytest.mark.parametrize("kind", ["bar", "line"])
@pytest.mark.parametrize("n", [3, 12, 40])
def test_paper_figure_has_no_overlapping_ticks(kind, n):
    import matplotlib.pyplot as plt
    xs = [f"system-preset-{i}" for i in range(n)]
    hues = ["h2m2", "lpddr-only"]
    data = {(h, x): 1.0 + i * 1e-4 for h in hues for i, x in enumerate(xs)}
    fig = plotting.figure(xs, hues, data, xlabel="system", ylabel="iteration time (ms)",
                          hue="system", kind=kind)
    try:
        ax = fig.axes[0]
        assert tuple(fig.get_size_inches()) == pytest.approx(plotting.PAPER_SIZE)
        fig.canvas.draw()
        assert not _overlap(_boxes(ax.get_xticklabels()))
        ys = sorted(_boxes(ax.get_yticklabels()), key=lambda b: b.y0)
        assert not any(a.y1 > b.y0 for a, b in zip(ys, ys[1:]))
        assert ax.yaxis.get_offset_text().get_text() == ""  # no '+1' offset
        assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 7
    finally:
        plt.close(fig)


def test_numeric_axis_ticks_do_not_crowd():
    import matplotlib.pyplot as plt
    xs = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    data = {(None, x): 400.0 + x * 1e-3 for x in xs}
    for logx in (False, True):
        fig = plotting.figure(xs, [None], data, xlabel="sequence length",
                              ylabel="iteration time (ms)", logx=logx)
        try:
            fig.canvas.draw()
            assert not _overlap(_boxes(fig.axes[0].get_xticklabels()))
        finally:
            plt.close(fig)

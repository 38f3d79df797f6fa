"""``h2m2sim kernel``: JSON output with the documented keys, one-line errors."""
import json

import pytest

from h2m2sim.cli import main

SYS_YAML = """\
preset: h2m2
sides:
  hbm: {channels: 4, capacity_bytes: 4 GiB}
  lpddr: {channels: 2, capacity_bytes: 4 GiB}
mmu: {virtual_bytes: 64 GiB}
"""
KEYS = ("op", "side", "cycles", "time_ns", "flops", "bytes", "achieved_gbps", "peak_gbps",
        "compute_bound", "stall_compute_ns", "stall_memory_ns", "stall_tlb_ns", "tlb_hits",
        "tlb_misses")


@pytest.fixture
def sysfile(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(SYS_YAML)
    return str(p)


@pytest.mark.parametrize("op, extra", [("gemv", ["--m", "1"]), ("gemm", ["--m", "64"]),
                                       ("attention", ["--m", "8", "--batch", "2"])])
def test_json_output(sysfile, capsys, op, extra):
    k, n = ("128", "1024") if op == "attention" else ("1024", "1024")
    rc = main(["kernel", "--system", sysfile, "--side", "lpddr", "--op", op, "--k", k,
               "--n", n, "--json", "--page-size", "2MiB", "--fidelity", "sampled"] + extra)
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    for key in KEYS:
        assert key in d
    assert d["op"] == op and d["side"] == "lpddr" and isinstance(d["compute_bound"], bool)
    assert 0 < d["achieved_gbps"] <= d["peak_gbps"]
    assert d["cycles"] >= d["time_ns"]          # 1 GHz chip: cycles = ceil(ns)
    if op == "attention":
        assert [x["op"] for x in d["kernels"]] == ["attn_score", "softmax", "attn_value"]


def test_text_output(sysfile, capsys):
    assert main(["kernel", "--system", sysfile, "--side", "hbm", "--op", "gemv", "--m", "1",
                 "--k", "512", "--n", "512"]) == 0
    out = capsys.readouterr().out
    assert "memory-bound" in out and "GB/s" in out


@pytest.mark.parametrize("args, frag", [
    (["--side", "hbmm"], "--side: no side 'hbmm'"),
    (["--op", "gemx"], "--op: must be one of"),
    (["--m", "x"], "--m: must be an integer"),
    (["--page-size", "3000"], "--page-size: must be a power of two"),
    (["--page-size", "2 Mb ps"], "--page-size: not a size"),
    (["--fidelity", "exact"], "--fidelity: must be one of"),
    (["--m", "2"], "m: a gemv has m = 1"),
])
def test_errors_are_one_line(sysfile, capsys, args, frag):
    base = {"--side": "hbm", "--op": "gemv", "--m": "1", "--k": "64", "--n": "64"}
    flat = ["kernel", "--system", sysfile]
    given = dict(zip(args[::2], args[1::2]))
    for key, val in {**base, **given}.items():
        flat += [key, val]
    rc = main(flat)
    err = capsys.readouterr().err
    assert rc == 2 and frag in err and err.count("\n") == 1


def test_bad_system(capsys):
    assert main(["kernel", "--system", "h2m3", "--side", "hbm", "--op", "gemv", "--m", "1",
                 "--k", "64", "--n", "64"]) == 2
    assert "did you mean 'h2m2'" in capsys.readouterr().err


def _kernel_json(capsys, system, *extra, k="4096", n="4096"):
    assert main(["kernel", "--system", system, "--side", "hbm", "--op", "gemv", "--m", "1",
                 "--k", k, "--n", n, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpu_side_uses_the_gpu_kernel_model(capsys):
    d = _kernel_json(capsys, "h200")
    assert d["model"].startswith("GPU kernel model NVIDIA H200") and d["dtype"] == "bf16"
    weights = 4096 * 4096 * 2                       # bf16 bytes
    assert d["time_ns"] >= weights / d["peak_gbps"]  # bytes / (GB/s) = ns
    assert d["memory_ns"] >= weights / d["peak_gbps"]
    npu = _kernel_json(capsys, "h2m2", "--dtype", "bf16")
    assert npu["model"].startswith("NPU chip model")
    # the H200's DRAM streams the weights faster than the h2m2 HBM side runs the kernel
    assert d["memory_ns"] < npu["time_ns"]


def test_gpu_beats_the_npu_once_the_fixed_kernel_cost_is_amortized(capsys):
    gpu = _kernel_json(capsys, "h200", k="8192", n="8192")
    npu = _kernel_json(capsys, "h2m2", "--dtype", "bf16", "--fidelity", "sampled",
                       k="8192", n="8192")
    assert gpu["time_ns"] < npu["time_ns"]


def test_gpu_side_text_names_the_model_and_refuses_npu_options(capsys):
    base = ["kernel", "--system", "h200", "--side", "hbm", "--op", "gemv", "--m", "1",
            "--k", "512", "--n", "512"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "bf16 on h200/hbm" in out and "model       GPU kernel model" in out
    assert main(base + ["--unit", "mm"]) == 2
    err = capsys.readouterr().err
    assert "--unit: applies to NPU sides" in err and err.count("\n") == 1

"""Bad inputs to ``model``, ``kernel`` and ``sweep`` are one line with exit status 2:
counts past what the code can hold, options the run would not use, a kernel that does
not fit its side or computes in a storage-only type, and outputs that would replace an
input (a model file, a sweep file, a sweep's base)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from h2m2sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "workloads" / "configs" / "default.yaml"


def refused(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


@pytest.mark.parametrize("extra,fragment", [
    (["--batch", "99999999999999999999"], "--batch: must be <= 65536"),
    (["--batch", "65537"], "--batch: must be <= 65536"),
    (["--seq", str((1 << 24) + 1)], "--seq: must be <= 16777216"),
    (["--seq", "1," + "9" * 20, "--batch", "2"], "--seq: must be <= 16777216"),
    (["--export-trace", "t.npz", "--kv-layout", "paged", "--block-tokens", "9" * 20],
     "--block-tokens: must be <= 16777216"),
    (["--split", "qkv=1,qkv=2,attention=0,fc=0"], "--split: gives qkv twice"),
    (["--sides", "a,b"], "--sides: only meaningful with --split"),
    (["--kv-layout", "paged"], "--kv-layout: only meaningful with --export-trace"),
    (["--request-bytes", "64"], "--request-bytes: only meaningful with --export-trace"),
    (["--no-activations"], "--no-activations: only meaningful with --export-trace"),
    (["--export-trace", "t.npz", "--block-tokens", "4"],
     "--block-tokens: only meaningful with --kv-layout paged"),
    (["--export-trace", "t.npz", "--seed", "3"], "--seed: only meaningful with --kv-layout"),
    (["--list"], "--list: lists the zoo and takes no model name"),
])
def test_model_refuses_counts_and_unused_options(capsys, tmp_path, monkeypatch, extra,
                                                 fragment):
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["model", "opt-350m", *extra], fragment)
    assert list(tmp_path.iterdir()) == []


def test_model_export_never_replaces_the_model_file(capsys, tmp_path):
    model = tmp_path / "opt-350m.yaml"
    shutil.copy(ROOT / "workloads" / "models" / "opt-350m.yaml", model)
    before = model.read_bytes()
    refused(capsys, ["model", str(model), "--export-trace", str(model), "--format",
                     "ramulator"], "is also the input model")
    assert model.read_bytes() == before


@pytest.mark.parametrize("extra,fragment", [
    (["--m", "1000000000000"], "out of memory on side 'hbm' for the gemm kernel's operands"),
    (["--batch", "99999999999999999999"], "out of memory on side 'hbm'"),
    (["--seed", "3"], "--seed: applies to NPU sides"),
])
def test_kernel_on_a_gpu_side_refuses_what_it_cannot_run(capsys, extra, fragment):
    refused(capsys, ["kernel", "--system", "h200", "--side", "hbm", "--op", "gemm",
                     "--m", "4", "--k", "64", "--n", "64", *extra], fragment)


@pytest.mark.parametrize("extra,fragment", [
    (["--dtype", "int4"], "--dtype: int4 is a storage type"),
    (["--seed", "3"], "--seed: only meaningful with --placement scattered"),
])
def test_kernel_on_an_npu_side_refuses_meaningless_options(capsys, extra, fragment):
    refused(capsys, ["kernel", "--system", "h2m2", "--side", "hbm", "--op", "gemm",
                     "--m", "4", "--k", "64", "--n", "64", *extra], fragment)


def write_sweep(path: Path, base: Path = BASE) -> Path:
    path.write_text(f"base: {base}\ngrid:\n  workload.seq: [128, 256]\n")
    return path


@pytest.mark.parametrize("name", ["sweep.yaml", "results.csv", "timings.csv"])
def test_sweep_out_never_replaces_the_sweep_file(capsys, tmp_path, name):
    spec = write_sweep(tmp_path / name)
    before = spec.read_bytes()
    refused(capsys, ["sweep", str(spec), "--out", str(tmp_path), "--workers", "1"],
            "is also the input sweep")
    assert spec.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_sweep_out_never_replaces_its_base(capsys, tmp_path):
    base = tmp_path / "out" / "sweep.yaml"
    base.parent.mkdir()
    shutil.copy(BASE, base)
    spec = write_sweep(tmp_path / "s.yaml", base)
    refused(capsys, ["sweep", str(spec), "--out", str(base.parent), "--workers", "1"],
            "is also the input base")
    assert base.read_bytes() == BASE.read_bytes()


@pytest.mark.parametrize("target,fragment", [("spec", "is also the input sweep"),
                                             ("base", "is also the input base")])
def test_sweep_point_timeline_never_replaces_an_input(capsys, tmp_path, target, fragment):
    base = tmp_path / "base.yaml"
    shutil.copy(BASE, base)
    spec = write_sweep(tmp_path / "s.yaml", base)
    victim = spec if target == "spec" else base
    before = victim.read_bytes()
    refused(capsys, ["sweep", str(spec), "--point", "0", "--timeline", str(victim)],
            fragment)
    assert victim.read_bytes() == before


@pytest.mark.parametrize("extra", [["--workers", "2"], ["--scheduler", "tcp://h:1"]])
def test_sweep_point_refuses_options_it_would_ignore(capsys, tmp_path, extra):
    spec = write_sweep(tmp_path / "s.yaml")
    refused(capsys, ["sweep", str(spec), "--point", "0", *extra], "unused with --point")


def test_resuming_from_the_stored_sweep_file_is_allowed(tmp_path):
    from h2m2sim.sweeps.run import run_sweep
    from h2m2sim.sweeps.spec import read_sweep
    out = tmp_path / "out"
    spec = {"base": {"system": "h2m2", "model": "gpt3-175b",
                     "simulation": {"fidelity": "estimate"}},
            "grid": {"workload.seq": [64]}}
    from h2m2sim import api
    api.sweep(spec, out)
    report = run_sweep(read_sweep(out / "sweep.yaml"), out, workers=1, resume=True)
    assert report.skipped == 1

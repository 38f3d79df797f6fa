"""Malformed run configurations and sweep files: each gives exactly one line
``error: <full.key.path>: <message>`` on stderr and exit status 2, never a traceback.

The physics layers are replaced by the fakes in ``tests/fakes.py``, which
follow the resolver / registry interfaces the real layers implement."""
from __future__ import annotations

import textwrap

import pytest

from h2m2sim.cli import main

GOOD = {
    "system": {"preset": "h2m2"},
    "model": "gpt3-175b",
    "workload": {"batch": 4, "seq": 128},
    "policy": {"mapper": "greedy"},
}


pytestmark = pytest.mark.usefixtures("fake_layers")


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def one_error(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert out == ""
    return lines[0]


# (config text or None for GOOD, extra arguments, expected error-line prefix, fragment)
CONFIG_CASES = [
    ("worklaod: {batch: 4}\nsystem: h2m2\nmodel: gpt3-175b\n", [],
     "error: worklaod: unknown section", "did you mean 'workload'"),
    (None, ["--set", "workload.bach=8"], "error: workload.bach: unknown key",
     "did you mean 'batch'"),
    (None, ["--set", "policy.maper=oracle"], "error: policy.maper: unknown key",
     "did you mean 'mapper'"),
    (None, ["--set", "simulation.sede=3"], "error: simulation.sede: unknown key",
     "did you mean 'seed'"),
    (None, ["--set", "workload.batch=many"], "error: workload.batch: must be an integer",
     "'many'"),
    (None, ["--set", "workload.batch=true"], "error: workload.batch: must be an integer",
     "True"),
    (None, ["--set", "workload.batch=-4"], "error: workload.batch: must be >= 1", "got -4"),
    (None, ["--set", "workload.seq=[128, -5, 64, 64]"], "error: workload.seq: must be >= 1",
     "got -5"),
    (None, ["--set", "workload.seq=[128, 256, 512]"], "error: workload.seq: lists 3",
     "batch is 4"),
    (None, ["--set", "workload.phase=decoding"], "error: workload.phase: must be one of",
     "did you mean 'decode'"),
    (None, ["--set", "simulation.seed=-1"], "error: simulation.seed: must be >= 0", "got -1"),
    (None, ["--set", "simulation.fidelity=exact"], "error: simulation.fidelity: must be one "
     "of", "'exact'"),
    (None, ["--set", "simulation.workers=0"], "error: simulation.workers: must be >= 1",
     "got 0"),
    (None, ["--set", "system=h2m3"], "error: system: unknown preset 'h2m3'",
     "did you mean 'h2m2'"),
    (None, ["--set", "system.preset=lpddr"], "error: system.preset: unknown preset 'lpddr'",
     "did you mean 'lpddr-only'"),
    (None, ["--set", "system.sides={lpddr: {bandwidth_gbps: -3}}"],
     "error: system.sides[1].bandwidth_gbps: must be > 0", "got -3"),
    (None, ["--set", "system.sides={hbm: {capacity_bytes: lots}}"],
     "error: system.sides[0].capacity_bytes: not a size", "'lots'"),
    ("system: h2m2\nworkload: {batch: 4}\n", [], "error: model: missing required section", ""),
    ("model: gpt3-175b\n", [], "error: system: missing required section", ""),
    ("# nothing here\n", [], "error: {path}: empty configuration", "'system' and 'model'"),
    ("- system\n- model\n", [], "error: {path}: must be a mapping of sections", "a list"),
    (None, ["--set", "policy.mapper=gredy"], "error: policy.mapper: unknown mapper 'gredy'",
     "did you mean 'greedy'"),
    (None, ["--set", "policy.allocator=pagd"], "error: policy.allocator: unknown allocator",
     "did you mean 'paged'"),
    (None, ["--set", "policy.mapper=oracle", "--set", "policy.mapper_params={max_configs: 0}"],
     "error: policy.mapper_params.max_configs: must be >= 1", "got 0"),
    (None, ["--set", "policy.mapper_params=[1, 2]"],
     "error: policy.mapper_params: must be a mapping", "a list"),
    (None, ["--set", "model=gpt4"], "error: model: unknown model 'gpt4'", "available"),
    (None, ["--set", "model=[gpt3-175b]"], "error: model: must be a model-zoo name or a "
     "mapping", "a list"),
    (None, ["--set", "model={name: tiny, layers: 0, hidden: 64, params: 1.0e6}"],
     "error: model.layers: must be >= 1", "got 0"),
    ("system: h2m2\nmodel: gpt3-175b\nworkload:\n  batch: [4\n", [], "error: {path}:5: "
     "invalid YAML: expected ',' or ']'", "sequence on line 4"),
    (None, ["--set", "workload.serving=fast"], "error: workload.serving: must be a mapping",
     "'fast'"),
    (None, ["--set", "workload.serving={rate_rps: -2}"],
     "error: workload.serving.rate_rps: must be > 0", "got -2"),
    (None, ["--set", "policy.baseline=lpddr-onyl"], "error: policy.baseline: unknown preset",
     "did you mean 'lpddr-only'"),
    ("system: h2m2\nmodel: gpt3-175b\nworkload:\n  seq: &s [*s]\n", [],
     "error: workload.seq[0]: refers to itself", "recursive"),
    (None, ["--set", "workload.batch"], "error: --set: expected KEY=VALUE", "workload.batch"),
    (None, ["--set", "workload..batch=3"], "error: workload..batch: not a valid key path", ""),
    (None, ["--set", "workload.batch=[1"], "error: --set workload.batch", "invalid YAML"),
]


def _yaml(data) -> str:
    import yaml
    return yaml.safe_dump(data)


@pytest.mark.parametrize("text,args,prefix,fragment", CONFIG_CASES,
                         ids=[c[2].split(":")[1].strip() + "|" + c[2].split(":")[-1][:25]
                              for c in CONFIG_CASES])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_malformed_config(tmp_path, capsys, command, text, args, prefix, fragment):
    path = write(tmp_path, text if text is not None else _yaml(GOOD))
    line = one_error(capsys, [command, path, *args])
    assert line.startswith(prefix.format(path=path)), line
    assert fragment in line


def test_missing_file(tmp_path, capsys):
    line = one_error(capsys, ["validate", tmp_path / "nope.yaml"])
    assert line == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_job_not_registered_is_one_line(tmp_path, capsys, monkeypatch):
    from h2m2sim import runner
    monkeypatch.delitem(runner.JOBS, "iteration")
    line = one_error(capsys, ["run", write(tmp_path, _yaml(GOOD))])
    assert line == "error: no job registered for workload kind 'iteration'"


def test_out_of_memory_during_run_is_one_line(tmp_path, capsys):
    line = one_error(capsys, ["run", write(tmp_path, _yaml(GOOD)),
                              "--set", "workload.seq=1000000"])
    assert line.startswith("error: out of memory on side 'hbm'")


SWEEP_CASES = [
    ("grid: {workload.seq: 512}", "error: grid.workload.seq: must be a list of values", ""),
    ("grid: {workload.seq: []}", "error: grid.workload.seq: must list at least one value", ""),
    ("grid: {workload.seq: [64, 128, -1]}", "error: grid.workload.seq[2]: must be >= 1",
     "got -1"),
    ("grid: {workload.sqe: [64]}", "error: grid.workload.sqe: unknown key",
     "did you mean 'seq'"),
    ("grid: {worklaod.seq: [64]}", "error: grid.worklaod.seq: 'worklaod' is an unknown "
     "section", "did you mean 'workload'"),
    ("grid: {system: [h2m2, hbm9]}", "error: grid.system[1]: unknown preset 'hbm9'",
     "did you mean 'hbm-8'"),
    ("grid: {system.sides.lpddr.bandwidth_gbps: [100, 0]}",
     "error: system.sides[1].bandwidth_gbps: must be > 0",
     "(sweep point 1: system.sides.lpddr.bandwidth_gbps=0)"),
    ("grid: {'system.sides[1].bandwidth_gbps': [100, 0]}",
     "error: grid.system.sides[1].bandwidth_gbps[1]: must be > 0", "got 0.0"),
    ("grid: {'system.sides[7].bandwidth_gbps': [100]}",
     "error: grid.system.sides[7].bandwidth_gbps: 'system.sides' has no item [7]", ""),
    ("zip: {model: [gpt3-175b, llama2-70b], workload.batch: [1, 2, 3]}",
     "error: zip.workload.batch: has 3 values but zip.model has 2", "equal lengths"),
    ("gird: {workload.seq: [64]}", "error: gird: unknown key", "did you mean 'grid'"),
    ("grid: {system: [h2m2]}\nzip: {system.preset: [h2m2]}",
     "error: zip.system.preset: overlaps axis grid.system", ""),
    ("grid: {'workload..seq': [1]}", "error: grid.workload..seq: not a valid key path", ""),
    ("grid: [workload.seq, 64]", "error: grid: must be a mapping", ""),
    ("grid: {workload.seq: [64, 128]}\nzip: {workload.batch: [2, 3]}\n",
     "error: workload.seq: lists", "sweep point"),
]


@pytest.mark.parametrize("axes,prefix,fragment", SWEEP_CASES,
                         ids=[c[1].split(":")[1].strip() for c in SWEEP_CASES])
def test_malformed_sweep(tmp_path, capsys, axes, prefix, fragment):
    write(tmp_path, _yaml(GOOD))
    base = "base: run.yaml\n"
    if "zip: {workload.batch: [2, 3]}" in axes:  # a list seq that fits no zipped batch
        base = ("base: {system: h2m2, model: gpt3-175b, "
                "workload: {batch: 4, seq: [1, 2, 3, 4]}}\n")
        axes = "zip: {workload.batch: [2, 3]}\n"
    sweep = write(tmp_path, base + axes + "\n", "sweep.yaml")
    line = one_error(capsys, ["sweep", sweep, "--out", tmp_path / "out", "--workers", "1"])
    assert line.startswith(prefix), line
    assert fragment in line
    assert not (tmp_path / "out").exists()  # nothing runs before every point is valid


def test_sweep_missing_base(tmp_path, capsys):
    sweep = write(tmp_path, "base: missing.yaml\ngrid: {workload.seq: [64]}\n", "s.yaml")
    line = one_error(capsys, ["sweep", sweep, "--out", tmp_path / "out"])
    assert line == f"error: {tmp_path / 'missing.yaml'}: no such file"


def test_sweep_refuses_to_overwrite(tmp_path, capsys):
    write(tmp_path, _yaml(GOOD))
    sweep = write(tmp_path, "base: run.yaml\ngrid: {workload.seq: [64, 128]}\n", "s.yaml")
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    capsys.readouterr()
    line = one_error(capsys, ["sweep", sweep, "--out", tmp_path / "o", "--workers", "1"])
    assert line.startswith("error: --out: ") and "--resume" in line


def test_at_least_twenty_cases():
    assert len(CONFIG_CASES) + len(SWEEP_CASES) >= 20

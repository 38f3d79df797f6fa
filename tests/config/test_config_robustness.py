"""Settings that pass a naive type check but mean nothing, and checks that only a run
used to make: each now ends in one ``error:`` line (exit 2) from ``validate`` itself,
or in a valid run. Real layers, not fakes: the point is what the simulator accepts.

The property tests mutate one setting of the fully resolved default configuration
(every key of every section, DRAM timings included) and require the project's own
error or a run whose numbers are finite."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dram_models.memory import MemorySystem
from dram_models.schema import key_paths, set_path
from dram_models.trace import Trace
from h2m2sim import runner
from h2m2sim.cli import main
from h2m2sim.config import ConfigError, dump_yaml, load_config, load_file
from h2m2sim.errors import SimError
from h2m2sim.sweeps import build_sweep

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "workloads" / "configs" / "default.yaml"
LPDDR_ONLY = ROOT / "workloads" / "configs" / "lpddr-only.yaml"


def one_error(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# (--set, expected start of the error line)
NONSENSE = [
    ("system.sync.barrier_ns=.inf", "error: system.sync.barrier_ns: must be a finite number"),
    ("system.interconnect.bandwidth_gbps=.inf",
     "error: system.interconnect.bandwidth_gbps: must be a finite number"),
    ("system.interconnect.latency_ns=.nan",
     "error: system.interconnect.latency_ns: must be a finite number"),
    ("system.sides.hbm.channels=1.0e+30", "error: system.sides[0].channels: must be an "
                                          "integer within +-2**53"),
    ("workload.batch=1.0e+30", "error: workload.batch: must be an integer within +-2**53"),
    ("workload.seq=9223372036854775808", "error: workload.seq: must be an integer within"),
    ("system.sides.hbm.channels=1000000", "error: system.sides[0].channels: must be <= 4096"),
    ("system.sides.hbm.dram.tCK_ps=.inf", "error: system.sides[0].dram.tCK_ps: must be a "
                                          "finite number"),
    ("system.sides.hbm.capacity_bytes=1e300", "error: system.sides[0].capacity_bytes: must "
                                              "be an integer within"),
    ("workload.batch=100000", "error: workload.batch: must be <= 65536"),
    ("workload.iterations=3", "error: workload.iterations: unknown key"),
    ("policy.mapper_params.translte=ideal",
     "error: policy.mapper_params.translte: unknown key (did you mean 'translate'?)"),
    ("policy.mapper_params.translate=bogus",
     "error: policy.mapper_params.translate: must be one of default, mmu, ideal"),
    ("policy.mapper_params.table_points=1.0e+9",
     "error: policy.mapper_params.table_points: must be <= 65"),
    ("workload.phase=training", "error: workload.phase: must be one of decode, prefill"),
    ("workload.batch=1e3", "error: workload.batch: must be an integer, got '1e3' (str) (YAML "
                           "reads 1e3 as text; write 1.0e+3)"),
    # latencies the cycle-level run would idle through for days
    ("system.sides.hbm.chip.vector_latency=9007199254740992",
     "error: system.sides[0].chip.vector_latency: must be <= 65536"),
    ("system.sides.hbm.dram.timing.tPBR2ACT=1024", "error: system.sides[0].dram.timing."
     "tPBR2ACT: tPBR2ACT + tRC = 1024 + 72 must be < tREFIpb = 195 CK"),
    ("system.mmu.miss_ns=1.0e+15", "error: system.mmu.miss_ns: must be <= 1000000.0"),
    ("system.sides.lpddr.chip.dma_chunk_bytes=12", "error: system.sides[1].chip."
     "dma_chunk_bytes: must be 0 (automatic) or a multiple of the DRAM burst (32 bytes)"),
]


@pytest.mark.parametrize("setting,start", NONSENSE, ids=[s for s, _ in NONSENSE])
def test_validate_refuses_settings_that_mean_nothing(capsys, setting, start):
    line = one_error(capsys, ["validate", DEFAULT, "--set", setting])
    assert line.startswith(start), line


def test_the_channel_bound_holds_for_the_standards_own_count(capsys):
    line = one_error(capsys, ["validate", DEFAULT, "--set", "system.sides.hbm.channels=null",
                              "--set", "system.sides.hbm.dram.organization.channels=5000"])
    assert line.startswith("error: system.sides[0].dram.organization.channels: at most "
                           "4096 channels per side, got 5000"), line


def test_a_model_larger_than_a_single_memory_is_refused_before_running(capsys):
    """The single-memory system is held to the same capacity rule as the two-sided one,
    by validate and by run (before any simulation)."""
    small = ["--set", "system.sides.lpddr.capacity_bytes=100e9"]
    for cmd in ("validate", "run"):
        line = one_error(capsys, [cmd, LPDDR_ONLY, *small])
        assert line == ("error: out of memory on side 'lpddr-only (all sides)' for the "
                        "weights (175 GB) and KV cache of 65,536 tokens (155 GB; 32 requests) "
                        "of gpt3-175b: needs 329 GB, 100 GB free"), line


def test_capacity_rule_is_the_weights_and_kv_closed_form():
    """Refused exactly when weights + KV tokens x bytes per token exceed the capacity."""
    cfg = load_file(LPDDR_ONLY)
    m = cfg.model
    need = m.total_weight_bytes() + m.kv_bytes_per_token_per_layer() * m.layers * 32 * 2048
    fits = runner_fits(LPDDR_ONLY, [f"system.sides.lpddr.capacity_bytes={need}"])
    short = runner_fits(LPDDR_ONLY, [f"system.sides.lpddr.capacity_bytes={need - 1}"])
    assert fits and not short


def runner_fits(path, sets) -> bool:
    from h2m2sim.config import schema
    cfg = load_file(path, sets)
    try:
        schema.FITS[schema.job_kind(cfg)](cfg)
    except SimError:
        return False
    return True


def test_translate_default_runs_with_a_baseline():
    cfg = load_file(DEFAULT, ["policy.mapper_params.translate=default",
                              "simulation.fidelity=estimate", "policy.baseline=null"])
    assert cfg.policy.mapper_params == {"translate": "default"}
    m = runner.run(cfg).metrics
    assert math.isfinite(m["iteration_time_ns"]) and m["iteration_time_ns"] > 0
    assert load_file(DEFAULT, ["policy.mapper_params.translate=default"]).policy.baseline


def test_set_by_index_works_on_preset_systems_and_in_sweeps():
    by_index = load_file(DEFAULT, ["system.sides[1].capacity_bytes=400e9",
                                   "policy.baseline.sides[0].capacity_bytes=300e9"])
    by_name = load_file(DEFAULT, ["system.sides.lpddr.capacity_bytes=400e9",
                                  "policy.baseline.sides.lpddr.capacity_bytes=300e9"])
    assert by_index == by_name
    assert by_index.system.sides[1].capacity_bytes == 400 * 10**9
    assert by_index.policy.baseline.sides[0].capacity_bytes == 300 * 10**9
    sweep = build_sweep({"base": str(DEFAULT), "grid": {
        "system.sides[1].capacity_bytes": [400e9, 500e9]}}, base_dir=ROOT)
    assert [p.config.system.sides[1].capacity_bytes for p in sweep.points] == \
        [400 * 10**9, 500 * 10**9]
    with pytest.raises(ConfigError, match=r"system.sides: has no item \[5\]"):
        load_file(DEFAULT, ["system.sides[5].capacity_bytes=1"])


SHIPPED = sorted(p for p in (ROOT / "workloads" / "configs").glob("*.yaml")
                 if "grid" not in p.read_text())          # run configs, not sweep files


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_side_of_every_shipped_config_is_settable_by_name_and_index(path):
    """The documented forms ``system.sides.NAME.KEY`` and ``system.sides[i].KEY`` reach
    the same side of every shipped configuration, in --set and as a sweep axis."""
    cfg = load_file(path)
    for i, side in enumerate(cfg.system.sides):
        by_name = load_file(path, [f"system.sides.{side.name}.capacity_bytes=64 GB"])
        by_index = load_file(path, [f"system.sides[{i}].capacity_bytes=64 GB"])
        assert by_name == by_index
        assert by_name.system.sides[i].capacity_bytes == 64 * 10**9
        # the same capacity, set by name: validate passes (64 GB may rightly not fit)
        assert main(["validate", str(path), "--set",
                     f"system.sides.{side.name}.capacity_bytes={side.capacity_bytes}"]) == 0
        sweep = build_sweep({"base": str(path), "grid": {
            f"system.sides.{side.name}.capacity_bytes": ["64 GB", "96 GB"]}}, base_dir=ROOT)
        assert [p.config.system.sides[i].capacity_bytes for p in sweep.points] == \
            [64 * 10**9, 96 * 10**9]


# ----------------------------------------------------------------- the CLI's last guard
@pytest.fixture
def failing_validate(monkeypatch):
    """``validate`` replaced by a function raising what the test puts in ``box``."""
    from h2m2sim.cli import cmd_validate
    box = {}

    def boom(args):
        raise box["error"]
    monkeypatch.setattr(cmd_validate, "main", boom)
    return box


def test_an_internal_error_is_one_line_with_a_hint(capsys, failing_validate):
    failing_validate["error"] = ZeroDivisionError("division by zero\nsecond line")
    assert main(["validate", str(DEFAULT)]) == 70
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.strip().splitlines() == [
        "internal error: ZeroDivisionError: division by zero second line (rerun with "
        "h2m2sim --debug validate ... for the traceback)"]


def test_debug_shows_the_traceback(failing_validate):
    failing_validate["error"] = ZeroDivisionError("division by zero")
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "validate", str(DEFAULT)])


@pytest.mark.parametrize("error,code", [(KeyboardInterrupt(), 130),
                                        (BrokenPipeError(), 141)])
def test_interrupt_and_closed_pipe_exit_quietly(capsys, failing_validate, error, code):
    failing_validate["error"] = error
    assert main(["validate", str(DEFAULT)]) == code
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_ends_the_real_process_quietly():
    """``h2m2sim validate ... | head -c0``: exit 141, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "h2m2sim", "validate", str(DEFAULT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == b""


# ----------------------------------------------------------------- property tests
def _resolved_default() -> dict:
    """The default configuration with every key written out, as plain data."""
    return yaml.safe_load(dump_yaml(load_file(DEFAULT, ["policy.baseline=null",
                                                        "simulation.fidelity=estimate"])))


RESOLVED = _resolved_default()


NUMERIC = sorted(p for p, v in key_paths(RESOLVED)
                 if isinstance(v, (int, float)) and not isinstance(v, bool)
                 and not p.startswith("simulation."))
DRAM = [p for p in NUMERIC if ".dram." in p]
BAD = [float("inf"), float("-inf"), float("nan"), 1e30, -1e30, 2**63, 2**53 + 2, -1, 0,
       0.5, 1e-300, 3.7, True, "12", None, [], {}, "1 GB"]
values = st.one_of(st.sampled_from(BAD), st.integers(-2**64, 2**64),
                   st.floats(allow_nan=True, allow_infinity=True))
PROPERTY = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _mutated(path, value):
    """The resolved default with one setting replaced; None if the loader refuses it
    (with one line naming a key)."""
    try:
        return load_config(set_path(RESOLVED, path, value))
    except ConfigError as err:
        assert str(err).strip() and "\n" not in str(err), str(err)
        return None


@PROPERTY
@given(st.sampled_from(NUMERIC), values)
def test_a_mutated_setting_is_refused_or_runs_to_finite_numbers(path, value):
    cfg = _mutated(path, value)
    if cfg is None:
        return
    try:
        m = runner.run(cfg).metrics
    except SimError as err:      # the project's own error (e.g. out of memory): one line
        assert "\n" not in str(err)
        return
    assert math.isfinite(m["iteration_time_ns"]) and m["iteration_time_ns"] > 0, (path, m)
    assert math.isfinite(m["tokens_per_s"]) and m["tokens_per_s"] > 0


@PROPERTY
@given(st.sampled_from(DRAM), values)
def test_a_mutated_dram_setting_is_refused_or_simulates(path, value):
    cfg = _mutated(path, value)
    if cfg is None:
        return
    side = 0 if path.startswith("system.sides[0]") else 1
    spec = cfg.system.sides[side].dram_spec.with_channels(1)
    ms = MemorySystem(spec)
    addr = (np.arange(192, dtype=np.uint64) * np.uint64(4099 * spec.burst_bytes)) % \
        np.uint64(spec.organization.capacity_bytes)
    res = ms.run_trace(Trace.open_loop(addr, is_write=np.arange(192) % 3 == 0))
    stats = res.stats.as_dict()
    assert stats["reads"] + stats["writes"] == 192
    assert math.isfinite(stats["sim_ns"]) and stats["sim_ns"] > 0
    assert 0 < stats["bandwidth_gbps"] <= stats["peak_gbps"] * (1 + 1e-9)

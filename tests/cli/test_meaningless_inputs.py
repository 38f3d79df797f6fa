"""Inputs given on the command line or to the API that mean nothing are refused with
one line: a negative seed, an arrival rate that spreads a trace past the span a trace
may have, a number of sweep workers that is not a whole number from 1 to 4096 (as an
option, an API argument or simulation.workers), allocator options of the wrong type or
out of bounds, prefix caching on a trace without prefix hashes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from h2m2sim import api
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SERVE = ["serve", "--trace", "alpaca", "--system", "mlu370-x4", "--model",
         "deepseek-r1-distill-qwen-7b", "--allocator", "static", "--evaluator", "analytic",
         "--max-requests", "20", "--no-cache"]


@pytest.mark.parametrize("extra,fragment", [
    (["--seed", "-1"], "simulation.seed: must be >= 0, got -1"),
    (["--rate", "1e-300"], "arrival_rate: 1e-300 req/s spreads"),
    (["--max-batch", str(10**9)], "max_batch"),
])
def test_serve_refuses_meaningless_numbers(capsys, extra, fragment):
    assert main([*SERVE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


@pytest.mark.parametrize("workers", [0, -1, "2", 1.5, True])
def test_api_sweep_refuses_workers_that_are_not_a_count(tmp_path, workers):
    spec = {"name": "w", "base": {"system": "h2m2", "model": "gpt3-175b",
                                  "simulation": {"fidelity": "estimate"}},
            "grid": {"workload.seq": [64, 128]}}
    with pytest.raises(ConfigError, match="workers: must be a whole number"):
        api.sweep(spec, tmp_path / "o", workers=workers)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("workers", [4097, 10**20])
def test_api_sweep_refuses_more_workers_than_a_machine_runs(tmp_path, workers):
    spec = {"name": "w", "base": {"system": "h2m2", "model": "gpt3-175b",
                                  "simulation": {"fidelity": "estimate"}},
            "grid": {"workload.seq": [64, 128]}}
    with pytest.raises(ConfigError, match="^workers: must be a whole number of processes "
                                          "from 1 to 4096"):
        api.sweep(spec, tmp_path / "o", workers=workers)
    assert not (tmp_path / "o").exists()


def test_a_configs_sweep_workers_are_bounded_as_the_option_is(capsys):
    assert main(["validate", str(ROOT / "workloads" / "configs" / "default.yaml"),
                 "--set", "simulation.workers=5000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: simulation.workers: ") and "4096" in err, err
    assert "\n" not in err


@pytest.mark.parametrize("workers", ["0", "-3", "4097", "100000000000000000000", "2.5"])
def test_sweep_workers_out_of_bounds_are_one_line(tmp_path, capsys, workers):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: w\nbase: {system: h2m2, model: gpt3-175b, simulation: "
                    "{fidelity: estimate}}\ngrid: {workload.seq: [64, 128]}\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"),
                 "--workers", workers]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --workers: must be a whole number of processes from 1 "
                          "to 4096") and "\n" not in err, err
    assert workers in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("param,fragment", [
    ("block_tokens=abc", "allocator_params.block_tokens"),
    ("block_tokens=1.5", "allocator_params.block_tokens"),
    ("watermark=1e309", "allocator_params.watermark"),
    ("block_tokens=0", "allocator_params.block_tokens"),
])
def test_allocator_params_from_the_command_line_are_checked_like_a_config(capsys, param,
                                                                          fragment):
    argv = [a if a != "static" else "paged" for a in SERVE]
    assert main([*argv, "--allocator-param", param]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err



def test_prefix_caching_on_a_trace_without_hashes_is_refused(capsys):
    assert main([*SERVE, "--prefix-caching"]) == 2
    err = capsys.readouterr().err.strip()
    assert "prefix_caching: trace alpaca has no prefix block hashes" in err, err


@pytest.mark.parametrize("extra,fragment", [
    (["--kv-link", "nvlink4"], "kv_link: needs serving.disaggregate"),
    (["--kv-offload-policy", "lru"], "kv_offload_policy: needs serving.kv_offload"),
    (["--disaggregate", "1:3", "--replicas", "2"],
     "deployment: replicas or tensor_parallel of the whole system is not modelled with "
     "serving.disaggregate"),
    (["--disaggregate", "1:3", "--tensor-parallel", "2"], "deployment: replicas or "
     "tensor_parallel"),
])
def test_serve_refuses_options_the_run_would_ignore(capsys, extra, fragment):
    # each is refused even at its default value: given, it would be silently unused
    assert main([*SERVE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_disaggregated_predictor_refusal_gives_one_consistent_reason(capsys):
    assert main([*SERVE[:-7], "--allocator", "paged", "--evaluator", "analytic",
                 "--max-requests", "20", "--no-cache", "--disaggregate", "2:2",
                 "--predictor", "oracle"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not modelled with serving.predictor" in err and "paged" not in err, err


def test_run_json_is_strict_json_when_a_metric_is_not_computed(capsys, tmp_path):
    # a prefill at estimate fidelity computes no energy: null, never the NaN token
    cfg = ["run", str(ROOT / "workloads/configs/default.yaml"), "--set",
           "workload.phase=prefill", "--set", "simulation.fidelity=estimate", "--json",
           "--out", str(tmp_path / "o")]
    assert main(cfg) == 0

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    printed = strict(capsys.readouterr().out)
    assert printed["metrics"]["energy_j"] is None
    assert strict((tmp_path / "o" / "result.json").read_text())["metrics"]["energy_j"] is None


def test_a_trace_name_longer_than_the_file_system_allows_is_one_line(tmp_path, capsys):
    name = str(tmp_path / ("t" * 300 + ".csv"))
    assert main(["serve", "--trace", name, *SERVE[3:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "(" in err, err
    assert "characters)" in err and ("too long" in err or "no such" in err), err

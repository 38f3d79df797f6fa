"""Inputs given on the command line or to the API that mean nothing are refused with
one line: a negative seed, an arrival rate that spreads a trace past the span a trace
may have, a number of sweep workers that is not a whole number >= 1, allocator options
of the wrong type or out of bounds, prefix caching on a trace without prefix hashes."""
from __future__ import annotations

import pytest

from h2m2sim import api
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError

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

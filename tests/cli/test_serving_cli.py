"""``h2m2sim serve``: JSON keys, nulls where not applicable, clear one-line errors, a
model from a file."""
import json

import pytest

from h2m2sim.cli import main

# the analytic placeholder keeps these checks of the CLI's plumbing fast; the cycle-level
# evaluator (the CLI's default) is exercised in tests/test_serving_cycle_*.py
BASE = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4",
        "--model", "deepseek-r1-distill-qwen-7b", "--max-requests", "150", "--json",
        "--evaluator", "analytic"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _serve(capsys, *extra):
    assert main(BASE + list(extra)) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


@pytest.mark.parametrize("alloc", ["static", "paged"])
def test_json_has_required_keys_and_nulls(capsys, alloc):
    m, err = _serve(capsys, "--allocator", alloc)
    for key in ("kv_utilization", "tokens_per_s", "ttft_p50_s", "tpot_p50_s",
                "requests_completed", "predictor_accuracy", "migration_rate"):
        assert key in m
    assert m["requests_completed"] == 150 and m["requests_rejected"] == 0
    assert m["max_context_tokens"] == 131072        # the model's own context
    assert m["predictor_accuracy"] is None and m["migration_rate"] is None
    assert 0 < m["kv_utilization"] <= 1 and m["tokens_per_s"] > 0
    assert m["cycle_level"] is False and "NOT cycle-level" in err


def test_a_lower_context_rejects_and_says_why(capsys):
    m, _ = _serve(capsys, "--allocator", "paged", "--max-context", "2048")
    n = m["requests_rejected"]
    assert n > 0 and m["requests_completed"] + n == 150
    assert m["rejected_reasons"] == {"prompt_does_not_fit_the_context": n}


def test_odma_with_oracle_and_learned_fallback_note(capsys):
    m, _ = _serve(capsys, "--allocator", "odma", "--predictor", "oracle")
    assert m["predictor_accuracy"] == 1.0 and m["migration_rate"] == 0.0
    m, err = _serve(capsys, "--allocator", "odma")
    assert m["predictor"] == "learned" and "no prompt text" in err
    assert 0 <= m["migration_rate"] <= 1


def test_options_reach_the_run(capsys):
    m, err = _serve(capsys, "--allocator", "paged", "--allocator-param", "block_tokens=32",
                    "--rate", "50", "--max-batch", "8", "--kv-capacity", "2 GB",
                    "--max-context", "8192")
    assert m["kv_layout"] == "paged:32" and m["kv_capacity_bytes"] <= 2e9
    assert "Poisson" in err and m["mean_decode_batch"] <= 8


@pytest.mark.parametrize("argv,needle", [
    (["--allocator", "paged", "--system", "mlu370"], "did you mean 'mlu370-x4'"),
    (["--allocator", "odma", "--predictor", "orcale"], "did you mean 'oracle'"),
    (["--allocator", "paged", "--allocator-param", "blok_tokens=3"],
     "allocator_params.blok_tokens: unknown key (did you mean 'block_tokens'?)"),
    (["--allocator", "paged", "--kv-capacity", "lots"], "--kv-capacity"),
])
def test_user_errors_are_one_line(capsys, argv, needle):
    assert main(BASE + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_bad_trace_row_is_named(capsys, tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,-2,5\n")
    argv = BASE[:]
    argv[2] = str(p)
    assert main(argv + ["--allocator", "paged"]) == 2
    assert f"{p} row 2" in capsys.readouterr().err


def test_runs_with_a_model_from_a_file(capsys, tmp_path):
    p = tmp_path / "fake-1b.yaml"
    p.write_text("layers: 4\nhidden: 512\nheads: 8\nffn_dim: 2048\nvocab: 32000\n"
                 "max_context: 4096\ndtype: fp16\n")
    argv = BASE[:]
    argv[argv.index("--model") + 1] = str(p)
    assert main(argv + ["--allocator", "static"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["model"] == "fake-1b" and m["kv_bytes_per_token"] == 4 * 2 * 8 * 64 * 2


def test_the_full_serving_command_on_a_hashed_trace(capsys, tmp_path):
    """``serve <hashed trace> --chunked-prefill --prefix-caching --slo-ttft 2 --slo-tpot
    0.1 --json`` on a Mooncake-format trace whose prompts share half their blocks: the
    latency, SLO and prefix keys are there and agree with the trace."""
    from h2m2sim.serving.traces import prefix_reuse_trace
    n, blocks = 40, 4
    tr = prefix_reuse_trace(n, 0.5, prompt_blocks=blocks, block_tokens=512, prefixes=2,
                            output_tokens=16, arrival_rate=1.0, seed=3)
    path = tmp_path / "hashed.jsonl"
    path.write_text("".join(json.dumps({
        "timestamp": int(round(tr.arrival_s[i] * 1000)),
        "input_length": int(tr.prompt_tokens[i]), "output_length": int(tr.output_tokens[i]),
        "hash_ids": tr.block_hashes(i).tolist()}) + "\n" for i in range(n)))
    argv = ["serve", "--trace", str(path), "--system", "mlu370-x4", "--model",
            "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator", "analytic",
            "--history-fraction", "0", "--chunked-prefill", "--prefix-caching",
            "--slo-ttft", "2", "--slo-tpot", "0.1", "--json"]
    assert main(argv) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["requests_completed"] == n and m["chunked_prefill"] and m["mixed_iterations"]
    assert m["itl_p99_s"] >= m["itl_p50_s"] > 0
    assert 0 <= m["slo_attainment"] <= 1
    assert m["goodput_rps"] == pytest.approx(
        m["slo_attainment"] * n / m["duration_s"], rel=1e-9)
    # arrivals a second apart: every request but the two first uses of a prefix hits
    # its 2 shared blocks
    assert m["prefix_hit_rate"] == pytest.approx(0.5 * (n - 2) / n)
    total = n * blocks * 512
    assert m["prefill_tokens_total"] == total
    assert m["prefill_tokens_computed"] == total - 2 * 512 * (n - 2)


def test_out_writes_a_run_folder_that_run_reproduces(capsys, tmp_path):
    """serve --out keeps what run --out keeps, and its config.yaml is a run configuration
    whose run gives the same metrics; --json carries the same provenance."""
    m, _ = _serve(capsys, "--allocator", "paged", "--out", str(tmp_path / "s"))
    assert {"config_hash", "h2m2sim_version", "git_revision", "config"} <= set(m)
    assert m["config"]["workload"]["serving"]["trace"] == "azure2023_conv"
    stored = json.loads((tmp_path / "s" / "result.json").read_text())
    assert stored["config_hash"] == m["config_hash"]
    assert stored["metrics"]["tokens_per_s"] == m["tokens_per_s"]
    assert main(["run", str(tmp_path / "s" / "config.yaml"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["config_hash"] == m["config_hash"]
    assert again["metrics"]["tokens_per_s"] == m["tokens_per_s"]
    assert main(BASE + ["--allocator", "paged", "--out", str(tmp_path / "s")]) == 2
    assert "already" in capsys.readouterr().err
    assert main(BASE + ["--allocator", "paged", "--out", ""]) == 2     # an unset variable
    assert capsys.readouterr().err == "error: --out: is empty: name the folder to write to\n"


def test_a_workload_no_prompt_of_which_fits_gets_one_answer(capsys, tmp_path):
    """serve and run of the same workload refuse it alike, naming the context."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,5000,10\n1,6000,10\n")
    args = ["serve", "--trace", str(trace), "--system", "mlu370-x4", "--model",
            "deepseek-r1-distill-qwen-7b", "--evaluator", "analytic", "--allocator",
            "paged", "--max-context", "4096"]
    assert main(args) == 2
    serve_err = capsys.readouterr().err
    assert "every one of the 2 replayed requests" in serve_err
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"system: mlu370-x4\nmodel: deepseek-r1-distill-qwen-7b\n"
                   f"policy: {{allocator: paged}}\nsimulation: {{fidelity: estimate}}\n"
                   f"workload: {{serving: {{trace: {trace}, max_context_tokens: 4096}}}}\n")
    assert main(["run", str(cfg)]) == 2
    assert capsys.readouterr().err == serve_err


def test_static_allocation_with_prefix_caching_admits_a_request_alone(capsys):
    # 1 GB holds 17,438 tokens and a static extent is 16,384: the first requests' cached
    # prefix regions leave no contiguous extent between them, so a request that would
    # share them is admitted without the cache once nothing else runs, not refused
    argv = ["serve", "--trace", "mooncake2025_conv", "--system", "mlu370-x4", "--model",
            "deepseek-r1-distill-qwen-7b", "--allocator", "static", "--evaluator",
            "analytic", "--max-requests", "20", "--prefix-caching", "--kv-capacity",
            "1 GB", "--max-context", "16384", "--json", "--no-cache"]
    assert main(argv) == 0, capsys.readouterr().err
    m = json.loads(capsys.readouterr().out)
    assert m["requests_completed"] == 14 and 0 < m["prefix_hit_rate"] < 0.1

"""What the text output of serve, run, timeline and model tells a reader: times and
energies in units that read (never seconds for microseconds), labels that say what a
number is, flags named as the user typed them, and a model's layer kinds and parameters."""
from __future__ import annotations

import json

import pytest

from h2m2sim.cli import fmt, main
from h2m2sim.cli.cmd_run import table
from h2m2sim.cli.cmd_serve import _draft_notes, _print_table

SERVE = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4",
         "--model", "opt-1.3b", "--allocator", "paged", "--evaluator", "analytic",
         "--max-requests", "5"]


def _metrics(**over) -> dict:
    """Serving metrics shaped like a run's, with the fields the table shows."""
    m = {"trace": "t", "model": "m", "system": "mlu370-x4", "allocator": "paged",
         "kv_layout": "paged:16", "scheduler": "fcfs", "predictor": None,
         "requests_completed": 5, "requests": 5, "requests_rejected": 0, "requests_cut": 0,
         "history_requests": 0, "tokens_per_s": 100.0, "ttft_p50_s": 0.6614,
         "ttft_p90_s": 4.858, "ttft_p99_s": 11.95, "tpot_p50_s": 0.002243,
         "tpot_p90_s": 0.00226, "tpot_p99_s": 0.00226, "itl_p50_s": 3.5e-5,
         "itl_p99_s": 0.0023, "slo_attainment": None, "goodput_rps": None,
         "queue_delay_p50_s": 0.0, "queue_delay_p99_s": 1.5, "kv_utilization": 0.9,
         "peak_reserved_bytes": 1e9, "mean_reserved_bytes": 5e8, "kv_capacity_bytes": 7.1e10,
         "mean_decode_batch": 2.0, "preemptions": 0, "prefill_tokens_computed": 10,
         "prefill_tokens_total": 10, "prefix_hit_rate": None, "migrations": 0,
         "migration_rate": None, "predictor_accuracy": None, "energy_j": 1.592e5,
         "energy_per_output_token_j": 0.8798, "iteration_time_model": "analytic"}
    return {**m, **over}


def _rows(capsys, m) -> dict:
    _print_table(m)
    return {line[:33].strip(): line[33:] for line in capsys.readouterr().out.splitlines()}


def test_serve_times_pick_their_unit_and_energy_says_total_and_per_token(capsys):
    rows = _rows(capsys, _metrics())
    assert rows["TTFT p50 / p90 / p99"] == "661.4 ms / 4.858 s / 11.95 s"
    assert rows["ITL p50 / p99"] == "35 us / 2.3 ms"
    assert rows["energy total / per output token"] == "159.2 kJ / 879.8 mJ"


def test_disaggregated_pools_read_as_cards_of_a_system(capsys):
    rows = _rows(capsys, _metrics(
        disaggregate=[2, 2], prefill_system="mlu370-x4", decode_system="mlu370-x4",
        kv_link="nvlink4", kv_transfer_s_p50=9.351e-4, kv_transfer_s_p99=8.6e-3,
        kv_transfer_bytes=3.4e10, kv_transfer_energy_j=3.15))
    assert rows["prefill / decode pool"] == \
        "2 cards of mlu370-x4 / 2 cards of mlu370-x4, KV over nvlink4"
    assert rows["KV transfer p50 / p99"].startswith("935.1 us / 8.6 ms")


def test_a_zero_speculative_itl_says_why_and_the_draft_memory_is_noted(capsys):
    spec = {"draft": "opt-350m", "k": 4, "expected_tokens_per_step": 3.36,
            "draft_time_s": 40.3, "draft_weight_bytes": 6.624e8,
            "draft_kv_capacity_bytes": 4.453e10, "draft_kv_bytes_per_token": 98304}
    m = _metrics(speculative=spec, tokens_per_step=3.35, itl_p50_s=0.0,
                 kv_capacity_bytes=2.598e10)
    assert "(tokens of one verify step arrive together)" in _rows(capsys, m)["ITL p50 / p99"]
    note, = _draft_notes(m)
    assert "target's KV cache gets 25.98 GB" in note and "opt-350m" in note
    assert "weights (0.6624 GB)" in note and "KV cache (44.53 GB" in note
    assert _draft_notes(_metrics()) == []


@pytest.mark.parametrize("argv, needle", [
    (["--kv-capacity", "20"], "--kv-capacity: 20 is 20 bytes: give a unit, e.g. "
                              "--kv-capacity '20 GB'"),
    (["--kv-offload", "host-ddr5"], "--kv-offload-capacity: is needed with --kv-offload "
                                    "host-ddr5"),
])
def test_serve_size_mistakes_name_the_flag_and_the_fix(capsys, argv, needle):
    assert main(SERVE + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "_bytes" not in err


def test_a_one_column_table_does_not_label_rows_with_another_unit():
    lines = table({"wall_s": 0.1529, "decision_s": 0.0}, "times_s")
    assert lines[1].split() == ["ms"]
    assert lines[2].split() == ["wall", "152.9"] and lines[3].split()[0] == "decision"
    lines = table({"projections_ns": 4.081e6, "total_ns": 5.447e6}, "breakdown_ns")
    assert lines[1].split() == ["us"] and lines[2].split() == ["projections", "4,081"]


def test_time_spans_read_in_seconds_when_long():
    assert fmt.span_ns(0, 1_108_358_893_300) == "0 to 1,108 s"
    assert fmt.span_ns(12_000, 800_000) == "12 to 800 us"
    assert fmt.seconds(0.0) == "0 s" and fmt.seconds(None) == "-"


def test_model_text_shows_each_layer_kind_and_total_and_active_params(capsys):
    assert main(["model", "deepseek-v3", "--batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "671,026,419,200 (671.026B) total" in out and "active per token" in out
    assert "61 decoder layers" in out and "embeddings and LM head 1.853B" in out
    rows = {line.split("  ")[1].strip(): line.split() for line in out.splitlines()
            if line.startswith("  attention + ")}
    dense, moe = rows["attention + dense FFN"], rows["attention + MoE FFN"]
    assert dense[4:8] == ["3", "583.483M", "583.483M", "1.167"]
    assert moe[4] == "58" and moe[5] == "11.507B" and moe[7:9] == ["20.059", "GB"]
    assert "weight_bytes_per_layer" not in out     # layer 0's figure is not the model's


def test_model_kinds_of_a_hybrid_and_json_keeps_its_keys(capsys):
    assert main(["model", "jamba-mini", "--json"]) == 0
    o = json.loads(capsys.readouterr().out)
    kinds = {(k["mixer"], k["ffn"]): k for k in o["layer_kinds"]}
    assert kinds[("ssm", "moe")]["params_per_layer"] > \
        kinds[("ssm", "moe")]["active_params_per_layer"]
    assert o["decoder_params"] + o["embedding_params"] == o["total_params"]
    assert o["params_per_layer"] == kinds[("ssm", "dense")]["params_per_layer"]
    assert main(["model", "jamba-mini"]) == 0
    out = capsys.readouterr().out
    assert "mamba + MoE FFN" in out and "mamba + dense FFN" in out

"""``h2m2sim model`` and the Figure 3 script: required fields, JSON output, trace export,
and one-line errors with exit status 2."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dram_models.trace import load
from h2m2sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ["layers", "params_per_layer", "weight_bytes_per_layer", "kv_bytes_per_layer",
            "activation_bytes_per_layer", "total_weight_bytes", "total_kv_bytes",
            "flops_per_layer", "kernels_per_layer"]


def run_json(capsys, *argv):
    assert main(["model", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_fields(capsys):
    o = run_json(capsys, "gpt3-175b", "--batch", "32", "--seq", "2048", "--dtype", "int8")
    assert all(k in o for k in REQUIRED)
    assert o["layers"] == 96 and o["params_per_layer"] == 1_812_099_072
    assert o["weight_bytes_per_layer"] == 1_812_099_072
    assert o["kv_bytes_per_layer"] == 32 * 2048 * 2 * 12288
    assert o["total_kv_bytes"] == 96 * o["kv_bytes_per_layer"]
    assert o["kernels_per_layer"] == 106
    o16 = run_json(capsys, "gpt3-175b", "--batch", "32", "--seq", "2048", "--dtype", "fp16")
    assert o16["kv_bytes_per_layer"] == 2 * o["kv_bytes_per_layer"]


def test_text_output_and_partition(capsys):
    assert main(["model", "llama2-70b", "--batch", "4", "--seq", "100,200,50,7",
                 "--split", "qkv=2,attention=8,fc=20"]) == 0
    out = capsys.readouterr().out
    for k in REQUIRED:
        assert k in out
    assert "partition" in out and "hbm:" in out and "lpddr:" in out


def test_list(capsys):
    assert main(["model", "--list"]) == 0
    out = capsys.readouterr().out
    assert "gpt3-175b" in out and "deepseek-r1-distill-qwen-7b" in out


def test_export_trace(tmp_path, capsys):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("layers: 2\nhidden: 128\nheads: 4\nffn_dim: 512\nvocab: 100\n"
                    "max_context: 64\n")
    f = tmp_path / "layer.txt"
    o = run_json(capsys, str(tiny), "--batch", "2", "--seq", "12", "--export-trace", str(f),
                 "--format", "dramsim3", "--kv-layout", "paged", "--block-tokens", "4")
    tr = load(f, "dramsim3")
    assert len(tr) == o["trace"]["requests"] > 0
    g = tmp_path / "hbm.npz"
    o = run_json(capsys, str(tiny), "--batch", "2", "--seq", "12", "--split",
                 "qkv=1,attention=3,fc=0", "--side", "hbm", "--export-trace", str(g))
    assert len(load(g)) == o["trace"]["requests"]



def test_exports_of_every_format_replay_the_same(tmp_path, capsys):
    """The layer trace is an open loop: its DRAMsim3 export (every request at cycle 0)
    replays with the statistics of its Ramulator and npz exports, compressed or not."""
    from dram_models import replay
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("layers: 2\nhidden: 256\nheads: 4\nffn_dim: 1024\nvocab: 100\n"
                    "max_context: 256\n")
    drop = ("trace", "wall_s", "requests_per_s")
    results = {}
    for fmt, name in (("npz", "l.npz"), ("ramulator", "l.txt"), ("dramsim3", "l.trace"),
                      ("dramsim3", "l.trace.gz")):
        run_json(capsys, str(tiny), "--batch", "2", "--seq", "100", "--export-trace",
                 str(tmp_path / name), "--format", fmt)
        assert replay.main([str(tmp_path / name), "--standard", "lpddr5-6400", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        results[name] = {k: v for k, v in out.items() if k not in drop}
    assert results["l.npz"]["requests"] > 10_000
    assert all(r == results["l.npz"] for r in results.values()), results


@pytest.mark.parametrize("argv, words", [
    (["gpt3"], "did you mean 'gpt3-175b'"),
    (["opt-350m", "--batch", "0"], "--batch"),
    (["opt-350m", "--batch", "2", "--seq", "1,2,3"], "--seq"),
    (["opt-350m", "--phase", "prefil"], "did you mean 'prefill'"),
    (["opt-350m", "--split", "qkv=1,attention=1"], "split.fc"),
    (["opt-350m", "--split", "qkv=1,attention=1,fc=1", "--export-trace", "x.npz"], "--side"),
    (["opt-350m", "--export-trace", "x.npz", "--format", "csv"], "--format"),
    ([], "model name"),
])
def test_errors_are_one_line_exit_2(capsys, argv, words):
    assert main(["model", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err


@pytest.mark.parametrize("folder", ["models", "models.yaml"])
def test_a_folder_is_not_a_model_file(tmp_path, capsys, folder):
    (tmp_path / folder).mkdir()
    assert main(["model", str(tmp_path / folder)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: model: {tmp_path / folder} is a directory, not a model file "
                   "(give a zoo name or a model YAML file)\n")


def test_a_name_longer_than_a_file_name_is_an_unknown_model(capsys):
    assert main(["model", "m" * 300]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model: unknown model 'mmm") and err.count("\n") == 1


def test_fig3_script(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce_fig3_footprint.py"),
                          "--out", str(tmp_path), "--no-plot"], capture_output=True, text=True,
                         check=True)
    assert "attn" in out.stdout
    rows = list(csv.DictReader(open(tmp_path / "fig3_footprint.csv")))
    assert [int(r["seq"]) for r in rows] == [256, 512, 1024, 2048]
    share = [float(r["attention_share"]) for r in rows]
    assert share == sorted(share) and share[0] < 0.15 and share[-1] > 0.45
    # weights do not move with S; attention (KV) doubles with S
    assert len({r["fc_bytes"] for r in rows}) == 1 and len({r["qkv_bytes"] for r in rows}) == 1
    kv = [int(r["attention_kv_bytes"]) for r in rows]
    assert kv[1] == 2 * kv[0] and kv[3] == 8 * kv[0]


def test_hybrid_footprint_separates_ssm_state_from_kv(capsys):
    """jamba-mini: 4 attention layers hold KV growing with seq; 28 Mamba layers hold a
    fixed recurrent state per request (d_inner x (d_state + d_conv - 1) x 2 B)."""
    o1, o2 = (run_json(capsys, "jamba-mini", "--batch", "1", "--seq", s) for s in ("1024", "8192"))
    kinds = {(k["mixer"], k["ffn"]): k for k in o2["layer_kinds"]}
    assert {k: v["layers"] for k, v in kinds.items()} == {
        ("ssm", "dense"): 12, ("ssm", "moe"): 16, ("attention", "dense"): 4}
    state = 8192 * (16 + 3) * 2
    assert o1["ssm_state_bytes_per_layer"] == o2["ssm_state_bytes_per_layer"] == state
    assert kinds[("ssm", "moe")]["ssm_state_bytes_per_layer"] == state
    assert kinds[("ssm", "moe")]["kv_bytes_per_layer"] == 0
    assert kinds[("attention", "dense")]["ssm_state_bytes_per_layer"] == 0
    assert kinds[("attention", "dense")]["kv_bytes_per_layer"] == 8192 * 2 * 8 * 128 * 2
    assert o1["total_ssm_state_bytes"] == o2["total_ssm_state_bytes"] == 28 * state
    assert o2["total_kv_bytes"] == 8 * o1["total_kv_bytes"] == 4 * 8192 * 4096
    fp = o2["footprint_per_layer"]                 # layer 0 (Mamba): state apart from KV
    assert sum(v["ssm_state"] for v in fp.values()) == state
    assert sum(v["kv"] for v in fp.values()) == o2["kv_bytes_per_layer"] == 0
    main(["model", "jamba-mini", "--batch", "1", "--seq", "8192"])
    out = capsys.readouterr().out
    assert "mamba + MoE FFN" in out and "ssm state" in out.split("footprint per layer")[1]


def test_json_has_the_sizes_serving_studies_start_from(capsys):
    """params, active_params, KV bytes per token in the KV dtype, the batch's KV, and
    each layer's attention kind, at the top level."""
    def sizes(*extra):
        assert main(["model", "jamba-mini", "--json", "--batch", "2", "--seq", "100",
                     *extra]) == 0
        return json.loads(capsys.readouterr().out)
    d = sizes()
    assert d["params"] == d["total_params"] and 0 < d["active_params"] < d["params"]
    assert d["kv_dtype"] == d["dtype"] == "bf16"
    # Jamba: 4 attention layers of 8 KV heads x 128, K and V, 2 bytes
    assert d["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 2
    assert d["kv_bytes"] == d["kv_bytes_per_token"] * 200 == d["total_kv_bytes"]
    assert [i for i, a in enumerate(d["attention"]) if a == "full"] == [4, 12, 20, 28]
    assert set(d["attention"]) == {"full", "none"} and len(d["attention"]) == 32
    half = sizes("--kv-dtype", "int8")
    assert half["kv_bytes_per_token"] * 2 == d["kv_bytes_per_token"]
    assert half["total_weight_bytes"] == d["total_weight_bytes"]    # weights as before

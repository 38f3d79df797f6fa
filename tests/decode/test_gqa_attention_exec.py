"""The attention unit choice through the decode iteration: the same bytes on either
unit, the faster unit for GQA decode is MV, and auto equals it."""
from __future__ import annotations

from h2m2sim.decode.iteration import AttentionExec, layer_kernels, run_piece
from h2m2sim.model import load_model
from h2m2sim.system.config import resolve_system

NOCACHE = {"enabled": False}


def test_pinned_attention_unit_changes_time_not_bytes():
    system = resolve_system("h2m2", "system")
    model = load_model("llama3-8b")           # 32 query heads, 8 KV heads: group 4
    per, _ = layer_kernels(model, 4, 512, {"qkv": 8, "attention": 8, "fc": 32},
                           system.side_names)
    att = per[("hbm", "attention")]
    runs = {u: run_piece(system, "hbm", att, fidelity="cycle", cache=NOCACHE,
                         attention=AttentionExec("fused", u)) for u in ("auto", "mv", "mm")}
    assert runs["mv"].bytes == runs["mm"].bytes
    assert runs["mv"].flops == runs["mm"].flops
    assert runs["mv"].time_ns < runs["mm"].time_ns
    assert runs["auto"].time_ns == runs["mv"].time_ns

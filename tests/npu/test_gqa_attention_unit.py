"""Where GQA decode attention runs: the MV unit with K/V tiles reused across the query
group, or the MM array as a small GEMM; the automatic choice against closed forms."""
from __future__ import annotations

import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.npu.simulate import simulate_kernel
from h2m2sim.npu.tiling import Operand, choose_matmul_tiles, plan_matmul
from h2m2sim.system.chip import NpuChipConfig

CHIP = NpuChipConfig()
HD = 128


def _closed_form_cycles(chip, m, k, n):
    """One core's cycles for one KV head's product (m x k) @ (k x n), whole, on each
    unit (H2M2 Table 2 units, see h2m2sim/npu/units.py): MV = ceil(m n / lanes)
    ceil(k / width); MM (weight double-buffered) = preload + folds max(m, preload) +
    fill/drain."""
    mv = -(-m * n // chip.mv_lanes) * -(-k // chip.mv_width)
    pre = chip.mm_rows // chip.mm_preload_rows_per_cycle
    folds = -(-k // chip.mm_rows) * -(-n // chip.mm_cols)
    mm = pre + folds * max(m, pre) + chip.mm_rows + chip.mm_cols - 2
    return {"mv": mv, "mm": mm}


@pytest.mark.parametrize("m, k, n", [
    (8, HD, 4096),      # Llama2-70B score: group 8 x head_dim, 4096 keys -> MV (4x)
    (8, 4096, HD),      # its value product -> MV
    (1, HD, 4096),      # multi-head attention -> MV (32x)
    (512, HD, 4096),    # 512 queries per KV head (a prefill chunk) -> MM (4x)
    (512, 4096, HD),
])
def test_auto_unit_is_the_closed_form_faster_one(m, k, n):
    """Compute-bound (memory bandwidth far above the units' demand): the tile search
    picks the unit whose closed-form cycles are lower (every case differs >= 3x)."""
    cyc = _closed_form_cycles(CHIP, m, k, n)
    faster = min(cyc, key=cyc.get)
    assert max(cyc.values()) >= 3 * min(cyc.values())
    t = choose_matmul_tiles(CHIP, CHIP.cores, m, k, n, 1, bw_gbps=1e9)
    assert t.unit == faster


def test_auto_unit_is_the_simulated_faster_one_for_gqa_decode():
    """Llama2-70B decode attention (8 KV heads, group 8, S = 4096) on the HBM side:
    MV is faster than MM in the cycle-level run, and auto picks MV."""
    runs = {u: simulate_kernel("h2m2", "hbm", "attn_score", 8, HD, 4096, batch=8, unit=u)
            for u in ("auto", "mv", "mm")}
    assert runs["mv"].time_ns < runs["mm"].time_ns
    assert runs["auto"].unit == "mv"
    assert runs["auto"].time_ns == runs["mv"].time_ns
    assert runs["mv"].bytes == runs["mm"].bytes


def _kv_read_bytes(group: int, layout: str, unit: str, heads: int = 8, s: int = 2048):
    m, (k, n) = group, ((HD, s) if layout == "nk" else (s, HD))
    ops = [Operand.of("A", 0, heads * m * k), Operand.of("KV", 1 << 40, heads * k * n, "kv"),
           Operand.of("C", 1 << 41, heads * m * n)]
    p = plan_matmul(CHIP, "attn", ops, 0, 1, 2, heads, m, k, n, 1, 3000.0, layout,
                    unit=unit)
    assert p.unit == unit
    return int(p.r_len[p.r_op == 1].sum()), heads * s * HD


@pytest.mark.parametrize("unit", ["mv", "mm"])
@pytest.mark.parametrize("group", [1, 4, 8, 16])
def test_kv_bytes_read_once_per_group(group, unit):
    """K (read as its transpose, ``nk``) and V (``kn``): every KV byte is fetched from
    DRAM exactly once however many query heads share it; the group's query rows reuse
    the tile in the scratchpad."""
    for layout in ("nk", "kn"):
        got, kv = _kv_read_bytes(group, layout, unit)
        assert got == kv


def test_attention_unit_options_are_validated():
    from h2m2sim.decode.iteration import AttentionExec
    from h2m2sim.decode.job import iteration_options

    assert iteration_options({"attention_unit": "mm"}).attention_unit == "mm"
    assert iteration_options({}).attention_unit == "auto"
    with pytest.raises(ConfigError, match="attention_unit"):
        iteration_options({"attention_unit": "gpu"})
    with pytest.raises(ConfigError, match="attention_unit"):
        AttentionExec("per-request", "systolic")
    assert AttentionExec.of("fused") == AttentionExec("fused", "auto")

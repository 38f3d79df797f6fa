"""Cycle models of the MM (weight-stationary systolic), MV and vector units."""
import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st

from h2m2sim.system.chip import NpuChipConfig
from h2m2sim.npu.units import (ideal_mm_cycles, mm_cycles, mv_cycles, vector_cycles,
                               vector_passes)

CHIP = NpuChipConfig()


def test_mm_tile_cycles_count_preload_fill_and_drain():
    # 4 folds of 128x128 weights, 512 input rows each; preload 128, skew 128 + 128 - 2
    assert mm_cycles(CHIP, 512, 256, 256) == 128 + 4 * 512 + 254
    assert ideal_mm_cycles(CHIP, 512, 256, 256) == 2048
    single = dataclasses.replace(CHIP, mm_weight_double_buffer=False)
    assert mm_cycles(single, 512, 256, 256) == 4 * (128 + 512 + 254)
    # fewer input rows than the preload: each fold costs the preload, not m
    assert mm_cycles(CHIP, 8, 128, 128) == 128 + 128 + 254
    # partial folds at the edges cost whole folds
    assert mm_cycles(CHIP, 512, 129, 129) == 128 + 4 * 512 + 254


def test_big_tiles_approach_ideal():
    c = mm_cycles(CHIP, 2048, 12288, 256)
    assert 1.0 < c / ideal_mm_cycles(CHIP, 2048, 12288, 256) < 1.001


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000))
def test_mm_never_beats_ideal_and_mv_never_beats_its_peak(m, k, n):
    assert mm_cycles(CHIP, m, k, n) >= ideal_mm_cycles(CHIP, m, k, n)
    assert mv_cycles(CHIP, m, k, n) >= m * k * n / (CHIP.mv_lanes * CHIP.mv_width)


def test_mv_and_vector_cycles():
    assert mv_cycles(CHIP, 1, 4096, 4096) == 128 * 32 + CHIP.mv_latency
    assert mv_cycles(CHIP, 8, 128, 4096) == 8 * 4096 // 32 + CHIP.mv_latency
    assert vector_cycles(CHIP, 1024, (4, 1)) == 4 * 8 + 8 + CHIP.vector_latency
    arr = vector_cycles(CHIP, np.array([128, 129]), (1, 0))
    assert list(arr) == [1 + CHIP.vector_latency, 2 + CHIP.vector_latency]


def test_vector_passes_from_model_flops():
    assert vector_passes("layernorm", 8.0) == (7, 0)
    assert vector_passes("layernorm", 4.0) == (4, 0)      # rmsnorm
    assert vector_passes("activation", 8.0) == (1, 1)     # gelu
    assert vector_passes("activation", 5.0) == (2, 1)     # silu + gate multiply
    assert vector_passes("softmax") == (4, 1)


def test_chip_peaks():
    assert CHIP.mm_peak_tops == 2 * 128 * 128 * 4 / 1e3
    assert CHIP.mv_peak_tops == 2 * 32 * 128 * 4 / 1e3

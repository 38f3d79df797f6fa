"""Compute devices beside the NPU chip model: :mod:`.roofline` (peak FLOP/s x efficiency
over a system side's DRAM, measured with the DRAM engine) and :mod:`.npu_attention`
(attention priced by the NPU chip model, interpolated)."""
from .npu_attention import NpuAttentionPricer
from .roofline import ROOFLINE_PRESETS, RooflineDevice, RooflineSpec, default_spec, \
    load_roofline_spec

__all__ = ["RooflineDevice", "RooflineSpec", "ROOFLINE_PRESETS", "default_spec",
           "load_roofline_spec", "NpuAttentionPricer"]

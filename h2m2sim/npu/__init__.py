"""NPU chip model (H2M2 Sec. 4.1, Fig. 11, Table 2): cores with a weight-stationary
systolic MM unit, an MV unit, a vector unit/SFU, a double-buffered scratchpad and a DMA
engine, closed-loop with the dram_models engine.

* :mod:`.units` -- cycle counts of the MM, MV and vector units;
* :mod:`.tiling` -- kernels -> tiles on cores (:class:`TilePlan`);
* :mod:`.dma` -- tiles -> DMA request streams for the engine;
* :mod:`.simulate` -- :func:`simulate_kernel`, :func:`run_kernel`, :func:`run_kernels`.
"""
from .simulate import FIDELITIES, OPS, KernelResult, run_kernel, run_kernels, simulate_kernel

__all__ = ["KernelResult", "simulate_kernel", "run_kernel",
           "run_kernels", "OPS", "FIDELITIES"]

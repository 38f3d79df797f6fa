"""LLM model zoo and decoder-layer kernel graphs (H2M2 Sections 2.1 and 3.1).

* :mod:`.spec` -- :class:`ModelSpec`, the zoo (``workloads/models/*.yaml``),
  :func:`load_model`, :func:`list_models`, :data:`DTYPE_BYTES`;
* :mod:`.graph` -- :class:`Kernel`, :class:`TensorRef`, :func:`build_layer_graph`,
  :func:`partition_layer` (head-aware split over two memory sides), :func:`split_units`;
* :mod:`.footprint` -- :func:`footprint` per sublayer and tensor kind.

The DRAM requests of one layer, once its tensors are placed, are the memory layer's
(:func:`h2m2sim.memory.layer_traffic.layer_traffic`).
"""
from .spec import (DTYPE_BITS, DTYPE_BYTES, ModelSpec, dtype_bytes, list_models, load_model,
                   stored_bytes)
from .graph import (KINDS, OPS, SUBLAYERS, VECTOR_FLOPS, Barrier, Kernel, TensorRef, Transfer,
                    barriers, build_layer_graph, kernels, normalize_batch, partition_layer,
                    split_units, total_flops, transfer_bytes, transfers, unique_bytes,
                    expected_experts, layer_model, STATE_TENSORS, state_bytes,
                    windowed_lens)
from .footprint import footprint, graph_footprint

__all__ = ["DTYPE_BITS", "DTYPE_BYTES", "ModelSpec", "dtype_bytes", "stored_bytes",
           "list_models", "load_model",
           "KINDS", "OPS", "SUBLAYERS", "VECTOR_FLOPS", "Barrier", "Kernel", "TensorRef",
           "Transfer", "barriers", "build_layer_graph", "kernels", "normalize_batch",
           "partition_layer", "split_units", "total_flops", "transfer_bytes", "transfers",
           "unique_bytes", "expected_experts", "layer_model", "footprint", "graph_footprint",
           "STATE_TENSORS", "state_bytes", "windowed_lens"]

"""Memory footprint of one decoder layer per sublayer and tensor kind (H2M2 Figure 3).

Each stored tensor is counted once and charged to the sublayer that first *reads* it
(H2M2 Figure 2 draws weights, input activations and the KV cache as inputs of the
operation that uses them): the KV cache and the query go to attention, the attention
output to fc. A tensor nobody in the layer reads (the layer output) is charged to the
sublayer that writes it. Views (row slices, in-place results, appended KV tokens) add
nothing beyond the tensor they belong to.
"""
from __future__ import annotations

import networkx as nx

from .graph import KINDS, STATE_TENSORS, SUBLAYERS, build_layer_graph

__all__ = ["footprint", "graph_footprint"]


def graph_footprint(G: nx.DiGraph, by_side: bool = False, state_apart: bool = False) -> dict:
    """Footprint of a built layer graph: ``{sublayer: {kind: bytes}}``, or with
    ``by_side`` ``{side: {sublayer: {kind: bytes}}}`` where a tensor used on both sides
    (a replicated input, a transferred copy) is counted on each side that holds it.
    Where a side only touches views of a tensor (a column slice of the layer input), only
    those views are counted there. ``state_apart``: a hybrid layer's recurrent Mamba
    state (:data:`~h2m2sim.model.graph.STATE_TENSORS`, stored as kind ``kv``) is counted
    under its own kind ``ssm_state`` (0 where there is none) instead of ``kv``."""
    stored: dict[tuple, object] = {}      # (side, name) -> TensorRef (non-view)
    views: dict[tuple, dict] = {}         # (side, base) -> {view name: bytes}
    reader: dict[str, str] = {}           # base -> sublayer of first reader
    writer: dict[str, str] = {}           # base -> sublayer of first writer
    kinds: dict[str, str] = {}
    for _, a in G.nodes(data=True):
        if a["type"] != "kernel":
            continue
        k = a["kernel"]
        side = k.side if by_side else None
        for t, is_read in [(t, True) for t in k.operands] + [(t, False) for t in k.outputs]:
            base = t.base
            state = state_apart and t.kind == "kv" and base.startswith(STATE_TENSORS)
            kinds.setdefault(base, "ssm_state" if state else t.kind)
            (reader if is_read else writer).setdefault(base, k.sublayer)
            if t.view_of is None:
                stored.setdefault((side, base), t)
            else:
                views.setdefault((side, base), {})[t.name] = t.bytes
    kind_keys = KINDS + ("ssm_state",) if state_apart else KINDS
    empty = lambda: {s: {kd: 0 for kd in kind_keys} for s in SUBLAYERS}  # noqa: E731
    totals: dict = {}
    for key in set(stored) | set(views):
        side, base = key
        nbytes = stored[key].bytes if key in stored else sum(views[key].values())
        sub = reader.get(base) or writer[base]
        totals.setdefault(side, empty())[sub][kinds[base]] += nbytes
    if by_side:
        return {side: totals[side] for side in sorted(totals, key=str)}
    return totals.get(None, empty())


def footprint(model, batch, seq_lens, dtype: str | None = None,
              phase: str = "decode") -> dict[str, dict[str, int]]:
    """Bytes of one decoder layer: ``{sublayer: {'weight'|'activation'|'kv': bytes}}``
    for ``batch`` requests with context lengths ``seq_lens`` (int or per request).
    Multiply by ``model.layers`` for the whole decoder stack."""
    return graph_footprint(build_layer_graph(model, batch, seq_lens, phase=phase, dtype=dtype))

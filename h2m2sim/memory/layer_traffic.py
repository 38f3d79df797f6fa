"""DRAM traffic of one decoder layer as a request trace, for replay in any DRAM model.

:func:`layer_traffic` walks the kernels of a layer graph in order and emits the
compulsory traffic: every operand read once, every output written once (weights streamed
front to back, each request's K and V read per attention kernel, the new token's K/V
appended). On-chip reuse, tiling re-reads and prefetch order are the NPU model's
business; this trace is the workload itself, so another simulator (Ramulator 2, DRAMsim3)
can replay it.

Address map of one memory side (each side has its own address space starting at 0):

* weights, packed in order of first use, each aligned to ``request_bytes``;
* the KV region (starting on a 4 KiB boundary). ``contiguous``: each request owns one
  region holding its K then its V, each laid out [kv head][token][head_dim], regions
  back to back in request order. paged: blocks of the layout's ``block_tokens`` tokens, each
  holding [K|V][kv head][token in block][head_dim], placed at seeded random slots of a
  pool with exactly as many slots as blocks (vLLM-style scatter, no waste);
* activations, packed in order of first use (4 KiB aligned region).

All requests are reads or writes of ``request_bytes`` at aligned addresses, open loop
(arrival -1). A view of an activation (a row or column slice) is read as one contiguous
span at its offset, which slightly merges strided column slices; activations are a tiny
share of decode traffic.
"""
from __future__ import annotations

import numpy as np

from dram_models.errors import ConfigError
from dram_models.trace import Trace
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.model.graph import STATE_TENSORS, build_layer_graph, partition_layer

__all__ = ["layer_traffic"]
_REGION_ALIGN = 4096


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


class _Chunks:
    """Byte spans (start, length, is_write) collected in order, expanded at the end."""

    def __init__(self):
        self.starts: list[np.ndarray] = []
        self.lens: list[np.ndarray] = []
        self.writes: list[np.ndarray] = []

    def add(self, starts, lens, is_write: bool) -> None:
        starts = np.asarray(starts, dtype=np.int64).ravel()
        lens = np.broadcast_to(np.asarray(lens, dtype=np.int64), starts.shape).ravel()
        keep = lens > 0
        if not keep.all():
            starts, lens = starts[keep], lens[keep]
        if len(starts) == 0:
            return
        self.starts.append(starts)
        self.lens.append(lens)
        self.writes.append(np.full(len(starts), is_write, dtype=np.bool_))

    def trace(self, req: int) -> Trace:
        if not self.starts:
            return Trace.open_loop(np.zeros(0, dtype=np.uint64))
        s = np.concatenate(self.starts)
        n = np.concatenate(self.lens)
        w = np.concatenate(self.writes)
        # merge spans that continue the previous one in the same direction
        if len(s) > 1:
            cont = np.empty(len(s), dtype=np.bool_)
            cont[0] = False
            cont[1:] = (s[1:] == s[:-1] + n[:-1]) & (w[1:] == w[:-1])
            group = np.cumsum(~cont) - 1
            heads = np.flatnonzero(~cont)
            s = s[heads]
            n = np.bincount(group, weights=n).astype(np.int64)
            w = w[heads]
        first = s // req
        last = (s + n - 1) // req
        counts = last - first + 1
        total = int(counts.sum())
        starts_rep = np.repeat(first - (np.cumsum(counts) - counts), counts)
        addr = (starts_rep + np.arange(total, dtype=np.int64)) * req
        return Trace.open_loop(addr.astype(np.uint64), np.repeat(w, counts))


class _KVAddresses:
    """Addresses of the K/V caches of one side."""

    def __init__(self, caches: dict, base: int, layout: KVLayout, req: int, seed: int,
                 db: int):
        # caches: name -> (request, 0 for K / 1 for V, kv heads u, tokens S, head_dim)
        block_tokens = layout.block_tokens
        self.caches, self.layout, self.bt, self.db = caches, layout, block_tokens, db
        per_req: dict[int, tuple] = {}
        for _, (r, _, u, s, hd) in caches.items():
            per_req[r] = (u, s, hd)
        self.req_base: dict[int, int] = {}
        self.block_slots: dict[int, np.ndarray] = {}
        addr = base
        if not layout.is_paged:
            for r in sorted(per_req):
                u, s, hd = per_req[r]
                self.req_base[r] = addr
                addr = _align(addr + 2 * u * s * hd * db, req)
        else:
            nblocks = {r: -(-per_req[r][1] // block_tokens) for r in sorted(per_req)}
            total = sum(nblocks.values())
            perm = np.random.default_rng(seed).permutation(total).astype(np.int64)
            # one stride for all blocks of the side (every request has the same heads)
            u, _, hd = next(iter(per_req.values())) if per_req else (0, 0, 0)
            self.block_stride = _align(max(2 * u * block_tokens * hd * db, 1), req)
            start = 0
            for r in sorted(per_req):
                self.block_slots[r] = base + perm[start:start + nblocks[r]] * self.block_stride
                start += nblocks[r]
            addr = base + total * self.block_stride
        self.end = addr

    def spans(self, name: str, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of tokens [t0, t1) of all heads of cache ``name``."""
        r, which, u, s, hd = self.caches[name]
        tok = hd * self.db
        heads = np.arange(u, dtype=np.int64)
        if not self.layout.is_paged:
            base = self.req_base[r] + which * u * s * tok
            starts = base + heads * s * tok + t0 * tok
            return starts, np.full(u, (t1 - t0) * tok, dtype=np.int64)
        bt = self.bt
        blocks = np.arange(t0 // bt, (t1 - 1) // bt + 1, dtype=np.int64)
        lo = np.maximum(blocks * bt, t0)
        hi = np.minimum((blocks + 1) * bt, t1)
        baddr = self.block_slots[r][blocks] + which * u * bt * tok
        starts = baddr[:, None] + heads[None, :] * bt * tok + ((lo - blocks * bt) * tok)[:, None]
        lens = np.broadcast_to(((hi - lo) * tok)[:, None], starts.shape)
        return starts.ravel(), np.ascontiguousarray(lens).ravel()


#: Bytes of one DRAM request: a power of two from the smallest access a memory system
#: serves (a sector, 8 B) to a row (page) of 8 KiB, so that requests tile the bursts and
#: rows they fall in, as a cache or DMA engine issues them.
REQUEST_BYTES_RANGE = (8, 8192)


def _check_request_bytes(v) -> None:
    lo, hi = REQUEST_BYTES_RANGE
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi \
            or v & (v - 1):
        raise ConfigError("request_bytes", f"must be a power of two from {lo} to {hi} "
                          f"bytes, got {v!r}")


def layer_traffic(model, batch, seq_lens, kv_layout: KVLayout = CONTIGUOUS,
                  request_bytes: int = 32, dtype: str | None = None,
                  seed: int = 0, split=None, side: str | None = None,
                  phase: str = "decode", sides=("hbm", "lpddr"),
                  activations: bool = True) -> Trace:
    """DRAM requests of one decoder layer in kernel order (see the module docstring).

    With ``split`` (as for :func:`partition_layer`) only the part on ``side`` is emitted:
    its kernels, plus the reads of activations it sends and the writes of copies it
    receives. ``activations=False`` keeps only weight and KV traffic.
    """
    if not isinstance(kv_layout, KVLayout):
        raise ConfigError("kv_layout", f"must be a KVLayout, got {kv_layout!r}")
    _check_request_bytes(request_bytes)
    if split is None:
        if side is not None:
            raise ConfigError("side", "only meaningful with split (a partitioned layer)")
        G = build_layer_graph(model, batch, seq_lens, phase=phase, dtype=dtype)
    else:
        G = partition_layer(model, batch, seq_lens, split, phase=phase, dtype=dtype, sides=sides)
        if side not in sides:
            raise ConfigError("side", f"must be one of {', '.join(sides)} with split, got {side!r}")
    req = int(request_bytes)

    # the kernels and transfers this side executes, in graph order (insertion order is a
    # topological order: every edge points from an earlier node to a later one)
    steps = []
    for _, a in G.nodes(data=True):
        if a["type"] == "kernel" and a["kernel"].side == side:
            k = a["kernel"]
            steps.append(([(t, False) for t in k.operands] + [(t, True) for t in k.outputs]))
        elif a["type"] == "transfer":
            x = a["transfer"]
            if x.src == side:
                steps.append([(x.tensor, False)])
            elif x.dst == side:
                steps.append([(x.copy, True)])
    # pre-scan: extents of every stored tensor, and the KV caches of this side
    extent: dict[str, int] = {}
    caches: dict[str, tuple] = {}
    db = 1
    for step in steps:
        for t, _ in step:
            db = t.dtype_bytes
            if t.view_of is None:
                extent[t.name] = max(extent.get(t.name, 0), t.bytes)
                if t.kind == "kv" and not t.name.startswith(STATE_TENSORS):
                    u, s, hd = t.shape
                    caches[t.name] = (t.request, 0 if t.name.startswith("K") else 1, u, s, hd)
            elif t.kind != "kv":
                extent[t.view_of] = max(extent.get(t.view_of, 0), t.offset + t.bytes)
    weight_end = 0
    addr: dict[str, int] = {}
    for step in steps:  # weights first, in order of first use
        for t, _ in step:
            if t.kind == "weight" and t.name not in addr:
                addr[t.name] = weight_end
                weight_end = _align(weight_end + t.bytes, req)
    kv = _KVAddresses(caches, _align(weight_end, _REGION_ALIGN), kv_layout, req, seed, db)
    act_next = _align(kv.end, _REGION_ALIGN)

    out = _Chunks()
    for step in steps:
        for t, is_write in step:
            if t.kind == "kv" and (t.view_of or t.name).startswith(STATE_TENSORS):
                # a Mamba layer's recurrent state: one fixed contiguous block per request,
                # read and written in place, traced even without activations
                base = t.view_of or t.name
                if base not in addr:
                    addr[base] = act_next
                    act_next = _align(act_next + extent[base], req)
                out.add([addr[base] + t.offset], [t.bytes], is_write)
                continue
            if t.kind == "kv":
                name = t.view_of or t.name
                s = caches[name][3]
                t_new = t.shape[1]
                t0, t1 = (s - t_new, s) if t.view_of else (0, s)
                starts, lens = kv.spans(name, t0, t1)
                out.add(starts, lens, is_write)
                continue
            if t.kind == "activation" and not activations:
                continue
            base = t.view_of or t.name
            if base not in addr:
                addr[base] = act_next
                act_next = _align(act_next + extent[base], req)
            out.add([addr[base] + t.offset], [t.bytes], is_write)
    return out.trace(req)

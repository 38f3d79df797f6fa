"""eLLM elastic memory (Xu et al., "eLLM: Elastic Memory Management Framework for
Efficient LLM Serving", arXiv 2506.15155, 2025) and its baseline, the vLLM-style
static split, as one allocator class ``ellm``.

Model (Sections 4.2-4.3 of the paper):

* **One physical pool** of ``chunk_bytes`` chunks (2 MiB, the CUDA VMM mapping
  granularity) covers the whole region the allocator manages (device memory x
  utilization - weights). Every chunk is owned either by the *activation* pool or by the
  *KV* pool (the paper's "ownership"), and inside its pool it is either *used* (mapped
  into a live eTensor) or *free* (mapped, idle, reusable). Always::

      act_used + act_free + kv_used + kv_free == total_chunks

* At start the activation pool owns the chunks of the *activation reserve* (what vLLM
  profiles: a prefill of the maximum batched tokens), the KV pool owns the rest. That
  split is exactly the vLLM static split; with ``elastic=False`` it never changes.
* **Inflation** (``elastic=True``): when the KV pool has no free chunk left, it borrows
  *idle* (free) activation chunks, one ownership transfer per chunk, lazily: only the
  shortfall, only when a KV allocation needs it. Used activation chunks are never taken.
* **Deflation**: when activations need more chunks than the activation pool has free,
  free KV chunks go back to the activation pool, again only the shortfall.
* KV of a request is a list of KV blocks of ``block_tokens`` tokens (default: as many
  tokens as fit in one chunk, 16 for Llama3-8B FP16 -- the vLLM block size too); its
  layout class is ``paged:<block_tokens>``.
* **Recurrent state** of a hybrid model's request (Mamba layers; :mod:`.state`): with
  ``elastic=True`` it is one more dynamic tensor of the unified pool, whole chunks taken
  from the KV side at admission and returned at release (the KV pool may inflate for
  it); the static split keeps vLLM's preallocated slot per schedulable sequence
  (``state_slots``, outside the pool, as the other allocators).
* **CPU buffer**: KV of a request can live in a host buffer of ``cpu_buffer_bytes``
  (offloaded during its prefill and fetched back before it decodes). Only the *logical*
  size (Algorithm 2 scales it; see :mod:`h2m2sim.serving.ellm`) may be filled. Transfers
  are priced by a :class:`HostLinkSpec`.

The admission decisions of Algorithm 1 (which requests prefill, which are offloaded,
which are fetched) are made by the serving side (:mod:`h2m2sim.serving.ellm`) through
:meth:`ElasticAllocator.fits`, :meth:`set_activation`, :meth:`reserve`,
:meth:`offload` and :meth:`fetch`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from dram_models.schema import load, param
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

from .base import KVAllocator

__all__ = ["HostLinkSpec", "ElasticAllocator", "CHUNK_BYTES"]

#: CUDA virtual memory management granularity on A100 (cuMemGetAllocationGranularity
#: returns 2 MiB), the chunk size eLLM maps.
CHUNK_BYTES = 2 * 1024 * 1024


def _move_chunks(src: list, dst: list, n: int) -> None:
    """Move the last ``n`` chunk ids of ``src`` to the end of ``dst`` in pop order (as
    ``n`` times ``dst.append(src.pop())``, without the Python loop)."""
    if n > 0:
        dst.extend(src[:-n - 1:-1])
        del src[-n:]


@dataclass(frozen=True)
class HostLinkSpec:
    """The device-host link that offloads and fetches KV: one transfer of ``n`` bytes
    takes ``n / (bandwidth_GBps * 1e9) + latency_s`` seconds (GB/s = 1e9 B/s)."""

    bandwidth_GBps: float = param(
        25.0, gt=0, unit="GB/s",
        doc="Sustained host<->device bandwidth, one direction.",
        source="PCIe 4.0 x16 (A100 SXM host link): 16 GT/s x 16 lanes x 128/130 = 31.5 "
               "GB/s raw per direction; ~80% after TLP/DLLP overhead with 256 B payloads, "
               "the 24-26 GB/s pinned-memory copies usually reach")
    latency_s: float = param(
        10e-6, ge=0, unit="s",
        doc="Fixed cost per transfer (DMA descriptor setup, driver launch).",
        source="estimate: cudaMemcpyAsync launch + PCIe round trip, ~5-10 us")

    def transfer_s(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` bytes in one transfer (0 for nothing)."""
        if nbytes <= 0:
            return 0.0
        return float(nbytes) / (self.bandwidth_GBps * 1e9) + self.latency_s


class ElasticAllocator(KVAllocator):
    """eLLM's unified chunk pool (``elastic=True``) or the vLLM static split
    (``elastic=False``, ``cpu_buffer_bytes=0``); see the module docstring.

    ``capacity_bytes`` is the whole region shared by activations and KV. The activation
    reserve must be set (:meth:`set_activation_reserve`) before the first reservation;
    the serving loop does it from the model's activation footprint."""

    name = "ellm"
    grows_in_blocks = True
    manages_activations = True

    @dataclass(frozen=True)
    class Params:
        """Options of the eLLM allocator (``allocator_params``)."""

        elastic: bool = param(True, doc="Intra-device elasticity (inflation/deflation). "
                                        "False = vLLM static split.")
        cpu_buffer_bytes: int = param(0, ge=0, unit="bytes",
                                      doc="Physical CPU buffer for offloaded KV (0 = off).")
        chunk_bytes: int = param(CHUNK_BYTES, gt=0, unit="bytes",
                                 doc="Physical chunk (mapping granularity).",
                                 source="CUDA VMM allocation granularity, 2 MiB")
        block_tokens: Optional[int] = param(None, gt=0, unit="tokens",
                                            doc="KV tokens per block; default: tokens "
                                                "per chunk (>= 1).")
        watermark: float = param(0.01, ge=0, lt=1,
                                 doc="Fraction of the pool kept free at admission (the "
                                     "threshold theta of Algorithm 1).",
                                 source="vLLM default watermark 0.01")
        activation_model: Optional[str] = param(None, doc="Zoo model whose activation "
                                                          "footprint the serving loop uses "
                                                          "(when it is not given one).")
        activation_dtype: str = param("fp16", doc="Data type of activations.")
        host_link: dict = param(default_factory=dict, doc="HostLinkSpec fields.")
        buffer_scaling: bool = param(True, doc="SLO-aware logical buffer scaling "
                                               "(Algorithm 2); needs slo_ttft_s/slo_tpot_s.")
        buffer_init_bytes: Optional[int] = param(None, gt=0, unit="bytes",
                                                 doc="Initial logical buffer (the paper's "
                                                     "'1'); default one chunk.")
        buffer_alpha: float = param(2.0, gt=1, doc="Buffer tuning factor alpha.",
                                    source="eLLM Sec. 4.4.2 default alpha = 2")
        slo_ttft_s: Optional[float] = param(None, gt=0, unit="s", doc="TTFT SLO.")
        slo_tpot_s: Optional[float] = param(None, gt=0, unit="s", doc="TPOT SLO.")

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, elastic: bool = True,
                 cpu_buffer_bytes: int = 0, chunk_bytes: int = CHUNK_BYTES,
                 block_tokens: int | None = None, watermark: float = 0.01,
                 activation_model: str | None = None, activation_dtype: str = "fp16",
                 host_link: dict | HostLinkSpec | None = None, buffer_scaling: bool = True,
                 buffer_init_bytes: int | None = None, buffer_alpha: float = 2.0,
                 slo_ttft_s: float | None = None, slo_tpot_s: float | None = None, **kw):
        self.elastic = bool(elastic)      # before the base: it decides where state lives
        super().__init__(capacity_bytes, bytes_per_token, **kw)
        if int(chunk_bytes) <= 0:
            raise ConfigError("allocator.chunk_bytes", f"must be > 0, got {chunk_bytes}")
        if not 0.0 <= float(watermark) < 1.0:
            raise ConfigError("allocator.watermark", f"must be in [0, 1), got {watermark}")
        if int(cpu_buffer_bytes) < 0:
            raise ConfigError("allocator.cpu_buffer_bytes",
                              f"must be >= 0, got {cpu_buffer_bytes}")
        if float(buffer_alpha) <= 1.0:
            raise ConfigError("allocator.buffer_alpha", f"must be > 1, got {buffer_alpha}")
        self.chunk_bytes = int(chunk_bytes)
        bpt = self.bytes_per_token
        self.block_tokens = int(block_tokens) if block_tokens else max(1, self.chunk_bytes // bpt)
        if self.block_tokens <= 0:
            raise ConfigError("allocator.block_tokens", f"must be > 0, got {block_tokens}")
        self.block_bytes = self.block_tokens * bpt
        self.block_chunks = -(-self.block_bytes // self.chunk_bytes)
        self.total_chunks = self.capacity_bytes // self.chunk_bytes
        if self.total_chunks < self.block_chunks:
            raise ConfigError("allocator.capacity_bytes",
                              f"{self.capacity_bytes} bytes hold no KV block of "
                              f"{self.block_bytes} bytes")
        self.watermark_chunks = int(float(watermark) * self.total_chunks)
        if isinstance(host_link, HostLinkSpec):
            self.link = host_link
        else:
            self.link = load(HostLinkSpec, dict(host_link or {}), key="allocator.host_link")
        self.cpu_buffer_bytes = int(cpu_buffer_bytes)
        self.activation_model = activation_model
        self.activation_dtype = str(activation_dtype)
        self.buffer_scaling = bool(buffer_scaling)
        self.buffer_init_bytes = int(buffer_init_bytes) if buffer_init_bytes else self.chunk_bytes
        self.buffer_alpha = float(buffer_alpha)
        self.slo_ttft_s = None if slo_ttft_s is None else float(slo_ttft_s)
        self.slo_tpot_s = None if slo_tpot_s is None else float(slo_tpot_s)
        # with both SLOs the logical buffer starts small and Algorithm 2 scales it;
        # otherwise the whole physical buffer is usable
        self.logical_buffer_bytes = (min(self.buffer_init_bytes, self.cpu_buffer_bytes)
                                     if self.scales_buffer else self.cpu_buffer_bytes)
        # chunk ids; free lists are stacks (top = end), used lists keep allocation order
        self._kv_free: list[int] = list(range(self.total_chunks - 1, -1, -1))
        self._act_free: list[int] = []
        self._act_used: list[int] = []
        self._kv_chunks: dict[int, list[int]] = {}
        self._state_chunks: dict[int, list[int]] = {}
        #: chunks of one request's state when pooled (0 otherwise)
        self.state_chunks = (-(-self.state.bytes_per_request // self.chunk_bytes)
                             if self.pools_state else 0)
        self.activation_reserve_chunks: int | None = None
        self._offloaded: dict[int, int] = {}     # req -> bytes in the CPU buffer
        self.cpu_used_bytes = 0
        self.peak_cpu_used_bytes = 0
        self.peak_kv_chunks = 0
        self.peak_act_chunks = 0
        self.counts.update({"inflate": 0, "deflate": 0, "inflated_chunks": 0,
                            "deflated_chunks": 0, "offload": 0, "fetch": 0,
                            "offload_bytes": 0, "fetch_bytes": 0, "act_deny": 0})

    # ---------------------------------------------------------------- setup
    @property
    def scales_buffer(self) -> bool:
        """Algorithm 2 active: a CPU buffer, scaling on, and both SLOs given."""
        return (self.buffer_scaling and self.cpu_buffer_bytes > 0 and
                self.slo_ttft_s is not None and self.slo_tpot_s is not None)

    def set_activation_reserve(self, nbytes: int) -> None:
        """Give the activation pool the chunks of ``nbytes`` (the vLLM profile of the
        largest prefill). Only before any KV is reserved."""
        if self._reqs or self._act_used or self.activation_reserve_chunks is not None:
            raise RuntimeError("the activation reserve is set once, before any allocation")
        n = -(-int(nbytes) // self.chunk_bytes)
        if n + self.block_chunks > self.total_chunks:
            raise ConfigError("allocator.capacity_bytes",
                              f"the activation reserve ({n} chunks of {self.chunk_bytes} "
                              f"bytes) leaves no room for KV in a pool of "
                              f"{self.total_chunks} chunks")
        if (self.total_chunks - n) // self.block_chunks * self.block_tokens < \
                self.max_context_tokens and not self.elastic:
            raise ConfigError("allocator.capacity_bytes",
                              f"the static split leaves {self.total_chunks - n} KV chunks, "
                              f"less than one request of {self.max_context_tokens} tokens")
        _move_chunks(self._kv_free, self._act_free, n)
        self.activation_reserve_chunks = n

    # ---------------------------------------------------------------- pool state
    @property
    def kv_layout(self) -> KVLayout:
        return KVLayout.paged(self.block_tokens)

    @property
    def kv_used_chunks(self) -> int:
        """Chunks of the KV side in use: KV blocks and pooled state."""
        return sum(len(c) for c in self._kv_chunks.values()) + \
            len(self._state_chunks) * self.state_chunks

    @property
    def kv_free_chunks(self) -> int:
        return len(self._kv_free)

    @property
    def act_free_chunks(self) -> int:
        return len(self._act_free)

    @property
    def act_used_chunks(self) -> int:
        return len(self._act_used)

    @property
    def kv_owned_chunks(self) -> int:
        return self.kv_used_chunks + len(self._kv_free)

    @property
    def act_owned_chunks(self) -> int:
        return len(self._act_used) + len(self._act_free)

    @property
    def borrowed_chunks(self) -> int:
        """Chunks the KV pool holds beyond its initial share (< 0: lent to activations)."""
        return self.kv_owned_chunks - (self.total_chunks - (self.activation_reserve_chunks or 0))

    def _kv_avail(self) -> int:
        """Chunks a KV allocation may use now: free KV chunks, plus idle activation
        chunks when elastic."""
        return len(self._kv_free) + (len(self._act_free) if self.elastic else 0)

    @property
    def free_blocks(self) -> int:
        """KV blocks obtainable now without touching used memory."""
        return self._kv_avail() // self.block_chunks

    @property
    def free_tokens(self) -> int:
        return self.free_blocks * self.block_tokens

    def kv_chunks_for(self, tokens: int) -> int:
        """Chunks of a KV reservation of ``tokens`` tokens (whole blocks)."""
        return -(-int(tokens) // self.block_tokens) * self.block_chunks

    def admission_chunks(self, tokens: int) -> int:
        """Chunks admitting a request with ``tokens`` KV tokens takes from the pool: its
        KV blocks and, when pooled, its state."""
        return self.kv_chunks_for(tokens) + self.state_chunks

    @property
    def pools_state(self) -> bool:
        """The elastic pool holds the requests' state; the static split a slot slab."""
        return self.elastic

    def _take_state(self, req_id: int) -> bool:
        if not self.pools_state:
            return super()._take_state(req_id)
        n = self.state_chunks
        if self._kv_avail() - n < self.watermark_chunks:
            return False
        self._state_chunks[req_id] = self._take_kv(n)
        self._note_kv_peak()
        return True

    def _return_state(self, req_id: int) -> None:
        if not self.pools_state:
            return super()._return_state(req_id)
        self._kv_free.extend(reversed(self._state_chunks.pop(req_id)))

    def act_chunks_for(self, nbytes: int) -> int:
        return -(-int(nbytes) // self.chunk_bytes)

    def fits(self, kv_chunks: int, act_bytes: int) -> bool:
        """Algorithm 1's test: can ``kv_chunks`` more KV chunks be allocated while the
        activations of the coming iteration take ``act_bytes`` (replacing the current
        ones), keeping the watermark free? Static split: KV within the KV pool, the
        activations within the activation pool."""
        a = self.act_chunks_for(act_bytes)
        if self.elastic:
            avail = len(self._kv_free) + len(self._act_free) + len(self._act_used)
            return avail - (kv_chunks + a) >= self.watermark_chunks
        return (len(self._kv_free) - kv_chunks >= self.watermark_chunks and
                a <= self.act_owned_chunks)

    # ---------------------------------------------------------------- activations
    def set_activation(self, nbytes: int) -> bool:
        """Make the live activations ``nbytes`` bytes: shrink (the chunks stay in the
        activation pool, idle and mapped: lazy) or grow (free activation chunks first,
        then deflation of free KV chunks when elastic). False, with no change, if the
        memory is not there."""
        need = self.act_chunks_for(nbytes)
        have = len(self._act_used)
        if need <= have:
            _move_chunks(self._act_used, self._act_free, have - need)
            return True
        more = need - have
        short = more - len(self._act_free)
        if short > 0:
            if not self.elastic or short > len(self._kv_free):
                self.counts["act_deny"] += 1
                return False
            self._deflate(short)
        _move_chunks(self._act_free, self._act_used, more)
        self.peak_act_chunks = max(self.peak_act_chunks, len(self._act_used))
        return True

    def _transfer(self, kind: str, src: list[int], dst: list[int], n: int) -> None:
        """Ownership transfer of ``n`` free chunks from one pool's free list to the
        other's (``inflate``: activation -> KV, ``deflate``: KV -> activation)."""
        _move_chunks(src, dst, n)
        self.counts[kind] += 1
        self.counts[f"{kind}d_chunks"] += n
        if self.log_all_events:
            self._log(kind, -1, 0, n * self.chunk_bytes)

    def _deflate(self, n: int) -> None:
        self._transfer("deflate", self._kv_free, self._act_free, n)

    def _inflate(self, n: int) -> None:
        self._transfer("inflate", self._act_free, self._kv_free, n)

    # ---------------------------------------------------------------- KV
    def _take_kv(self, n: int) -> list[int]:
        """``n`` chunks for KV, inflating lazily by the shortfall. Caller checked."""
        short = n - len(self._kv_free)
        if short > 0:
            self._inflate(short)
        got = self._kv_free[-n:][::-1] if n else []
        if n:
            del self._kv_free[-n:]
        return got

    def _note_kv_peak(self) -> None:
        used = self.total_chunks - len(self._kv_free) - self.act_owned_chunks
        self.peak_kv_chunks = max(self.peak_kv_chunks, used)

    def _reserve(self, req_id, prompt, need, predicted, uncertainty):
        if self.activation_reserve_chunks is None:
            raise RuntimeError("set_activation_reserve() before the first reservation")
        n = self.kv_chunks_for(need)
        if self._kv_avail() - n < self.watermark_chunks:
            return None
        self._kv_chunks[req_id] = self._take_kv(n)
        self._note_kv_peak()
        return n // self.block_chunks * self.block_tokens

    def _grow(self, req_id, r, new_tokens):
        n = self.kv_chunks_for(new_tokens) - len(self._kv_chunks[req_id])
        if n > self._kv_avail():
            return None
        self._kv_chunks[req_id].extend(self._take_kv(n))
        self._note_kv_peak()
        return len(self._kv_chunks[req_id]) // self.block_chunks * self.block_tokens

    def grow_blocks(self, req_ids) -> None:
        """One more block for each request of ``req_ids`` in order (the serving loop's
        fast path, as :meth:`PagedAllocator.grow_blocks`)."""
        n = len(req_ids)
        if n > self.free_blocks:
            raise ValueError("not enough free blocks")
        bt, bc = self.block_tokens, self.block_chunks
        chunks = self._take_kv(n * bc)
        for i, rid in enumerate(req_ids):
            self._kv_chunks[rid].extend(chunks[i * bc:(i + 1) * bc])
            r = self._reqs[rid]
            r.cap += bt
            r.used = r.cap - bt + 1
            if r.cap > r.peak_cap:
                r.peak_cap = r.cap
        self.counts["grow"] += n
        self._add_reserved(n * bt)
        self._note_kv_peak()

    def _release(self, req_id, r, generated, completed):
        # freed chunks stay in the KV pool (idle, mapped); deflation takes them lazily
        self._kv_free.extend(reversed(self._kv_chunks.pop(req_id)))

    def extents(self, req_id):
        chunks = np.asarray(self._kv_chunks[int(req_id)], dtype=np.uint64)
        base = np.uint64(self.base_address) + chunks * np.uint64(self.chunk_bytes)
        # each block fills its chunks in order; the last chunk of a block may be partial
        ln = np.full(len(chunks), self.chunk_bytes, dtype=np.uint64)
        tail = self.block_bytes - (self.block_chunks - 1) * self.chunk_bytes
        ln[self.block_chunks - 1::self.block_chunks] = tail
        return base, ln

    def chunk_ids(self, req_id: int) -> list[int]:
        return list(self._kv_chunks[int(req_id)])

    # ---------------------------------------------------------------- CPU buffer
    @property
    def cpu_free_bytes(self) -> int:
        """Room left in the *logical* CPU buffer."""
        return max(0, self.logical_buffer_bytes - self.cpu_used_bytes)

    def offload(self, req_id: int, tokens: int) -> bool:
        """Put ``tokens`` tokens of KV of a request (not holding device KV) into the CPU
        buffer; False (no change) if the logical buffer has no room."""
        req_id = int(req_id)
        if req_id in self._offloaded or req_id in self._reqs:
            raise ValueError(f"request {req_id} already holds KV memory")
        nbytes = int(tokens) * self.bytes_per_token
        if nbytes > self.cpu_free_bytes:
            return False
        self._offloaded[req_id] = nbytes
        self.cpu_used_bytes += nbytes
        self.peak_cpu_used_bytes = max(self.peak_cpu_used_bytes, self.cpu_used_bytes)
        self.counts["offload"] += 1
        self.counts["offload_bytes"] += nbytes
        if self.log_all_events:
            self._log("offload", req_id, int(tokens), nbytes)
        return True

    def is_offloaded(self, req_id: int) -> bool:
        return int(req_id) in self._offloaded

    def fetch(self, req_id: int, need_tokens: int) -> float | None:
        """Bring an offloaded request's KV back: reserve ``need_tokens`` on the device,
        free its CPU buffer space; returns the transfer time (s) of its bytes over the
        host link, or None (no change) if the device cannot hold it."""
        req_id = int(req_id)
        nbytes = self._offloaded[req_id]
        tokens = nbytes // self.bytes_per_token
        if not self.reserve(req_id, tokens, need_tokens=need_tokens):
            return None
        del self._offloaded[req_id]
        self.cpu_used_bytes -= nbytes
        self.counts["fetch"] += 1
        self.counts["fetch_bytes"] += nbytes
        if self.log_all_events:
            self._log("fetch", req_id, tokens, nbytes)
        return self.link.transfer_s(nbytes)

    def drop_offloaded(self, req_id: int) -> None:
        """Forget an offloaded request's KV (it finished without decoding)."""
        self.cpu_used_bytes -= self._offloaded.pop(int(req_id))

    def set_logical_buffer(self, nbytes: int) -> None:
        """Algorithm 2's output: the usable part of the physical buffer (data already
        there stays; it only limits new offloads)."""
        self.logical_buffer_bytes = int(min(max(nbytes, 0), self.cpu_buffer_bytes))

    # ---------------------------------------------------------------- reports
    def pool_state(self) -> dict[str, int]:
        """Chunks per (pool, state)."""
        return {"act_used": len(self._act_used), "act_free": len(self._act_free),
                "kv_used": self.kv_used_chunks, "kv_free": len(self._kv_free),
                "total": self.total_chunks}

    def stats(self) -> dict:
        out = super().stats()
        out.update(self.pool_state())
        out.update(mode="ellm" if self.elastic else "static-split",
                   chunk_bytes=self.chunk_bytes, block_tokens=self.block_tokens,
                   activation_reserve_chunks=self.activation_reserve_chunks,
                   borrowed_chunks=self.borrowed_chunks, peak_kv_chunks=self.peak_kv_chunks,
                   peak_act_chunks=self.peak_act_chunks,
                   cpu_buffer_bytes=self.cpu_buffer_bytes,
                   logical_buffer_bytes=self.logical_buffer_bytes,
                   peak_cpu_used_bytes=self.peak_cpu_used_bytes,
                   host_link_GBps=self.link.bandwidth_GBps)
        return out

    def check_invariants(self) -> None:
        super().check_invariants()
        used = [c for cl in self._kv_chunks.values() for c in cl]
        state = [c for cl in self._state_chunks.values() for c in cl]
        assert len(state) == len(self._state_chunks) * self.state_chunks
        every = used + state + self._kv_free + self._act_free + self._act_used
        assert len(every) == self.total_chunks, (len(every), self.total_chunks)
        assert len(set(every)) == self.total_chunks, "a chunk is in two places"
        assert all(0 <= c < self.total_chunks for c in every)
        for rid, cl in self._kv_chunks.items():
            assert len(cl) == self._reqs[rid].cap // self.block_tokens * self.block_chunks
        if not self.elastic and self.activation_reserve_chunks is not None:
            assert self.act_owned_chunks == self.activation_reserve_chunks, "static split moved"
        assert 0 <= self.cpu_used_bytes == sum(self._offloaded.values())
        assert not set(self._offloaded) & set(self._reqs), "offloaded and on device"

    def describe(self) -> dict[str, Any]:
        return {"elastic": self.elastic, "cpu_buffer_bytes": self.cpu_buffer_bytes,
                "chunk_bytes": self.chunk_bytes, "block_tokens": self.block_tokens}

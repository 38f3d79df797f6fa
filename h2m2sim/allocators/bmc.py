"""BMC allocator: contiguous KV extents with ``r`` spare rows, re-allocated (allocate +
copy) whenever the spare rows run out (Ramachandran et al., "Striking the Right Balance
between Compute and Copy", arXiv 2025; the cost model is :mod:`h2m2sim.compute.bmc`).

A request's extent always holds a multiple of ``r`` tokens (capped at
``max_context_tokens``). ``grow`` beyond it takes a new extent of the next multiple, logs a
``migrate`` event with the bytes of the KV written so far (the copy the DRAM model prices)
and frees the old one. Attention runs over the whole extent with a mask:
:meth:`BMCAllocator.attention_tokens` is that padded length.

Modes (``mode``): ``iterative`` (r = 1, HuggingFace: a new extent and a copy every
token), ``upfront`` (r = max_context_tokens: one extent, never copied), ``bmc`` (``spare_rows``
= r, or ``allocations`` = T with r = ceil(max_context / T)), ``bmc-auto`` (T from the
analytical optimum of :meth:`h2m2sim.compute.bmc.BMCCostModel.analytical_T`, measured on a
roofline device of ``system``/``side`` for ``model`` at ``batch``, rounded to a power of
two; or given directly as ``auto_T``; with speculative decoding from ``speculative_k`` and
``accepted_m``, or ``acceptance_rate`` through the shared expected-acceptance formula of
:mod:`h2m2sim.compute.speculative`). Speculative decoding needs nothing else here:
the speculated tokens live in the spare rows (``grow`` is asked only when the accepted
tokens overflow them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dram_models.schema import param
from h2m2sim.compute.bmc import (
    AttentionShape,
    BMCCostModel,
    accepted_per_step,
    rows_per_allocation,
)
from h2m2sim.compute.roofline import RooflineDevice
from h2m2sim.errors import ConfigError

from .base import ContiguousAllocator

__all__ = ["BMCAllocator"]


class BMCAllocator(ContiguousAllocator):
    """Contiguous extents grown ``r`` tokens at a time (see the module docstring)."""

    name = "bmc"

    @dataclass(frozen=True)
    class Params:
        """Options of the BMC allocator (``policy.allocator_params``)."""

        mode: str = param("bmc", choices=("iterative", "upfront", "bmc", "bmc-auto"),
                          doc="iterative (r=1), upfront (r=N), bmc (spare_rows or "
                          "allocations), bmc-auto (analytical T)")
        spare_rows: Optional[int] = param(None, ge=1, unit="tokens",
                                          doc="r: tokens added per re-allocation (bmc)")
        allocations: Optional[int] = param(None, ge=1, doc="T: allocations over "
                                           "max_context_tokens (bmc, when spare_rows is "
                                           "not given; default 16)",
                                           source="BMC paper Sec. VIII: T = 16 at N = 1024")
        auto_T: Optional[float] = param(None, gt=0, doc="bmc-auto: the analytical T (else "
                                        "measured on system/side for model/batch)")
        system: Optional[str] = param(None, doc="bmc-auto: system preset of the device")
        side: Optional[str] = param(None, doc="bmc-auto: side (default: the first)")
        model: Optional[str] = param(None, doc="bmc-auto: model zoo name")
        batch: int = param(1, ge=1, doc="bmc-auto: batch size of the attention")
        speculative_k: int = param(1, ge=1, doc="bmc-auto: candidates verified per step")
        accepted_m: float = param(1.0, ge=1, doc="bmc-auto: tokens accepted per step")
        acceptance_rate: Optional[float] = param(
            None, ge=0, lt=1, doc="bmc-auto: i.i.d. acceptance rate of a chain draft; "
            "when given, accepted_m is its expected tokens per step (1 - a^(k+1)) / (1 - "
            "a), at most speculative_k.", source="Leviathan, Kalman and Matias, \"Fast "
            "Inference from Transformers via Speculative Decoding\", ICML 2023")
        align_tokens: int = param(1, ge=1, unit="tokens",
                                  doc="extent placement alignment")

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, mode: str = "bmc",
                 spare_rows: int | None = None, allocations: int | None = None,
                 auto_T: float | None = None, system: str | None = None,
                 side: str | None = None, model: str | None = None, batch: int = 1,
                 speculative_k: int = 1, accepted_m: float = 1.0,
                 acceptance_rate: float | None = None, align_tokens: int = 1, **kw):
        super().__init__(capacity_bytes, bytes_per_token, align_tokens=align_tokens, **kw)
        n = self.max_context_tokens
        self.mode = mode
        if mode == "bmc" and spare_rows is None and allocations is None:
            allocations = 16
        if acceptance_rate is not None:
            accepted_m = accepted_per_step(acceptance_rate, int(speculative_k))
        if mode == "bmc-auto" and auto_T is None:
            if system is None or model is None:
                raise ConfigError("allocator.bmc.system", "mode 'bmc-auto' needs auto_T, or "
                                  "system and model to measure it on")
            cm = BMCCostModel(RooflineDevice(system, side),
                              AttentionShape.from_model(model, batch))
            auto_T = cm.analytical_T(n, k=int(speculative_k), m=float(accepted_m))
        try:
            self.r = rows_per_allocation(mode, n, r=spare_rows, T=allocations, auto_T=auto_T)
        except ConfigError as err:
            raise err.prefixed("allocator.bmc") from None
        self.auto_T = auto_T
        if self.r > self._heap.total:
            raise ConfigError("allocator.capacity_bytes",
                              f"holds {self.capacity_tokens} KV tokens, less than one "
                              f"allocation of r = {self.r} tokens")
        self.counts.update({"alloc": 0})
        self.copied_tokens = 0

    def _extent_tokens(self, tokens: int) -> int:
        """Smallest multiple of r holding ``tokens``, capped at max_context_tokens."""
        return min(self.max_context_tokens, -(-int(tokens) // self.r) * self.r)

    def _reserve(self, req_id, prompt, need, predicted, uncertainty):
        tokens = self._extent_tokens(need)
        off = self._take(tokens)
        if off is None:
            return None
        self._slot[req_id] = (off, tokens)
        self.counts["alloc"] += 1
        return tokens

    def _grow(self, req_id, r, new_tokens):
        tokens = self._extent_tokens(new_tokens)
        nbytes = self._relocate(req_id, r, tokens)   # the KV written so far is copied
        if nbytes < 0:
            return None
        self.counts["alloc"] += 1
        if nbytes:
            self.copied_tokens += r.used
        return tokens

    def attention_tokens(self, req_id: int) -> int:
        """Rows the masked attention of the request reads: its whole (padded) extent."""
        return self.capacity_of(req_id)

    def stats(self) -> dict:
        out = super().stats()
        out.update(mode=self.mode, rows_per_allocation=self.r, auto_T=self.auto_T,
                   copied_tokens=self.copied_tokens)
        return out


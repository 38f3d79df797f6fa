"""Configuration of a serving run (``workload.serving`` of a run configuration, or built
by ``h2m2sim serve``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from dram_models.schema import load, param
from h2m2sim.errors import ConfigError

__all__ = ["ServingConfig", "resolve_serving"]


@dataclass(frozen=True)
class ServingConfig:
    """Request-level serving: trace, arrivals, scheduler, predictor, limits. The KV
    allocator is chosen by the run configuration's ``policy.allocator`` (or ``serve
    --allocator``)."""

    trace: Optional[str] = param(None, doc="Request trace: a CSV path (.gz allowed) or a "
                                           "bundled name (azure2023_conv, azure2023_code, "
                                           "alpaca).")
    max_requests: Optional[int] = param(None, gt=0, unit="requests",
                                        doc="Replay only the first N requests.")
    arrival_rate: Optional[float] = param(
        None, gt=0, unit="requests/s",
        doc="Replace the trace's arrivals by a seeded Poisson process at this rate. "
            "Null = the trace's own arrivals (all at t=0 if it has none).")
    predictor: Optional[str] = param(
        None, doc="Length predictor: oracle, noisy, s3, learned. Null = learned for "
                  "allocators that use a prediction (odma), none otherwise.")
    predictor_params: dict[str, Optional[Any]] = param(
        default_factory=dict, doc="Options of the predictor (e.g. accuracy for noisy).")
    predictor_folds: int = param(2, ge=2, doc="Folds of the out-of-fold predictions of "
                                              "trainable predictors (each request is "
                                              "predicted by a model that did not see it).")
    scheduler: Literal["fcfs", "bucket"] = param(
        "fcfs", doc="fcfs: first come first served. bucket: ODMA's bucket-aware "
                    "co-batching (admit the oldest request, then prefer waiting requests "
                    "with the same bucket tag within the lookahead).")
    cobatch_lookahead: int = param(64, ge=1, unit="requests",
                                   doc="How far down the queue bucket co-batching looks.")
    max_batch: int = param(256, ge=1, unit="requests",
                           doc="Most requests running at once (vLLM max_num_seqs default).",
                           source="vLLM default max_num_seqs = 256")
    max_prefill_tokens: int = param(
        8192, ge=1, unit="tokens",
        doc="Token budget of one prefill iteration (vLLM max_num_batched_tokens); a single "
            "longer prompt is still admitted alone.")
    max_context_tokens: int = param(
        4096, ge=2, unit="tokens",
        doc="Longest request (prompt + output) the server accepts; the static worst case "
            "and ODMA's large bucket. Longer outputs are cut to fit (counted); prompts that "
            "do not fit are rejected (counted).")
    max_new_tokens: Optional[int] = param(
        None, ge=1, unit="tokens",
        doc="Cap on generated tokens per request (outputs are cut, counted). With it the "
            "static worst case becomes min(max_context_tokens, prompt + max_new_tokens).")
    preemption: Literal["recompute", "swap"] = param(
        "recompute", doc="When KV memory runs out mid-decode, the latest-arrived running "
                         "request is preempted: recompute (drop its KV, prefill again "
                         "later, vLLM's default) or swap (copy its KV to host memory and "
                         "back).")
    host_link_GBps: float = param(32.0, gt=0, unit="GB/s",
                                  doc="Host link bandwidth for swap (PCIe 4.0 x16, one "
                                      "direction).", source="PCIe 4.0 x16: 16 GT/s x 16 "
                                                           "lanes, 128b/130b")
    kv_capacity_bytes: Optional[int] = param(
        None, gt=0, unit="bytes",
        doc="KV memory of all devices together. Null = memory_fraction x device memory - "
            "weights.")
    memory_fraction: float = param(0.9, gt=0, le=1, doc="Fraction of device memory the "
                                                        "server may use (vLLM "
                                                        "gpu_memory_utilization).",
                                   source="vLLM default 0.9")
    kv_dtype: str = param("fp16", doc="Data type of the KV cache.")
    table_token_points: int = param(14, ge=2, doc="Token-axis points of the iteration-time "
                                                  "tables.")
    table_error_samples: int = param(12, ge=0, doc="Random points at which the table "
                                                   "interpolation error is measured.")

    def _check(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens >= self.max_context_tokens:
            raise ConfigError("max_new_tokens", f"must be < max_context_tokens "
                              f"({self.max_context_tokens}), got {self.max_new_tokens}")


def resolve_serving(raw: Any, key: str) -> ServingConfig:
    """``workload.serving`` mapping -> :class:`ServingConfig` (ConfigError names the key)."""
    return load(ServingConfig, raw, key)

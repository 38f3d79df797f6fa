"""Configuration of a serving run (``workload.serving`` of a run configuration, or built
by ``h2m2sim serve``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from dram_models.schema import load, param
from h2m2sim.errors import ConfigError
from h2m2sim.model.spec import DTYPE_BITS

from .engine_profile import load_engine
from .features import check_config
from .links import LINKS, TIERS, kv_link

__all__ = ["ServingConfig", "DeploymentConfig", "SpeculativeConfig", "resolve_serving"]


@dataclass(frozen=True)
class DeploymentConfig:
    """How the system's cards serve the model: ``replicas`` copies of it, each over
    ``tensor_parallel`` cards, behind a router (replicas x tensor_parallel = cards)."""

    replicas: Optional[int] = param(None, ge=1, le=4096, doc="Copies of the served model, "
                                    "each with its own KV pool. Null = cards / "
                                    "tensor_parallel (1 when neither is given).")
    tensor_parallel: Optional[int] = param(None, ge=1, le=4096, doc="Cards each replica is "
                                           "sharded over. Null = cards / replicas.")
    router: Literal["round-robin", "least-kv"] = param(
        "least-kv", doc="How arriving requests are given to replicas: round-robin, or the "
                        "replica with the least KV memory taken.")


#: The link between disaggregated pools when ``kv_link`` is not given: NVLink 4, as
#: between the GPUs of one HGX node.
DEFAULT_KV_LINK = "nvlink4"

#: Where the expected-acceptance formula of speculative decoding comes from.
SPECULATIVE_SOURCE = ("Leviathan, Kalman and Matias, \"Fast Inference from Transformers "
                      "via Speculative Decoding\", ICML 2023")


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding: a draft model proposes ``k`` tokens per step, one at a time,
    and the served (target) model verifies them in one step (see
    :mod:`h2m2sim.serving.speculative`)."""

    draft: str = param(doc="Draft model: a model-zoo name (e.g. opt-350m) or a model "
                           "YAML file. Its weights and its KV cache share the device "
                           "memory with the target's; its steps run on the same device.")
    k: int = param(ge=1, le=64, unit="tokens",
                   doc="Tokens the draft proposes per step (sequential draft decode "
                       "steps); the target verifies k + 1 positions per request.")
    acceptance: Optional[float] = param(
        None, ge=0, lt=1, doc="Probability that the target accepts each drafted token, "
        "i.i.d.: a step yields (1 - a^(k+1)) / (1 - a) tokens on average. Exactly one of "
        "acceptance and acceptance_beta is given.", source=SPECULATIVE_SOURCE)
    acceptance_beta: Optional[tuple[float, float]] = param(
        None, gt=0, le=1e6, doc="Per-request acceptance rates drawn from Beta(a, b) with "
        "the run's seed (a request keeps its rate), instead of one acceptance for all.")

    def _check(self) -> None:
        if (self.acceptance is None) == (self.acceptance_beta is None):
            raise ConfigError("acceptance", "give exactly one of acceptance (a rate in "
                              "[0, 1)) and acceptance_beta ([a, b])")


@dataclass(frozen=True)
class ServingConfig:
    """Request-level serving: trace, arrivals, scheduler, predictor, limits. The KV
    allocator is chosen by the run configuration's ``policy.allocator`` (or ``serve
    --allocator``)."""

    engine: Optional[str] = param(
        None, doc="Serving engine profile: ideal, vllm, vllm-v0, sglang, trtllm, distserve "
        "(workloads/engines/) or a profile YAML file: its host time per step, CUDA "
        "graphs and all-reduce, and its defaults for the keys left out here (max_batch, "
        "chunked_prefill, max_num_batched_tokens, max_prefill_tokens, memory_fraction, "
        "prefix_caching). Null = vllm on a GPU system, ideal (kernels alone) on the "
        "others.")
    trace: Optional[str] = param(None, doc="Request trace: a CSV path (.gz allowed), a "
                                           "Mooncake-format .jsonl path (.jsonl.gz "
                                           "allowed), a bundled name (azure2023_conv, "
                                           "azure2023_code, alpaca, mooncake2025_conv), or "
                                           "random:IN:OUT[:R], max_requests requests of "
                                           "IN prompt and OUT output tokens (vLLM's "
                                           "random dataset; R: lengths drawn within "
                                           "+-R of them).")
    max_requests: Optional[int] = param(None, gt=0, unit="requests",
                                        doc="Replay only the first N requests (of those "
                                            "not held out as history).")
    history_fraction: Optional[float] = param(
        None, ge=0, lt=1, doc="Fraction of the trace's requests held out as the server's "
        "history, chosen per request with the run's seed and never replayed: the learned "
        "length predictor trains on them and ODMA seeds its buckets from them (at most as "
        "many as are replayed). The replayed requests keep their own arrival times unless "
        "arrival_rate is set. Null = 0.5 when the allocator learns lengths from history "
        "(odma) or the predictor trains on it (learned), else 0: nothing is held out from "
        "a run that would not use it. 0 = no history (ODMA then seeds from the "
        "predictions).")
    arrival_rate: Optional[float] = param(
        None, gt=0, unit="requests/s",
        doc="Replace the trace's arrivals by a seeded Poisson process at this rate. "
            "Null = the trace's own arrivals (all at t=0 if it has none).")
    max_concurrency: Optional[int] = param(
        None, ge=1, le=1 << 20, unit="requests",
        doc="Closed loop: this many clients, each sending its next request when its last "
            "one has finished (never before the request's own arrival, when the trace or "
            "arrival_rate gives one); TTFT and the other latencies count from the send. "
            "Null = open loop: every request is sent at its arrival.",
        source="vllm bench serve --max-concurrency; aiperf / genai-perf --concurrency")
    predictor: Optional[str] = param(
        None, doc="Length predictor: oracle, noisy, s3, learned. Null = learned for "
                  "allocators that use a prediction (odma), none otherwise.")
    predictor_params: dict[str, Optional[Any]] = param(
        default_factory=dict, doc="Options of the predictor (e.g. accuracy for noisy).")
    scheduler: Literal["fcfs", "bucket", "shortest"] = param(
        "fcfs", doc="fcfs: first come first served. bucket: ODMA's bucket-aware "
                    "co-batching (admit the oldest request, then prefer waiting requests "
                    "with the same bucket tag within the lookahead). shortest: shortest "
                    "predicted output first (the length predictor's prediction; ties and "
                    "preempted requests, which keep the queue front, by arrival).")
    cobatch_lookahead: int = param(64, ge=1, unit="requests",
                                   doc="How far down the queue bucket co-batching looks.")
    max_batch: int = param(256, ge=1, le=65536, unit="requests",
                           doc="Most requests running at once (vLLM max_num_seqs default).",
                           source="vLLM default max_num_seqs = 256")
    max_prefill_tokens: int = param(
        8192, ge=1, unit="tokens",
        doc="Token budget of one prefill iteration (vLLM max_num_batched_tokens); a single "
            "longer prompt is still admitted alone.")
    max_context_tokens: Optional[int] = param(
        None, ge=2, le=1 << 24, unit="tokens",
        doc="Longest request (prompt + output) the server accepts; the static worst case "
            "and ODMA's worst-case extent. Longer outputs are cut to fit (counted); prompts "
            "that do not fit are rejected (counted in requests_rejected, with the reason). "
            "Null = the served model's max_context, as vLLM's max_model_len.")
    max_new_tokens: Optional[int] = param(
        None, ge=1, unit="tokens",
        doc="Cap on generated tokens per request (outputs are cut, counted). With it the "
            "static worst case becomes min(max_context_tokens, prompt + max_new_tokens).")
    preemption: Literal["recompute", "swap"] = param(
        "recompute", doc="When KV memory runs out mid-decode, a running request "
                         "(preemption_victim) is preempted: recompute (drop its KV, "
                         "prefill again later, vLLM's default) or swap (copy its KV to "
                         "host memory and back).")
    preemption_victim: Literal["latest-arrived", "most-memory"] = param(
        "latest-arrived", doc="Which running request is preempted: the latest arrival "
                              "(vLLM's policy) or the one holding the most KV memory (ties: "
                              "the latest arrival).")
    chunked_prefill: bool = param(
        False, doc="vLLM's chunked prefill: every iteration carries the running requests' "
                   "decode tokens plus prefill chunks up to max_num_batched_tokens tokens in "
                   "all, priced as one mixed iteration; prefills no longer pause decodes.")
    max_num_batched_tokens: Optional[int] = param(
        None, ge=1, le=1 << 24, unit="tokens",
        doc="Token budget of one chunked-prefill iteration (decode tokens first, then "
            "chunks of the prefills in admission order). At least max_batch. Null = the "
            "smallest power of two >= 2 x max_batch whose prefill costs 2 batch-1 decode "
            "steps of the served model (the weight read is then at most half of a "
            "chunk's iteration, and a chunk stalls the decodes by about one step).",
        source="Sarathi-Serve (OSDI 2024) token budget; vLLM max_num_batched_tokens")
    slo_ttft_s: Optional[float] = param(
        None, gt=0, unit="s", doc="Time-to-first-token SLO: with slo_tpot_s it gives "
        "slo_attainment and goodput_rps. Null = not constrained.")
    slo_tpot_s: Optional[float] = param(
        None, gt=0, unit="s", doc="Time-per-output-token SLO (a request's mean after its "
        "first token). Null = not constrained.")
    host_link_GBps: float = param(32.0, gt=0, unit="GB/s",
                                  doc="Host link bandwidth for swap (PCIe 4.0 x16, one "
                                      "direction).", source="PCIe 4.0 x16: 16 GT/s x 16 "
                                                           "lanes, 128b/130b")
    kv_capacity_bytes: Optional[int] = param(
        None, gt=0, unit="bytes",
        doc="KV memory of each replica. Null = memory_fraction x its cards' memory - "
            "weights.")
    memory_fraction: float = param(0.9, gt=0, le=1, doc="Fraction of device memory the "
                                                        "server may use (vLLM "
                                                        "gpu_memory_utilization).",
                                   source="vLLM default 0.9")
    kv_dtype: Optional[str] = param(
        None, choices=tuple(DTYPE_BITS),
        doc="Data type of the KV cache (int4: with an fp16 scale per 128 values); null = "
            "the model's kv_dtype, else its dtype.")
    deployment: DeploymentConfig = param(default_factory=DeploymentConfig,
                                         doc="Replicas and tensor parallelism over the "
                                             "system's cards, and the router.")
    prefix_caching: Optional[bool] = param(
        None, doc="Cache the KV of prompt prefixes shared between requests (the trace's "
                  "prefix_block_hashes column): a request's prefill computes only its "
                  "uncached suffix; cached blocks are reference-counted and evicted LRU. "
                  "Needs an allocator that can share KV (its prefix_sharing). Null = the "
                  "engine's default, where the trace has prefix block hashes and the "
                  "allocator can share KV.")
    prefix_block_tokens: int = param(
        512, ge=1, le=1 << 20, unit="tokens",
        doc="Prompt tokens per hashed block of the trace's prefix_block_hashes: the block "
            "size the trace was hashed at, and the cache's unit.",
        source="Mooncake trace hash_ids, 512 tokens per block (Qin et al., Mooncake, "
               "FAST 2025)")
    speculative: Optional[SpeculativeConfig] = param(
        None, doc="Speculative decoding with a draft model (draft, k, acceptance). Null = "
                  "none: every decode step yields one token per request.",
        source=SPECULATIVE_SOURCE)
    disaggregate: Optional[tuple[int, int]] = param(
        None, ge=1, le=4096, doc="Disaggregated serving: (P, D) cards of the system in a "
        "prefill pool and a decode pool; each request's prompt is prefilled on the first, "
        "its KV crosses kv_link, and the second decodes it. Null = colocated.",
        source="DistServe (Zhong et al., OSDI 2024); Splitwise (Patel et al., ISCA 2024)")
    kv_link: Optional[str] = param(
        None, doc="Link the KV crosses from the prefill to the decode pool (a preset: "
        f"{', '.join(LINKS.names())}). Null = {DEFAULT_KV_LINK}.")
    pool_replicas: tuple[int, int] = param(
        (1, 1), ge=1, le=4096, doc="Disaggregated: replicas of the model in the prefill and "
        "the decode pool, each over its pool's cards / replicas, requests given to them by "
        "deployment.router (least-kv: the least loaded).")
    kv_streaming: bool = param(
        False, doc="Disaggregated: stream each prompt's KV layer by layer while its prefill "
        "runs (Splitwise) instead of after it (DistServe).",
        source="Splitwise (Patel et al., ISCA 2024); DistServe (Zhong et al., OSDI 2024)")
    prefill_system: Optional[str] = param(
        None, doc="Disaggregated serving on two systems: the prefill pool is this system "
        "(a preset or YAML file, all its cards) and the decode pool decode_system; both "
        "or neither. Null = the pools split the run's system (disaggregate).")
    decode_system: Optional[str] = param(None, doc="See prefill_system.")
    kv_offload: Optional[str] = param(
        None, doc=f"A second KV tier under the prefix cache (a preset: "
        f"{', '.join(TIERS.names())}): evicted prefix blocks are demoted there and hits "
        "there promoted back over its link. Null = none.", source="SGLang HiCache; LMCache; "
        "Mooncake (Qin et al., FAST 2025); H2M2's LPDDR side (Hwang et al., "
        "arXiv:2504.14893, 2025)")
    kv_offload_capacity_bytes: Optional[int] = param(
        None, gt=0, le=2**50, unit="bytes", doc="KV capacity of the kv_offload tier.")
    kv_offload_policy: Optional[Literal["lru", "prefix-aware"]] = param(
        None, doc="Which blocks leave the full kv_offload tier first (null = lru): lru (least "
        "recently placed there) or prefix-aware (those the fewest requests referenced, "
        "then the least recent: shared prefixes stay, a request's own tail goes).")
    kv_offload_running: bool = param(
        False, doc="With kv_offload: when device KV runs out, the victim of a preemption "
        "keeps running instead, its KV (and the rest it will generate) held cold in the "
        "tier and read back over its link before every decode step (not overlapped with "
        "the step); a request the tier cannot hold is preempted as before.",
        source="FlexGen (Sheng et al., ICML 2023) and eLLM's CPU buffer: KV read from "
        "host memory at every step")
    table_token_points: int = param(14, ge=2, doc="Token-axis points of the iteration-time "
                                                  "tables.")
    table_error_samples: int = param(12, ge=0, doc="Random points at which the table "
                                                   "interpolation error is measured.")

    output_lengths: Literal["trace", "scaled", "sampled"] = param(
        "trace", doc="Where output lengths come from: trace (as recorded), scaled (the "
        "trace's times output_scale), sampled (drawn with the run's seed from the lengths "
        "in output_length_file: the served model may answer at other lengths than the "
        "trace's reference answers).")
    output_scale: float = param(1.0, gt=0, le=1000, doc="Factor on the trace's output "
                                "lengths (output_lengths: scaled); at least 1 token.")
    output_length_file: Optional[str] = param(
        None, doc="A text file of output lengths in tokens (whitespace or comma separated) "
                  "to sample from (output_lengths: sampled).")

    @property
    def link(self) -> str:
        """The KV link between disaggregated pools (``kv_link``, or its default)."""
        return self.kv_link or DEFAULT_KV_LINK

    @property
    def tier_policy(self) -> str:
        """How the lower KV tier evicts (``kv_offload_policy``, or lru)."""
        return self.kv_offload_policy or "lru"

    @property
    def pools_apart(self) -> bool:
        """Prefill and decode run on pools of their own (disaggregated serving)."""
        return self.disaggregate is not None or self.prefill_system is not None

    def _check(self) -> None:
        if self.engine is not None:
            load_engine(self.engine, "engine")
        if self.kv_link is not None:
            kv_link(self.kv_link, "kv_link")
        if self.kv_offload is not None:
            TIERS.get(self.kv_offload, "kv_offload")
        check_config(self)
        if (self.output_lengths == "sampled") != (self.output_length_file is not None):
            raise ConfigError("output_length_file", "is needed exactly when output_lengths "
                              "is 'sampled'")
        if self.max_num_batched_tokens is not None and \
                self.max_num_batched_tokens < self.max_batch:
            raise ConfigError("max_num_batched_tokens", f"must be >= max_batch "
                              f"({self.max_batch}), got {self.max_num_batched_tokens}")
        if self.max_context_tokens is None:
            return
        if self.max_new_tokens is not None and self.max_new_tokens >= self.max_context_tokens:
            raise ConfigError("max_new_tokens", f"must be < max_context_tokens "
                              f"({self.max_context_tokens}), got {self.max_new_tokens}")


def resolve_serving(raw: Any, key: str) -> ServingConfig:
    """``workload.serving`` mapping -> :class:`ServingConfig` (ConfigError names the key)."""
    return load(ServingConfig, raw, key)

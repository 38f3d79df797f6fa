"""Disaggregated serving: prefill on one pool of cards, decode on another, the KV of each
prompt crossing a link between them (DistServe, Zhong et al., OSDI 2024; Splitwise,
Patel et al., ISCA 2024).

``serving.disaggregate: [P, D]`` splits the system's cards into a prefill pool of ``P``
and a decode pool of ``D`` cards; ``prefill_system`` and ``decode_system`` put the pools
on two systems instead (all the cards of each). Each pool serves ``pool_replicas``
copies of the model (default one), tensor parallel over its share of the pool's cards,
requests given to them by ``deployment.router`` (``least-kv``: the least loaded), priced
by the run's evaluator kind. A request

1. is prefilled on the prefill pool (its serving loop runs prefill iterations only: every
   request there has one output token, the first, emitted when its prefill ends); its
   KV is held there from admission to its first token (not while it crosses the link:
   the prefill pool's KV pressure is a lower bound);
2. crosses ``serving.kv_link`` (:mod:`.links`) after its prefill, as DistServe moves KV,
   or with ``kv_streaming`` layer by layer while its prefill runs, as Splitwise does (the
   last layer's KV leaves when the prefill ends): transfers queue on the link in the
   order their prefills end, each taking latency + bytes / bandwidth
   (``kv_transfer_s_*``: from the prefill's end to the KV's arrival, the wait for the
   link included);
3. joins the decode pool's queue when its KV has arrived, and is admitted when its KV
   fits there (its serving loop computes nothing for it at admission: the KV came with
   it); it decodes its remaining tokens there, and a preemption there recomputes its
   context on the decode pool.

A request's TTFT is its first token's time on the prefill pool; TPOT and the
inter-token latencies count from that token, so the transfer and the decode pool's
queueing fall into its second token's gap. The transfer's energy is the link's (bits x
pJ/bit) plus the sender's DRAM read and the receiver's DRAM write of the KV, each priced
by that side's DRAM power model as a stream over the transfer.

Units: seconds, bytes, joules.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.system import resolve_system

from .config import DeploymentConfig, ServingConfig
from .deployment import ServingDevice
from .links import KvLink, kv_link, transfer_energy_j
from .loop import ServingResult, latency_metrics, percentiles, request_metrics
from .traces import RequestTrace

__all__ = ["link_queue", "serve_disaggregated"]


def link_queue(ready_s: np.ndarray, nbytes: np.ndarray, link: KvLink,
               begin_s: np.ndarray | None = None, layers: int = 1) -> np.ndarray:
    """When each transfer of ``nbytes`` bytes, ready at ``ready_s`` (NaN: none), has
    arrived: one at a time on the link, in the order they become ready. Streamed layer
    by layer (``begin_s``: when each prefill began; ``layers`` of equal KV), a transfer
    may start with its prefill, but its last layer leaves only once the prefill ends."""
    arrive = np.full(len(ready_s), np.nan)
    bw = link.GBps * 1e9
    free = -np.inf
    for i in np.argsort(ready_s, kind="stable"):
        if not np.isfinite(ready_s[i]):
            continue
        first = ready_s[i] if begin_s is None else begin_s[i]
        start = max(float(first), free)
        free = max(start + float(nbytes[i]) / bw,
                   float(ready_s[i]) + float(nbytes[i]) / layers / bw)
        arrive[i] = free + link.latency_us * 1e-6
    return arrive


def serve_disaggregated(trace: RequestTrace, cfg: ServingConfig, serve_pool,
                        device: ServingDevice, layers: int) -> ServingResult:
    """Serve ``trace`` (the replayed requests, arrivals set) disaggregated as the module
    docstring says. ``serve_pool(trace, cfg, device, prefilled_at)`` serves one pool (a
    colocated run on that pool's cards); ``device`` has all the system's cards;
    ``layers``: the model's layers holding KV (what streaming sends one at a time)."""
    pre_dev, dec_dev = pool_devices(cfg, device)
    for pool, dev, n in (("prefill", pre_dev, cfg.pool_replicas[0]),
                         ("decode", dec_dev, cfg.pool_replicas[1])):
        if dev.devices % n:
            raise ConfigError("serving.pool_replicas", f"the {pool} pool's {dev.devices} "
                              f"cards do not split into {n} equal replicas")
    link = kv_link(cfg.kv_link)
    pre_cfg, dec_cfg = (dataclasses.replace(
        cfg, disaggregate=None, prefill_system=None, decode_system=None,
        pool_replicas=(1, 1), history_fraction=0.0, arrival_rate=None, max_requests=None,
        trace=None, output_lengths="trace",
        deployment=DeploymentConfig(replicas=n, router=cfg.deployment.router))
        for n in cfg.pool_replicas)
    first = dataclasses.replace(trace, output_tokens=np.ones_like(trace.output_tokens))
    r1 = serve_pool(first, pre_cfg, pre_dev, None)
    bpt = int(r1.metrics["kv_bytes_per_token"])
    ready = np.where(r1.rejected, np.nan, np.asarray(r1.first_token_s, dtype=float))
    nbytes = trace.prompt_tokens.astype(np.float64) * bpt
    # a request whose only token is its first has nothing to decode: its KV stays
    sent = np.where(trace.output_tokens > 1, ready, np.nan)
    arrive = link_queue(sent, nbytes, link, *(
        (np.asarray(r1.admit_s, dtype=float), max(int(layers), 1))
        if cfg.kv_streaming else ()))
    go = np.flatnonzero(np.isfinite(arrive))        # only requests with tokens to decode
    go = go[np.argsort(arrive[go], kind="stable")]
    second = RequestTrace(arrive[go], trace.prompt_tokens[go], trace.output_tokens[go],
                          name=trace.name, arrival_note="KV arrival from the prefill pool")
    r2 = serve_pool(second, dec_cfg, dec_dev, ready[go]) if len(go) else None
    return _joined(trace, cfg, r1, r2, go, ready, arrive, nbytes, link, (pre_dev, dec_dev))


def pool_devices(cfg: ServingConfig, device: ServingDevice) -> tuple:
    """(prefill, decode) devices: ``cfg.prefill_system`` and ``decode_system`` with all
    their cards, or ``disaggregate``'s (P, D) cards of ``device``."""
    if cfg.prefill_system is not None:
        return tuple(ServingDevice.from_system(resolve_system(s, key))
                     for s, key in ((cfg.prefill_system, "serving.prefill_system"),
                                    (cfg.decode_system, "serving.decode_system")))
    P, D = cfg.disaggregate
    if P + D != device.devices:
        raise ConfigError("serving.disaggregate", f"prefill and decode cards must add up to "
                          f"the system's {device.devices}, got {P}:{D}")
    return dataclasses.replace(device, devices=P), dataclasses.replace(device, devices=D)


def _dram(device: ServingDevice):
    """The DRAM spec of the side a device's KV lives on (its first side)."""
    system = device.system
    return system.side(device.side or system.side_names[0]).dram_spec


def _joined(trace, cfg, r1: ServingResult, r2: ServingResult | None, go, ready, arrive,
            nbytes, link: KvLink, devices: tuple) -> ServingResult:
    """One result of the two pools' runs: per request arrival and TTFT from the prefill
    pool, finish from the decode pool (or at the first token when the request had one)."""
    n = len(trace)
    finish = np.where(np.isfinite(ready), ready, np.nan)
    preempt = np.asarray(r1.preemptions).copy()
    rejected = np.asarray(r1.rejected).copy()
    if r2 is not None:
        finish[go] = r2.finish_s
        preempt[go] += r2.preemptions
        rejected[go] |= r2.rejected
    out = np.asarray(trace.output_tokens)
    moved = np.isfinite(arrive)
    xfer_s = arrive[moved] - ready[moved]
    sender, receiver = map(_dram, devices)
    # the transfers' own time on the link prices their memories (not their wait for
    # it), as one stream: the energies are linear in bytes and time
    total = float(nbytes[moved].sum())
    busy_s = int(moved.sum()) * link.transfer_s(0) + total / (link.GBps * 1e9)
    energy = transfer_energy_j(total, busy_s, link, sender, receiver)
    m = dict((r2 or r1).metrics)
    # the decode pool counts each request's gaps from its first token on the prefill
    # pool (the transfer and its queueing are in the second token's gap)
    itl_s, itl_n = (r2.itl_s, r2.itl_count) if r2 is not None else (np.zeros(0),) * 2
    m.update(request_metrics(trace.arrival_s, r1.admit_s, ready, finish, out, rejected,
                             np.zeros(n, dtype=bool), preempt))
    m.update(latency_metrics(cfg, trace.arrival_s, ready, finish, out, itl_s, itl_n,
                             m["duration_s"]))
    pools = [r.metrics.get("energy_j") for r in (r1, r2) if r is not None]
    total = None if None in pools else sum(pools) + energy
    m["energy_breakdown_j"] = None if total is None else {
        "prefill_pool_j": pools[0], "decode_pool_j": sum(pools[1:]),
        "kv_transfer_j": energy}
    m.update(energy_j=total, energy_per_output_token_j=(
        total / m["output_tokens"] if total is not None and m["output_tokens"] else None))
    # what the prefill pool computed, and the replayed trace's arrivals
    m.update({k: r1.metrics.get(k) for k in r1.metrics if k.startswith("prefix_")
              or k.startswith("prefill_tokens")})
    m.update({
        "arrivals": trace.arrival_note or "from trace",
        "disaggregate": [devices[0].devices, devices[1].devices],
        "prefill_system": devices[0].name, "decode_system": devices[1].name,
        "kv_link": link.name, "kv_streaming": cfg.kv_streaming,
        "kv_transfer_bytes": float(nbytes[moved].sum()),
        "kv_transfer_s_p50": percentiles(xfer_s)["p50"],
        "kv_transfer_s_p99": percentiles(xfer_s)["p99"],
        "kv_transfer_energy_j": energy,
        "prefill_pool": _pool(r1.metrics), "decode_pool": _pool(r2.metrics) if r2 else None,
    })
    return ServingResult(m, trace.arrival_s, r1.admit_s, ready, finish, out, preempt,
                         rejected, r1.allocator_stats,
                         pools=[("prefill pool", r1)] + ([("decode pool", r2)] if r2 else []),
                         kv_arrive_s=arrive)


def _pool(m: dict[str, Any]) -> dict[str, Any]:
    """What a pool's own run reports of itself."""
    keys = ("tensor_parallel", "kv_capacity_bytes", "kv_utilization", "mean_decode_batch",
            "prefill_iterations", "decode_steps", "preemptions", "energy_j",
            "total_time_ns")
    return {k: m.get(k) for k in keys}

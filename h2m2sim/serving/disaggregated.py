"""Disaggregated serving: prefill on one pool of cards, decode on another, the KV of each
prompt crossing a link between them (DistServe, Zhong et al., OSDI 2024; Splitwise,
Patel et al., ISCA 2024).

``serving.disaggregate: [P, D]`` splits the system's cards into a prefill pool of ``P``
and a decode pool of ``D`` cards; ``prefill_system`` and ``decode_system`` put the pools
on two systems instead (all the cards of each). Each pool serves ``pool_replicas``
copies of the model (default one), tensor parallel over its share of the pool's cards,
requests given to them by ``deployment.router``, priced by the run's evaluator kind.
The two pools are engines on one event clock (:mod:`.cluster`). A request

1. is prefilled on the prefill pool, which emits its first token;
2. crosses ``serving.kv_link`` (:mod:`.links`) after its prefill, as DistServe moves KV,
   or with ``kv_streaming`` layer by layer while its prefill runs, as Splitwise does (the
   last layer's KV leaves when the prefill ends): transfers queue on the link in the
   order their prefills end, each taking latency + bytes / bandwidth
   (``kv_transfer_s_*``: from the prefill's end to the KV's arrival, the wait for the
   link included);
3. joins the decode pool's queue when its KV has arrived, and is admitted when its KV
   fits there (the decode pool computes nothing for it at admission: the KV came with
   it); it decodes its remaining tokens there, and a preemption there recomputes its
   context on the decode pool.

Until the decode pool admits it, the request's KV stays held in the prefill pool (the
prefill pool's memory is the queue's buffer, as in DistServe): a decode pool without
room holds back the prefill pool, which then cannot admit new prompts once its KV is
full. This back-pressure is in the metrics (``prefill_blocked_s``: time the prefill pool
waited with prompts queued and its KV held for the decode pool; ``kv_wait_s_*``: from a
KV's arrival to the decode pool taking it) and in the timeline (``held for decode``).

A request's TTFT is its first token's time on the prefill pool; TPOT and the
inter-token latencies count from that token, so the transfer and the decode pool's
queueing fall into its second token's gap. The transfer's energy is the link's (bits x
pJ/bit) plus the sender's DRAM read and the receiver's DRAM write of the KV, each priced
by that side's DRAM power model as a stream over the transfer.

Units: seconds, bytes, joules.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Any

import numpy as np

from h2m2sim.allocators import ALLOCATORS
from h2m2sim.compute.evaluator import PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.system import resolve_system

from .clients import arrivals_note
from .engine_profile import engine_metrics
from .cluster import ROUTERS, Pool, run_pools
from .config import DeploymentConfig, ServingConfig
from .deployment import ServingDevice
from .features import Setup, check
from .latency import percentiles
from .links import KvLink, kv_link, transfer_energy_j
from .metrics import derive, merge_records
from .prefix_cache import hash_lists
from .replay import build_engine, prefix_hashes, send_all, served_requests
from .request import NO_WINDOW, Request, request_limits
from .resolve import Prepared, history_fraction, prepare, replay_requests, with_model_context
from .result import RequestArrays, ServingResult, assemble

__all__ = ["KvLinkQueue", "link_queue", "serve_disaggregated"]

_INF = math.inf


class KvLinkQueue:
    """KV transfers on one link, one at a time, in the order they become ready (ties:
    by request). A send is held until no later send can be ready before it
    (:meth:`release`). Streamed layer by layer (``layers`` of equal KV), a transfer may
    start with its prefill (its ``begin``), but its last layer leaves only once the
    prefill ends."""

    def __init__(self, link: KvLink, layers: int = 1, streaming: bool = False):
        self.link, self.layers, self.streaming = link, max(int(layers), 1), streaming
        self.bw = link.GBps * 1e9
        self.free = -_INF
        self.pending: list[tuple[float, int, float, float]] = []

    def send(self, ready_s: float, key: int, nbytes: float, begin_s: float) -> None:
        heapq.heappush(self.pending, (ready_s, key, float(nbytes), begin_s))

    def next_ready(self) -> float:
        return self.pending[0][0] if self.pending else _INF

    def release(self, bound: float) -> list[tuple[float, int]]:
        """(arrival s, key) of the held transfers ready by ``bound`` (no send to come is
        ready before it), in link order."""
        out = []
        while self.pending and self.pending[0][0] <= bound:
            ready, key, nbytes, begin = heapq.heappop(self.pending)
            first = begin if self.streaming else ready
            start = max(float(first), self.free)
            layers = self.layers if self.streaming else 1
            self.free = max(start + nbytes / self.bw, float(ready) + nbytes / layers / self.bw)
            out.append((self.free + self.link.latency_us * 1e-6, key))
        return out


def link_queue(ready_s: np.ndarray, nbytes: np.ndarray, link: KvLink,
               begin_s: np.ndarray | None = None, layers: int = 1) -> np.ndarray:
    """When each transfer of ``nbytes`` bytes, ready at ``ready_s`` (NaN: none), has
    arrived (:class:`KvLinkQueue`, all sends known)."""
    q = KvLinkQueue(link, layers, begin_s is not None)
    for i in np.flatnonzero(np.isfinite(ready_s)).tolist():
        q.send(float(ready_s[i]), i, float(nbytes[i]),
               float(begin_s[i]) if begin_s is not None else float(ready_s[i]))
    arrive = np.full(len(ready_s), np.nan)
    for t, i in q.release(_INF):
        arrive[i] = t
    return arrive


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


def _pool_cfg(cfg: ServingConfig, replicas: int) -> ServingConfig:
    """A pool's configuration: colocated over its cards, the requests chosen already."""
    return dataclasses.replace(
        cfg, disaggregate=None, prefill_system=None, decode_system=None,
        pool_replicas=(1, 1), kv_streaming=False, kv_link=None, history_fraction=0.0, arrival_rate=None,
        max_requests=None, trace=None, output_lengths="trace",
        deployment=DeploymentConfig(replicas=replicas, router=cfg.deployment.router))


class Handoff:
    """Requests crossing from the prefill pool's engines to the decode pool's: the link,
    the decode pool's requests as they arrive, and when each was taken."""

    def __init__(self, trace, out: np.ndarray, go: np.ndarray, p_reqs: list, pre: Pool,
                 dec: Pool, link: KvLinkQueue, bpt: int, hashes: list | None):
        self.trace, self.out, self.go, self.p_reqs = trace, out, go, p_reqs
        self.pre, self.dec, self.link, self.bpt = pre, dec, link, bpt
        self.src_hashes = hashes
        self.d_reqs: list[Request] = []
        self.d_hashes: list | None = [] if hashes is not None else None
        self.gid: list[int] = []
        n = len(trace)
        self.ready = np.full(n, np.nan)
        self.arrive = np.full(n, np.nan)
        self.taken = np.full(n, np.nan)

    def keeps(self, req: Request) -> bool:
        """``req`` has tokens to decode: its KV goes to the decode pool."""
        return bool(self.go[req.id])

    def send(self, req: Request, t: float) -> None:
        self.ready[req.id] = t
        self.link.send(t, req.id, req.prompt * self.bpt, req.admit_s)

    def bound(self) -> float:
        """The earliest time the prefill pool may still send a request's KV: its next
        request's arrival, or what its engines hold."""
        b = self.pre.next_route()
        for e in self.pre.engines:
            b = min(b, e.clock.t if e.busy() or e.blocked else e.next_time())
        return b

    def advance(self) -> None:
        """Offer the decode pool the transfers no later send can overtake."""
        for t, gid in self.link.release(self.bound()):
            p = self.p_reqs[gid]
            self.arrive[gid] = t
            d = Request(len(self.d_reqs), t, p.prompt, int(self.out[gid]),
                        remote_first_s=p.first_s)
            self.d_reqs.append(d)
            self.gid.append(gid)
            if self.d_hashes is not None:
                self.d_hashes.append(self.src_hashes[gid])
            self.dec.offer(d)

    def unknown_after(self, engine=None) -> float:
        """The earliest a request may reach the decode pool (whichever of its engines
        takes its turn)."""
        return min(self.link.next_ready(), self.bound())

    def take(self, d: Request, t: float) -> None:
        """The decode pool admitted ``d`` at ``t``: the prefill pool lets its KV go."""
        gid = self.gid[d.id]
        self.taken[gid] = t
        self.pre.owner[gid].release_handoff(self.p_reqs[gid], t)


def serve_disaggregated(trace, cfg: ServingConfig, allocator: str, allocator_params, model,
                        device: ServingDevice, evaluator, seed: int, cache: bool, cache_dir,
                        record_timeline: bool) -> ServingResult:
    """Serve ``trace`` disaggregated as the module docstring says: the requests to
    replay are chosen once; each pool's pieces are resolved for its own cards."""
    if isinstance(evaluator, PointEvaluator):
        raise ConfigError("serving.disaggregate", "needs an evaluator factory fn(model, "
                          "device, cfg) to price each pool, got an evaluator object")
    check(Setup(cfg, ALLOCATORS.get(allocator)))
    base = with_model_context(cfg, model)
    _, replay = replay_requests(trace, base, history_fraction(base, allocator, None), seed,
                                False)
    pre_dev, dec_dev = pool_devices(cfg, device)
    for pool, dev, n in (("prefill", pre_dev, cfg.pool_replicas[0]),
                         ("decode", dec_dev, cfg.pool_replicas[1])):
        if dev.devices % n:
            raise ConfigError("serving.pool_replicas", f"the {pool} pool's {dev.devices} "
                              f"cards do not split into {n} equal replicas")
    first = dataclasses.replace(replay, output_tokens=np.ones_like(replay.output_tokens))
    args = (allocator, allocator_params, model)
    P = prepare(first, _pool_cfg(cfg, cfg.pool_replicas[0]), *args, pre_dev, evaluator,
                seed, cache, cache_dir)
    out, rejected, cut = request_limits(replay, P.cfg.max_new_tokens,
                                        P.cfg.max_context_tokens, P.window or NO_WINDOW)
    # a request whose only token is its first has nothing to decode: its KV stays
    go = ~rejected & (replay.output_tokens > 1)
    D = prepare(replay.subset(go), _pool_cfg(cfg, cfg.pool_replicas[1]), *args, dec_dev,
                evaluator, seed, cache, cache_dir) if go.any() else None
    run = _Run(replay, cfg, P, D, out, go, record_timeline,
               KvLinkQueue(kv_link(cfg.link), model.attention_layers, cfg.kv_streaming))
    run_pools([run.dec, run.pre], run.handoff.advance)
    result = run.joined(rejected, cut, (pre_dev, dec_dev))
    system = device.name if cfg.prefill_system is None else \
        f"{pre_dev.name} (prefill) + {dec_dev.name} (decode)"
    result.metrics.update(trace=replay.name, system=system, model=P.model.name,
                          max_context_tokens=P.cfg.max_context_tokens,
                          kv_bytes_per_token=P.sizes["kv_bytes_per_token"],
                          weight_bytes=P.sizes["weight_bytes"])
    return result


class _Run:
    """The two pools' engines of one run (run them on one event clock with
    :func:`~.cluster.run_pools`, the decode pool first), and their joined result."""

    def __init__(self, trace, cfg, P: Prepared, D: Prepared | None, out, go,
                 record_timeline: bool, link: KvLinkQueue):
        self.trace, self.cfg, self.P, self.D, self.out = trace, cfg, P, D, out
        self.link = link
        pcfg = P.cfg
        reqs, self.p_rejected, self.p_cut = served_requests(
            P.trace, pcfg, pcfg.max_context_tokens, None, P.window)
        self.p_reqs = reqs
        hashes = prefix_hashes(P.trace, pcfg)
        router = ROUTERS.get(cfg.deployment.router)
        self.pre = Pool("prefill pool", [
            build_engine(reqs, hashes, pcfg, a, P.tables, record_timeline=record_timeline,
                         lower_tier=P.lower, kv_window=P.window) for a in P.allocs], router)
        full = hash_lists(trace, pcfg.prefix_block_tokens) if hashes is not None else None
        self.dec = Pool("decode pool", [], router)
        self.handoff = Handoff(trace, out, go, reqs, self.pre, self.dec, link,
                               int(P.sizes["kv_bytes_per_token"]), full)
        if D is not None:
            self.dec.engines = [
                build_engine(self.handoff.d_reqs, self.handoff.d_hashes, D.cfg, a,
                             D.tables, record_timeline=record_timeline,
                             lower_tier=D.lower, kv_window=D.window, arrive_with_kv=True)
                for a in D.allocs]
            self.dec.routed = [0] * len(self.dec.engines)
        for e in self.pre.engines:
            e.handoff = self.handoff
        for e in self.dec.engines:
            e.on_take = self.handoff.take
        self.dec.unknown_after = self.handoff.unknown_after
        loop = send_all(reqs, cfg, self.pre.offer, self.pre.engines)
        if loop is not None:       # closed loop: requests finish in either pool
            h = self.handoff
            loop.listen(self.dec.engines, lambda d: h.gid[d.id])
            loop.other_bounds.append(h.link.next_ready)
            self.pre.unknown_after = loop.bound
            self.dec.unknown_after = lambda e: min(h.unknown_after(e), loop.bound(e))

    def pool_result(self, pool: Pool, reqs: list, rejected, cut, p: Prepared) -> ServingResult:
        res = assemble(RequestArrays.of(reqs, rejected, cut), pool.engines,
                       (p.cfg.slo_ttft_s, p.cfg.slo_tpot_s), pool.routed)
        res.metrics["tensor_parallel"] = p.device.devices
        return res

    def joined(self, rejected, cut, devices: tuple) -> ServingResult:
        """One result of the two pools: per request arrival and TTFT from the prefill
        pool, finish from the decode pool (or at the first token when the request had
        one)."""
        h = self.handoff
        r1 = self.pool_result(self.pre, self.p_reqs, self.p_rejected, self.p_cut, self.P)
        r2 = None
        if self.D is not None and h.d_reqs:
            none = np.zeros(len(h.d_reqs), dtype=bool)
            r2 = self.pool_result(self.dec, h.d_reqs, none, none, self.D)
        arrays = RequestArrays.of(self.p_reqs, rejected, cut)
        ready = arrays.first_s
        finish = np.where(np.isfinite(ready), ready, np.nan)
        preempt = arrays.preemptions.copy()
        if r2 is not None:
            gid = np.asarray(h.gid, dtype=np.int64)
            finish[gid] = r2.finish_s
            preempt[gid] += r2.preemptions
        arrays = dataclasses.replace(arrays, finish_s=finish, preemptions=preempt,
                                     output=np.asarray(self.out, dtype=np.int64))
        parts = [r for r in (r1, r2) if r is not None]
        itl_s = np.concatenate([r.itl_s for r in parts])
        itl_n = np.concatenate([r.itl_count for r in parts])
        record = merge_records([r.record for r in parts], [n for n, _ in self.pools(r1, r2)])
        m = derive(record, arrays.metrics((self.cfg.slo_ttft_s, self.cfg.slo_tpot_s), itl_s,
                                          itl_n), len(parts), arrays.served_tokens)
        if len(parts) > 1:
            m["peak_reserved_bytes_note"] = "sum of the pools' peaks"
        m.update(self._transfers(devices, m))
        m.update(prefill_pool=_pool(r1.metrics),
                 decode_pool=_pool(r2.metrics) if r2 is not None else None)
        return ServingResult(m, arrays.arrival_s, arrays.admit_s, ready, finish,
                             arrays.output, preempt, rejected, r1.allocator_stats,
                             itl_s=itl_s, itl_count=itl_n, pools=self.pools(r1, r2),
                             kv_arrive_s=h.arrive, kv_taken_s=h.taken, record=record,
                             parts=[r.record for r in parts])

    @staticmethod
    def pools(r1, r2) -> list:
        return [("prefill pool", r1)] + ([("decode pool", r2)] if r2 is not None else [])

    def _transfers(self, devices: tuple, m: dict) -> dict[str, Any]:
        """The KV transfers: bytes, time, energy; the back-pressure; the pools."""
        h, link = self.handoff, self.link.link
        moved = np.isfinite(h.arrive)
        nbytes = self.trace.prompt_tokens.astype(np.float64) * h.bpt
        xfer_s = h.arrive[moved] - h.ready[moved]
        total = float(nbytes[moved].sum())
        # the transfers' own time on the link prices their memories (not their wait for
        # it), as one stream: the energies are linear in bytes and time
        busy_s = int(moved.sum()) * link.transfer_s(0) + total / (link.GBps * 1e9)
        energy = transfer_energy_j(total, busy_s, link, *map(_dram, devices))
        if m["energy_breakdown_j"] is not None:
            m["energy_breakdown_j"]["kv_transfer_j"] = energy
            e = float(sum(m["energy_breakdown_j"].values()))
            m.update(energy_j=e, energy_per_output_token_j=(
                e / m["output_tokens"] if m["output_tokens"] else None))
        wait = h.taken[moved] - h.arrive[moved]
        return {
            "arrivals": arrivals_note(self.trace, self.cfg.max_concurrency),
            "max_concurrency": self.cfg.max_concurrency,
            **engine_metrics(self.cfg),
            "disaggregate": [devices[0].devices, devices[1].devices],
            "prefill_system": devices[0].name, "decode_system": devices[1].name,
            "kv_link": link.name, "kv_streaming": self.cfg.kv_streaming,
            "kv_transfer_bytes": total,
            "kv_transfer_s_p50": percentiles(xfer_s)["p50"],
            "kv_transfer_s_p99": percentiles(xfer_s)["p99"],
            "kv_transfer_energy_j": energy,
            "kv_wait_s_p50": percentiles(wait)["p50"],
            "kv_wait_s_p99": percentiles(wait)["p99"],
            "prefill_blocked_s": sum(e.c.held_for_decode_s for e in self.pre.engines),
        }


def _dram(device: ServingDevice):
    """The DRAM spec of the side a device's KV lives on (its first side)."""
    system = device.system
    return system.side(device.side or system.side_names[0]).dram_spec


def _pool(m: dict[str, Any]) -> dict[str, Any]:
    """What a pool's own run reports of itself."""
    keys = ("tensor_parallel", "kv_capacity_bytes", "kv_utilization", "mean_decode_batch",
            "prefill_iterations", "decode_steps", "preemptions", "energy_j",
            "total_time_ns")
    return {k: m.get(k) for k in keys}

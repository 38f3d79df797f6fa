"""The request-level serving loop: arrivals, iteration-level continuous batching, KV
admission through an allocator, prefill and decode iterations, preemption, metrics.

Model of an engine (vLLM v0 style, the engine the ODMA papers extend):

* Every loop turn first tries to admit waiting requests (scheduler ``fcfs`` or ODMA's
  bucket-aware co-batching), each needing the allocator to grant its KV. Admitted requests
  run one *prefill iteration* together (running requests wait), which emits each one's
  first token.
* Otherwise all running requests run *decode iterations*, one token each. Between events
  nothing changes but lengths, so the loop advances a whole window of identical-batch
  steps in one Numba call (:func:`~h2m2sim.serving.timing.decode_window`). A window ends
  when a request finishes, when a request needs more KV than it holds (``grow``), or at
  the next arrival while there is room in the batch.
* A request needing more KV calls ``allocator.grow``; a contiguous allocator may migrate it
  (the copy time, priced by the iteration-time tables' ``kv_copy``, stalls the engine).
  If memory is exhausted the latest-arrived running request is preempted: ``recompute``
  (drop its KV; it re-enters the queue front and its prompt plus generated tokens are
  prefilled again) or ``swap`` (its KV crosses the host link both ways).
* KV accounting: a request that has generated g tokens holds prompt + g tokens of KV.
* Activation memory (only with an allocator that manages it, ``ellm``): a prefill
  iteration needs the activations of its prompt tokens, a decode iteration those of its
  batch (:class:`~h2m2sim.serving.ellm.ActivationModel`). The allocator starts with the
  activation reserve of the largest prefill (``max(max_prefill_tokens,
  max_context_tokens)`` tokens, what vLLM profiles); the static split keeps it, eLLM lends
  its idle chunks to KV and takes free KV chunks back. Admission follows eLLM's Algorithm
  1 (:func:`~h2m2sim.serving.ellm.plan_prefill`): KV on the device when it fits, else
  offloaded to the CPU buffer during the prefill (the transfer overlaps the prefill
  layer by layer: the iteration takes the longer of the two); offloaded requests are
  fetched (one host-link transfer each, stalling the engine) before they decode, oldest
  first, as soon as the device holds them. Algorithm 2 rescales the logical CPU buffer
  after every loop turn from TTFT/TPOT SLO violations.

Time is in seconds; everything is deterministic.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from h2m2sim.errors import ConfigError, OutOfMemoryError

from .config import ServingConfig
from .timing import IterationTables, advance_blocks, advance_running

__all__ = ["ServingResult", "simulate", "percentiles"]


def percentiles(x: np.ndarray) -> dict:
    """p50/p90/p99/mean of the finite values of x (None when there are none)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


@dataclasses.dataclass(eq=False)
class ServingResult:
    """Metrics (JSON-able dict) plus per-request arrays (seconds; NaN = never happened)."""

    metrics: dict
    arrival_s: np.ndarray
    admit_s: np.ndarray          # start of the first prefill iteration
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray    # tokens served (after any cut to the limits)
    preemptions: np.ndarray
    rejected: np.ndarray
    allocator_stats: dict
    timeline: dict | None = None
    events: list = dataclasses.field(default_factory=list)   # allocator events (migrate, refresh, ...)


class _Running:
    """Running requests as parallel arrays (swap-remove keeps them dense)."""

    def __init__(self, cap: int):
        self.idx = np.zeros(cap, dtype=np.int64)
        self.ctx = np.zeros(cap, dtype=np.int64)    # KV tokens held (prompt + generated)
        self.rem = np.zeros(cap, dtype=np.int64)    # tokens still to generate
        self.cap = np.zeros(cap, dtype=np.int64)    # KV tokens the allocator granted
        self.m = 0

    def add(self, r, ctx, rem, cap):
        j = self.m
        self.idx[j], self.ctx[j], self.rem[j], self.cap[j] = r, ctx, rem, cap
        self.m += 1

    def remove(self, j):
        last = self.m - 1
        for a in (self.idx, self.ctx, self.rem, self.cap):
            a[j] = a[last]
        self.m = last


def simulate(trace, cfg: ServingConfig, allocator, tables: IterationTables, prediction=None,
             *, record_timeline: bool = False, activations=None) -> ServingResult:
    """Replay ``trace`` through ``allocator`` with iteration times from ``tables``.

    ``prediction`` (a :class:`~h2m2sim.predictors.Prediction`) supplies each request's
    predicted length and uncertainty to the allocator (ODMA) and the co-batching
    scheduler. ``cfg`` supplies limits, scheduler and preemption policy (its trace,
    allocator and predictor fields are not used here). ``activations`` (an
    :class:`~h2m2sim.serving.ellm.ActivationModel`) prices activation memory for
    allocators that manage it (``ellm``; default: from its ``activation_model``
    option); other allocators ignore it."""
    n = len(trace)
    bpt = allocator.bytes_per_token
    maxctx = allocator.max_context_tokens
    arr = np.asarray(trace.arrival_s, dtype=np.float64)
    prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
    out = np.asarray(trace.output_tokens, dtype=np.int64).copy()
    if cfg.max_new_tokens is not None:
        cut_new = out > cfg.max_new_tokens
        out = np.minimum(out, cfg.max_new_tokens)
    else:
        cut_new = np.zeros(n, dtype=bool)
    rejected = prompt >= maxctx
    cut_ctx = (~rejected) & (prompt + out > maxctx)
    out = np.where(rejected, 0, np.minimum(out, maxctx - prompt))
    if prediction is not None:
        pred_len = np.asarray(prediction.length, dtype=np.float64)
        pred_u = np.asarray(prediction.uncertainty, dtype=np.float64)
    else:
        pred_len = np.full(n, np.nan)
        pred_u = np.zeros(n)
    pred_len_l, pred_u_l = pred_len.tolist(), pred_u.tolist()
    prompt_l, out_l = prompt.tolist(), out.tolist()

    gen = [0] * n
    nan = float("nan")
    admit_t = [nan] * n          # Python lists: scalar access in the loop is much cheaper
    first_t = [nan] * n
    finish_t = [nan] * n
    arr_l = arr.tolist()
    rejected_l = rejected.tolist()
    npre = np.zeros(n, dtype=np.int64)
    swapped = [False] * n
    run = _Running(cfg.max_batch)
    waiting: deque[int] = deque()
    layout = allocator.kv_layout
    tab = tables.table(layout)
    bg, cg = tables.batch_grid, tables.token_grid
    host_bps = cfg.host_link_GBps * 1e9
    tag_of = getattr(allocator, "bucket_tag", None) if cfg.scheduler == "bucket" else None
    # block allocators grow inside the Numba window (exactly as step by step, faster)
    block = getattr(allocator, "block_tokens", None) if hasattr(allocator, "grow_blocks") \
        else None
    grow_log = np.zeros(0, dtype=np.int64)
    el = allocator if hasattr(allocator, "set_activation_reserve") else None
    scaler = None
    if el is not None:
        from .ellm import BufferScaler, activation_model, plan_fetch, plan_prefill
        if activations is None and el.activation_model:
            activations = activation_model(el.activation_model, el.activation_dtype)
        if activations is None:
            raise ConfigError("allocator_params.activation_model",
                              f"the {allocator.name} allocator needs the model's activation "
                              "footprint: give a zoo model name")
        acts = activations
        if el.activation_reserve_chunks is None:
            res_tok = max(cfg.max_prefill_tokens, maxctx)
            el.set_activation_reserve(acts.iteration_bytes(res_tok, min(cfg.max_batch,
                                                                        res_tok)))
        scaler = BufferScaler(el.cpu_buffer_bytes, el.buffer_init_bytes, el.buffer_alpha) \
            if el.scales_buffer else None
        offloaded: deque[int] = deque()    # prefilled, KV in the CPU buffer (or swapped)
        first_np = np.full(n, np.nan)
        finish_np = np.full(n, np.nan)

    st = {"prefill_iterations": 0, "decode_steps": 0, "decode_token_steps": 0,
          "preemptions": 0, "swap_bytes": 0, "migration_time_s": 0.0, "swap_time_s": 0.0,
          "prefill_time_s": 0.0, "decode_time_s": 0.0, "windows": 0,
          "fetch_time_s": 0.0, "offload_time_s": 0.0, "max_decode_batch": 0,
          "offload_exposed_s": 0.0}
    reserved_int = 0.0     # token-seconds of reserved KV
    used_int = 0.0         # token-seconds of KV actually held
    timeline = {"t": [], "reserved_tokens": [], "running": [], "waiting": []} \
        if record_timeline else None
    done = int(rejected.sum())
    need_growth = False
    na = 0
    t = float(arr[0]) if n else 0.0

    def finish(j):
        nonlocal done
        r = int(run.idx[j])
        finish_t[r] = t
        if el is not None:
            finish_np[r] = t
        gen[r] = out_l[r]
        allocator.release(r, generated_tokens=out_l[r], completed=True)
        run.remove(j)
        done += 1

    def preempt(j):
        nonlocal t, reserved_int
        r = int(run.idx[j])
        gen[r] = int(run.ctx[j]) - prompt_l[r]
        if cfg.preemption == "swap":
            nbytes = int(run.ctx[j]) * bpt
            dt = nbytes / host_bps
            reserved_int += allocator.reserved_tokens * dt
            t += dt
            st["swap_bytes"] += nbytes
            st["swap_time_s"] += dt
            swapped[r] = True
        allocator.release(r, completed=False)
        run.remove(j)
        npre[r] += 1
        st["preemptions"] += 1
        waiting.appendleft(r)

    def grow_running():
        """Give every running request room for one more token, oldest first; preempt the
        latest-arrived running request whenever memory runs out."""
        nonlocal t, reserved_int, used_int
        while True:
            m = run.m
            need = np.flatnonzero(run.cap[:m] <= run.ctx[:m])
            if need.size == 0:
                return
            order = need[np.argsort(run.idx[need], kind="stable")].tolist()
            for j in order:
                r = int(run.idx[j])
                ev0 = len(allocator.events)
                if not allocator.grow(r, int(run.ctx[j]) + 1):
                    preempt(int(np.argmax(run.idx[:run.m])))   # latest arrival goes
                    break                                      # positions moved: rescan
                run.cap[j] = allocator.capacity_of(r)
                if len(allocator.events) > ev0:
                    for ev in allocator.events[ev0:]:
                        if ev.kind == "migrate":
                            dt = tables.kv_copy_s(ev.nbytes // bpt, layout)
                            reserved_int += allocator.reserved_tokens * dt
                            used_int += float(run.ctx[:run.m].sum()) * dt
                            t += dt
                            st["migration_time_s"] += dt
            else:
                return

    def try_reserve(r):
        g = gen[r]
        return allocator.reserve(r, prompt_l[r], predicted_output=pred_len_l[r],
                                 uncertainty=pred_u_l[r], need_tokens=prompt_l[r] + g + 1)

    def admit():
        """Requests admitted now (KV granted), as (prefill list, swap-in list)."""
        pre, swin = [], []
        slots = cfg.max_batch - run.m
        budget = cfg.max_prefill_tokens
        if not waiting or slots <= 0:
            return pre, swin
        # the oldest waiting request always goes first (no starvation)
        head = waiting[0]
        if not try_reserve(head):
            return pre, swin
        waiting.popleft()
        (swin if swapped[head] else pre).append(head)
        if not swapped[head]:
            budget -= prompt_l[head] + gen[head]
        if tag_of is None:
            while waiting and len(pre) + len(swin) < slots:
                r = waiting[0]
                tokens = prompt_l[r] + gen[r]
                if not swapped[r] and tokens > budget:
                    break
                if not try_reserve(r):
                    break
                waiting.popleft()
                if swapped[r]:
                    swin.append(r)
                else:
                    pre.append(r)
                    budget -= tokens
            return pre, swin
        # bucket-aware co-batching: same bucket tag as the head first, then the others
        look = [waiting.popleft() for _ in range(min(cfg.cobatch_lookahead, len(waiting)))]
        head_tag = tag_of(prompt_l[head], pred_len_l[head], pred_u_l[head])
        tags = [tag_of(prompt_l[r], pred_len_l[r], pred_u_l[r]) for r in look]
        order = [i for i in range(len(look)) if tags[i] == head_tag] + \
                [i for i in range(len(look)) if tags[i] != head_tag]
        taken = set()
        for i in order:
            if len(pre) + len(swin) >= slots:
                break
            r = look[i]
            tokens = prompt_l[r] + gen[r]
            if not swapped[r] and tokens > budget:
                continue
            if try_reserve(r):
                taken.add(i)
                if swapped[r]:
                    swin.append(r)
                else:
                    pre.append(r)
                    budget -= tokens
        waiting.extendleft(reversed([r for i, r in enumerate(look) if i not in taken]))
        return pre, swin

    def admit_elastic():
        """One scheduling turn of eLLM's Algorithm 1: fetch offloaded (or swapped-out)
        requests that now fit, then plan a prefill iteration (device KV or CPU offload)
        and run it. True if a prefill iteration ran."""
        nonlocal t, reserved_int, used_int, done
        # swapped-out (preempted) requests are fetched like offloaded ones, first
        while waiting and swapped[waiting[0]]:
            offloaded.appendleft(waiting.popleft())
        if offloaded:
            cands = [(r, prompt_l[r] + gen[r] + 1) for r in offloaded]
            for r in plan_fetch(el, acts, cands, run.m, cfg.max_batch):
                need = prompt_l[r] + gen[r] + 1
                if el.is_offloaded(r):
                    dt = el.fetch(r, need)
                    if dt is None:
                        break
                else:                       # swapped out by a preemption (host memory)
                    if not allocator.reserve(r, prompt_l[r], need_tokens=need):
                        break
                    dt = el.link.transfer_s((prompt_l[r] + gen[r]) * bpt)
                    st["swap_bytes"] += (prompt_l[r] + gen[r]) * bpt
                    swapped[r] = False
                offloaded.remove(r)
                held = int(run.ctx[:run.m].sum())
                reserved_int += allocator.reserved_tokens * dt
                used_int += held * dt
                t += dt
                st["fetch_time_s"] += dt
                run.add(r, prompt_l[r] + gen[r], out_l[r] - gen[r], allocator.capacity_of(r))
            if run.m:
                el.set_activation(acts.decode_bytes(run.m))   # fits: plan_fetch checked
        slots = cfg.max_batch - run.m - len(offloaded)
        if not waiting or slots <= 0:
            return False
        cands = []
        for r in waiting:
            if len(cands) >= slots:
                break
            cands.append((r, prompt_l[r] + gen[r], prompt_l[r] + gen[r] + 1))
        dev, off, act = plan_prefill(el, acts, cands, slots, cfg.max_prefill_tokens)
        if not dev and not off:
            return False
        if not el.set_activation(act):
            raise RuntimeError("eLLM plan admitted activations that do not fit")
        for r in dev:
            if not try_reserve(r):
                raise RuntimeError("eLLM plan admitted KV that does not fit")
        off_bytes = 0
        for r in off:
            if not el.offload(r, prompt_l[r] + gen[r]):
                raise RuntimeError("eLLM plan offloaded beyond the logical buffer")
            off_bytes += (prompt_l[r] + gen[r]) * bpt
        for _ in range(len(dev) + len(off)):
            waiting.popleft()
        pre = [r for r, _, _ in cands[:len(dev) + len(off)]]
        dt_pre = tables.prefill_s(np.array([prompt_l[r] + gen[r] for r in pre]))
        dt_off = el.link.transfer_s(off_bytes)
        dt = max(dt_pre, dt_off)       # layer-wise pipelined offload
        for r in pre:
            if admit_t[r] != admit_t[r]:
                admit_t[r] = t
        held = int(run.ctx[:run.m].sum())
        reserved_int += allocator.reserved_tokens * dt
        used_int += (held + sum(prompt_l[r] + gen[r] for r in dev)) * dt
        t += dt
        st["prefill_time_s"] += dt_pre
        st["offload_time_s"] += dt_off
        st["offload_exposed_s"] += dt - dt_pre
        st["prefill_iterations"] += 1
        for r in pre:
            if gen[r] < out_l[r]:
                gen[r] += 1
                if first_t[r] != first_t[r]:
                    first_t[r] = t
                    first_np[r] = t
        for r in dev:
            run.add(r, prompt_l[r] + gen[r], out_l[r] - gen[r], allocator.capacity_of(r))
        for r in off:
            if out_l[r] - gen[r] == 0:     # done at its first token: never decodes
                el.drop_offloaded(r)
                finish_t[r] = t
                finish_np[r] = t
                done += 1
            else:
                offloaded.append(r)
        for j in range(run.m - 1, -1, -1):
            if run.rem[j] == 0:
                finish(j)
        el.set_activation(acts.decode_bytes(run.m) if run.m else 0)
        return True

    def violations(t_start):
        """(TTFT violated, TPOT violated) in the turn that began at ``t_start``, counted
        when the per-request metric is known or certain: a first token later than the
        TTFT SLO in the turn, or a waiting request already past it; a request finished
        in the turn whose TPOT exceeded the TPOT SLO, or a running or offloaded request
        already past its whole TPOT budget ((t - first token) / (output - 1) > SLO)."""
        ttft, tpot = el.slo_ttft_s, el.slo_tpot_s
        v1 = bool(waiting) and t - arr_l[waiting[0]] > ttft
        if not v1:
            got = (first_np >= t_start) & (first_np <= t)
            v1 = bool(np.any(first_np[got] - arr[got] > ttft))
        fin = (finish_np >= t_start) & (finish_np <= t) & (out > 1)
        v2 = bool(np.any((finish_np[fin] - first_np[fin]) / (out[fin] - 1) > tpot))
        if not v2:
            ids = np.concatenate([run.idx[:run.m], np.fromiter(offloaded, np.int64,
                                                               len(offloaded))])
            o = out[ids]
            ids, o = ids[o > 1], o[o > 1]
            v2 = bool(np.any((t - first_np[ids]) / (o - 1) > tpot))
        return v1, v2

    while done < n:
        while na < n and arr_l[na] <= t:
            if not rejected_l[na]:
                waiting.append(na)
            na += 1
        if run.m == 0 and not waiting and (el is None or not offloaded):
            t = max(t, arr_l[na])
            continue
        allocator.clock = t
        if timeline is not None:
            timeline["t"].append(t)
            timeline["reserved_tokens"].append(allocator.reserved_tokens)
            timeline["running"].append(run.m)
            timeline["waiting"].append(len(waiting))

        if el is not None:
            t0_turn = t
            got_pre = admit_elastic()
            if scaler is not None:
                el.set_logical_buffer(scaler.observe(*violations(t0_turn)))
            if got_pre:
                need_growth = True
                continue
            pre, swin = [], []
        else:
            pre, swin = admit()
        if pre or swin:
            dt_pre = tables.prefill_s(np.array([prompt_l[r] + gen[r] for r in pre])) if pre \
                else 0.0
            dt_swap = sum((prompt_l[r] + gen[r]) * bpt for r in swin) / host_bps
            dt = dt_pre + dt_swap
            for r in pre + swin:
                if admit_t[r] != admit_t[r]:      # NaN: first admission
                    admit_t[r] = t
            held = int(run.ctx[:run.m].sum())
            reserved_int += allocator.reserved_tokens * dt
            used_int += (held + sum(prompt_l[r] + gen[r] for r in pre + swin)) * dt
            t += dt
            st["prefill_time_s"] += dt_pre
            st["swap_time_s"] += dt_swap
            if pre:
                st["prefill_iterations"] += 1
            for r in swin:
                swapped[r] = False
                st["swap_bytes"] += (prompt_l[r] + gen[r]) * bpt
            for r in pre:
                if gen[r] < out_l[r]:          # the prefill emits the next token
                    gen[r] += 1
                    if first_t[r] != first_t[r]:
                        first_t[r] = t
            for r in pre + swin:
                run.add(r, prompt_l[r] + gen[r], out_l[r] - gen[r], allocator.capacity_of(r))
            for j in range(run.m - 1, -1, -1):
                if run.rem[j] == 0:
                    finish(j)
            need_growth = True
            continue

        if run.m == 0:
            r = waiting[0] if waiting else offloaded[0]
            raise OutOfMemoryError(
                "kv", (prompt_l[r] + gen[r] + 1) * bpt, allocator.free_tokens * bpt,
                f"request {r} (prompt {prompt_l[r]} tokens) with nothing else running: "
                f"the {allocator.name} allocator can never admit it")

        # ---- growth: every running request must hold room for one more token
        if need_growth:
            grow_running()
            need_growth = False
            if run.m == 0:
                continue

        # ---- a window of identical-batch decode steps
        if el is not None:
            while run.m and not el.set_activation(acts.decode_bytes(run.m)):
                preempt(int(np.argmax(run.idx[:run.m])))
            if run.m == 0:
                continue
        m = run.m
        if m > st["max_decode_batch"]:
            st["max_decode_batch"] = m
        t_limit = arr_l[na] if (na < n and m < cfg.max_batch) else np.inf
        if block is None:
            k, dt, used, n_fin, n_grow = advance_running(run.ctx, run.rem, run.cap, m, bg,
                                                         cg, tab, t, t_limit)
            reserved_int += allocator.reserved_tokens * dt
        else:
            order = np.argsort(run.idx[:m], kind="stable")
            log_len = m * (min(int(run.rem[:m].min()), 4096) // block + 2)
            if grow_log.shape[0] < log_len:
                grow_log = np.zeros(log_len, dtype=np.int64)
            k, dt, used, extra_int, n_log, n_fin = advance_blocks(
                run.ctx, run.rem, run.cap, m, order, block, allocator.free_blocks, grow_log,
                bg, cg, tab, t, t_limit)
            reserved_int += allocator.reserved_tokens * dt + extra_int
            if n_log:
                allocator.grow_blocks(run.idx[grow_log[:n_log]].tolist())
            # blocks are granted inside the next window; only a window that could not
            # start (k == 0: blocks exhausted) needs grow_running, which preempts
            n_grow = 1 if k == 0 else 0
        used_int += used
        t += dt
        st["decode_steps"] += k
        st["decode_token_steps"] += k * m
        st["decode_time_s"] += dt
        st["windows"] += 1
        if n_fin:
            for j in np.flatnonzero(run.rem[:m] == 0)[::-1]:
                finish(int(j))
        need_growth = n_grow > 0
        if scaler is not None:
            el.set_logical_buffer(scaler.observe(*violations(t - dt)))

    admit_t, first_t, finish_t = (np.asarray(x, dtype=np.float64)
                                  for x in (admit_t, first_t, finish_t))
    metrics = _metrics(trace, cfg, allocator, tables, st, arr, admit_t, first_t, finish_t,
                       out, npre, rejected, cut_new | cut_ctx, reserved_int, used_int, bpt)
    if el is not None:
        el.set_activation(0)               # the engine is idle: no live activations
        metrics.update(_elastic_metrics(el, acts, st, scaler, prompt, out, rejected,
                                        metrics["duration_s"]))
    if timeline is not None:
        timeline = {k: np.asarray(v) for k, v in timeline.items()}
    return ServingResult(metrics, arr, admit_t, first_t, finish_t, out, npre, rejected,
                         allocator.stats(), timeline, list(allocator.events))


def _elastic_metrics(el, acts, st, scaler, prompt, out, rejected, span) -> dict:
    """Extra metrics of a run with activation memory (eLLM or static split)."""
    s = el.stats()
    served = ~rejected
    dec_tokens = st["decode_token_steps"]
    dec_time = st["decode_time_s"] + st["fetch_time_s"]
    total_tokens = int(prompt[served].sum() + out[served].sum())
    return {
        "memory_mode": s["mode"],
        "max_decode_batch": int(st["max_decode_batch"]),
        "decode_tokens": int(dec_tokens),
        "decode_throughput_tps": dec_tokens / dec_time if dec_time > 0 else None,
        "total_throughput_tps": total_tokens / span if span > 0 else None,
        "activation_bytes_per_token": acts.bytes_per_token,
        "activation_reserve_bytes": int(s["activation_reserve_chunks"]) * el.chunk_bytes,
        "pool_bytes": el.total_chunks * el.chunk_bytes,
        "peak_kv_bytes": el.peak_kv_chunks * el.chunk_bytes,
        "peak_activation_bytes": el.peak_act_chunks * el.chunk_bytes,
        "inflations": int(s["n_inflate"]), "deflations": int(s["n_deflate"]),
        "inflated_bytes": int(s["n_inflated_chunks"]) * el.chunk_bytes,
        "deflated_bytes": int(s["n_deflated_chunks"]) * el.chunk_bytes,
        "offloads": int(s["n_offload"]), "fetches": int(s["n_fetch"]),
        "offload_bytes": int(s["n_offload_bytes"]), "fetch_bytes": int(s["n_fetch_bytes"]),
        "peak_cpu_buffer_bytes": int(s["peak_cpu_used_bytes"]),
        "fetch_time_s": st["fetch_time_s"], "offload_time_s": st["offload_time_s"],
        "offload_exposed_s": st["offload_exposed_s"],
        "buffer_events": len(scaler.history) if scaler is not None else 0,
        "logical_buffer_final_bytes": int(el.logical_buffer_bytes),
    }


def _metrics(trace, cfg, allocator, tables, st, arr, admit_t, first_t, finish_t, out, npre,
             rejected, cut, reserved_int, used_int, bpt) -> dict:
    served = ~rejected
    completed = int(np.sum(np.isfinite(finish_t)))
    tokens = int(out[served].sum())
    t0 = float(arr[served].min()) if served.any() else 0.0
    t1 = float(np.nanmax(finish_t)) if completed else t0
    span = max(t1 - t0, 0.0)
    ttft = first_t - arr
    multi = np.isfinite(first_t) & (out >= 2)
    tpot = np.full(len(out), np.nan)
    tpot[multi] = (finish_t[multi] - first_t[multi]) / (out[multi] - 1)
    queue = admit_t - arr
    e2e = finish_t - arr
    s = allocator.stats()
    mig_rate = allocator.migration_rate() if hasattr(allocator, "migration_rate") else None
    acc = allocator.predictor_accuracy() if hasattr(allocator, "predictor_accuracy") else None
    m = {
        "requests": int(len(out)),
        "requests_completed": completed,
        "requests_rejected": int(rejected.sum()),
        "requests_cut": int(cut.sum()),
        "output_tokens": tokens,
        "duration_s": span,
        "total_time_ns": span * 1e9,
        "tokens_per_s": tokens / span if span > 0 else None,
        "requests_per_s": completed / span if span > 0 else None,
        "kv_utilization": allocator.kv_utilization(),
        "kv_capacity_bytes": allocator.capacity_bytes,
        "peak_reserved_bytes": int(s["peak_reserved_tokens"]) * bpt,
        "mean_reserved_bytes": reserved_int / span * bpt if span > 0 else None,
        "mean_used_bytes": used_int / span * bpt if span > 0 else None,
        "time_weighted_kv_occupancy": used_int / reserved_int if reserved_int > 0 else None,
        "preemptions": int(st["preemptions"]),
        "preempted_requests": int(np.count_nonzero(npre)),
        "migrations": int(s.get("n_migrate", 0)),
        "migration_rate": mig_rate,
        "migrated_bytes": int(s.get("migrated_bytes", 0)),
        "reserve_denials": int(s.get("n_deny", 0)),
        "predictor_accuracy": acc,
        "prefill_iterations": st["prefill_iterations"],
        "decode_steps": st["decode_steps"],
        "mean_decode_batch": (st["decode_token_steps"] / st["decode_steps"]
                              if st["decode_steps"] else None),
        "time_breakdown_s": {k: st[k] for k in ("prefill_time_s", "decode_time_s",
                                                "migration_time_s", "swap_time_s")},
        "swap_bytes": int(st["swap_bytes"]),
        "allocator": allocator.name,
        "kv_layout": allocator.kv_layout,
        "scheduler": cfg.scheduler,
        "preemption_policy": cfg.preemption,
        "iteration_time_model": tables.label,
        "cycle_level": tables.cycle_level,
        "interpolation_error": tables.error_summary(),
    }
    if "n_regular" in s:   # ODMA-style routing statistics
        routed = s["n_regular"] + s["n_large_uncertain"] + s["n_large_no_bucket"]
        m["large_bucket_fraction"] = ((s["n_large_uncertain"] + s["n_large_no_bucket"]) /
                                      routed if routed else None)
        m["regular_bucket_accuracy"] = s.get("regular_bucket_accuracy")
        m["bucket_boundaries"] = s.get("boundaries")
        m["bucket_refreshes"] = s.get("n_boundary_refreshes")
    for name, x in (("ttft", ttft), ("tpot", tpot), ("queue_delay", queue), ("e2e", e2e)):
        p = percentiles(x)
        for q, v in p.items():
            m[f"{name}_{q}_s"] = v
    return m

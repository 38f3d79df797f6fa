"""Decode windows (Numba): as many identical-batch decode steps as run before anything
changes the batch, over the running requests' arrays, in one call.

Three kinds share the window's rules (stop after a request finishes, or after the step
that reaches ``t_limit``): :func:`advance_running` (plain steps, KV granted beforehand),
:func:`advance_blocks` (plain steps, a block allocator granting blocks inside the
window) and :func:`speculative_window` (speculative steps: draft steps and a verify
step, each request accepting its tokens). Block granting before each step is one
helper for both block-granting kinds (:func:`_grant_step_blocks`).
"""
from __future__ import annotations

import math

from numba import njit

from h2m2sim.compute.speculative import take_tokens

from .interp import interp2_pair

__all__ = ["decode_window", "advance_running", "advance_blocks", "speculative_window",
           "log_capacity"]


@njit(cache=True)
def decode_window(bg, cg, tab, etab, batch, ctx_sum, growth, k_max, t0, t_limit):
    """Run up to ``k_max`` decode steps of a fixed batch whose total KV grows by
    ``growth`` tokens per step (the batch, but for requests whose KV stays at a sliding
    window); stop after the step that reaches ``t_limit``. ``tab`` holds step times (s),
    ``etab`` step energies (J). Returns (steps, elapsed seconds, integral of KV tokens
    held over time in token-seconds, joules)."""
    elapsed = 0.0
    used = 0.0
    energy = 0.0
    k = 0
    while k < k_max:
        total = ctx_sum + growth * k
        dt, de = interp2_pair(bg, cg, tab, etab, float(batch), total / batch)
        elapsed += dt
        energy += de
        used += total * dt
        k += 1
        if t0 + elapsed >= t_limit:
            break
    return k, elapsed, used, energy


@njit(cache=True)
def advance_running(ctx, rem, cap, m, bg, cg, tab, etab, t0, t_limit, window):
    """One decode window over the running arrays (first ``m`` entries), in place: as many
    identical-batch steps as possible before a request finishes, a request runs out of
    granted KV or reaches the sliding ``window`` (its KV stays there: each new token's
    replaces the oldest), or the step that reaches ``t_limit``. Returns (steps, elapsed
    s, KV token-seconds held, joules, requests finished, requests needing growth)."""
    k_max = rem[0]
    total = 0
    growing = 0
    for j in range(m):
        if rem[j] < k_max:
            k_max = rem[j]
        if ctx[j] < window:
            growing += 1
            room = min(cap[j], window) - ctx[j]
            if room < k_max:
                k_max = room
        total += ctx[j]
    k, elapsed, used, energy = decode_window(bg, cg, tab, etab, m, float(total),
                                             growing, k_max, t0, t_limit)
    n_fin = 0
    n_grow = 0
    for j in range(m):
        if ctx[j] < window:
            ctx[j] += k
        rem[j] -= k
        if rem[j] == 0:
            n_fin += 1
        elif cap[j] <= ctx[j] < window:
            n_grow += 1
    return k, elapsed, used, energy, n_fin, n_grow


@njit(cache=True)
def _grant_step_blocks(ctx, rem, cap, m, look, block, window, order, free, grow_log, n_log):
    """Before a step, give every request room for min(``look``, tokens left) tokens
    beyond its context (none past the sliding ``window``), blocks of ``block`` tokens,
    oldest first (``order``), each block's position appended to ``grow_log``. Returns
    (blocks granted, new log length), or (-1, n_log) with nothing changed when a request
    is short and blocks cannot be granted: ``block`` 0 (an allocator that does not grow
    in blocks), fewer than needed ``free``, or the log full."""
    need = 0
    for j in range(m):
        if ctx[j] >= window:
            continue
        short = min(ctx[j] + min(look, rem[j]), window) - cap[j]
        if short > 0:
            if block == 0:
                return -1, n_log
            need += (short + block - 1) // block
    if need > free or n_log + need > grow_log.shape[0]:
        return -1, n_log
    if need == 0:
        return 0, n_log
    for q in range(m):
        j = order[q]
        if ctx[j] >= window:
            continue
        want = min(ctx[j] + min(look, rem[j]), window)
        while cap[j] < want:
            cap[j] += block
            grow_log[n_log] = j
            n_log += 1
    return need, n_log


@njit(cache=True)
def advance_blocks(ctx, rem, cap, m, order, block, free, grow_log, bg, cg, tab, etab, t0,
                   t_limit, window):
    """:func:`advance_running` for a block allocator: a request that fills its blocks gets
    one more block *inside* the window (oldest request first within a step, as the
    step-by-step loop would), as long as ``free`` blocks last. The positions that got a
    block are appended to ``grow_log`` in allocation order for the caller to replay on the
    allocator. The window stops before a step whose blocks are not available (the caller
    then preempts), after a request finishes, or at ``t_limit``. Returns (steps, elapsed,
    KV token-seconds held, token-seconds of blocks reserved inside the window, joules,
    blocks granted, requests finished). A request at the sliding ``window`` needs no
    block: its new token's KV replaces its oldest."""
    total = 0
    for j in range(m):
        total += ctx[j]
    k = 0
    elapsed = 0.0
    used = 0.0
    energy = 0.0
    extra = 0.0
    extra_int = 0.0
    n_log = 0
    n_fin = 0
    while True:
        need, n_log = _grant_step_blocks(ctx, rem, cap, m, 1, block, window, order, free,
                                         grow_log, n_log)
        if need < 0:
            break
        free -= need
        extra += need * block
        dt, de = interp2_pair(bg, cg, tab, etab, float(m), total / m)
        elapsed += dt
        energy += de
        used += total * dt
        extra_int += extra * dt
        for j in range(m):
            if ctx[j] < window:
                ctx[j] += 1
                total += 1
            rem[j] -= 1
            if rem[j] == 0:
                n_fin += 1
        k += 1
        if n_fin > 0 or t0 + elapsed >= t_limit:
            break
    return k, elapsed, used, extra_int, energy, n_log, n_fin


def log_capacity(m: int, k: int, min_rem: int, block: int) -> int:
    """Entries a speculative window's block log may need: each of ``m`` requests gains at
    most k + 1 tokens per step and the window ends when the first of them finishes
    (``min_rem`` tokens left, at least one per step), plus its lookahead."""
    return m * ((k + 1) * min(int(min_rem), 4096) // block + math.ceil((k + 1) / block) + 2)


@njit(cache=True)
def _step_cost(bg, cg, vtab, vetab, dbg, dcg, dtab, detab, m, mean, k):
    """(s, J, draft s, draft J) of one speculative step of ``m`` requests holding
    ``mean`` KV tokens each: ``k`` draft decode steps over growing contexts, then the
    target's verify step."""
    dt, de = interp2_pair(bg, cg, vtab, vetab, float(m), mean)
    ds = 0.0
    dj = 0.0
    for i in range(k):
        t, e = interp2_pair(dbg, dcg, dtab, detab, float(m), mean + i)
        ds += t
        dj += e
    return dt + ds, de + dj, ds, dj


@njit(cache=True)
def speculative_window(ctx, rem, cap, idx, credit, expected, m, k, order, block, free,
                       grow_log, bg, cg, vtab, vetab, dbg, dcg, dtab, detab, t0, t_limit):
    """A window of speculative steps over the running arrays (first ``m`` entries), in
    place: each step prices ``k`` draft steps and a verify step and gives request ``j``
    (request ``idx[j]``) its accepted tokens from ``expected`` and ``credit`` (per
    request). Before each step every request needs room for min(k + 1, left) tokens
    beyond its context: a block allocator (``block`` > 0) grants blocks inside the window
    while ``free`` blocks and ``grow_log`` last (:func:`_grant_step_blocks`), otherwise
    the window stops there. It also stops after a request finishes or after the step
    that reaches ``t_limit``. Returns (steps, elapsed s, first step s, KV token-seconds
    held, token-seconds of blocks granted inside the window, joules, draft s, draft J,
    tokens accepted, blocks granted, requests finished, requests short of room)."""
    total = 0
    for j in range(m):
        total += ctx[j]
    steps, n_log, n_fin, tokens = 0, 0, 0, 0
    elapsed, first, used, energy, draft_s, draft_j = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    extra, extra_int = 0.0, 0.0
    window = 2**62
    while True:
        need, n_log = _grant_step_blocks(ctx, rem, cap, m, k + 1, block, window, order,
                                         free, grow_log, n_log)
        if need < 0:
            break
        free -= need
        extra += need * block
        dt, de, ds, dj = _step_cost(bg, cg, vtab, vetab, dbg, dcg, dtab, detab, m,
                                    total / m, k)
        elapsed += dt
        energy += de
        draft_s += ds
        draft_j += dj
        used += total * dt
        extra_int += extra * dt
        got = 0
        for j in range(m):
            r = idx[j]
            a, carried = take_tokens(credit[r], expected[r], min(k + 1, rem[j]))
            credit[r] = carried
            ctx[j] += a
            rem[j] -= a
            got += a
            if rem[j] == 0:
                n_fin += 1
        if steps == 0:
            first = dt
        total += got
        tokens += got
        steps += 1
        if n_fin > 0 or t0 + elapsed >= t_limit:
            break
    short = 0
    for j in range(m):
        if rem[j] > 0 and cap[j] < ctx[j] + min(k + 1, rem[j]):
            short += 1
    return (steps, elapsed, first, used, extra_int, energy, draft_s, draft_j, tokens,
            n_log, n_fin, short)

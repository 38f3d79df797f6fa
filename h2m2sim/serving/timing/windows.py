"""Decode windows (Numba): as many identical-batch decode steps as run before anything
changes the batch, over the running requests' arrays, in one call."""
from __future__ import annotations

from numba import njit

from .interp import interp2_pair

__all__ = ["decode_window", "advance_running", "advance_blocks"]


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
    cap_log = grow_log.shape[0]
    while True:
        need = 0
        for j in range(m):
            if cap[j] <= ctx[j] < window:
                need += 1
        if need > free or n_log + need > cap_log:
            break
        for q in range(m):
            j = order[q]
            if cap[j] <= ctx[j] < window:
                cap[j] += block
                grow_log[n_log] = j
                n_log += 1
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

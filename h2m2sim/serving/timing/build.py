"""Sampling a point evaluator into iteration tables: decode, prefill and copy tables,
mixed (chunked prefill) and verify (speculative) tables, each with its measured
interpolation error; cached on disk by the evaluator's key."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from h2m2sim.cache import cached, memoized
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.parallel import map_ordered

from .interp import interp2, interp2_pair, interp3_pair
from .tables import IterationTables, TableGrid

__all__ = ["build_tables", "default_batched_tokens", "verify_point", "fill_unreachable",
           "CHUNK_COST_RATIO", "TABLES_NS"]

#: default chunked-prefill token budget: the smallest power of two (at least twice the
#: batch limit, so decodes never take the whole budget) whose prefill iteration costs this
#: many batch-1 decode steps. The weight read is then at most 1/ratio of a chunk's
#: iteration, while a chunk stalls the decodes riding with it by about ratio steps
#: (Sarathi-Serve's trade-off: Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM
#: Inference with Sarathi-Serve", OSDI 2024).
CHUNK_COST_RATIO = 2.0


def _sample_lengths(rng, n, mean, max_tokens):
    """n positive lengths around ``mean`` with a log-normal spread (sigma 0.6)."""
    x = rng.lognormal(np.log(max(mean, 1.0)), 0.6, n)
    return np.clip(np.round(x), 1, max_tokens)


def fill_unreachable(tab: np.ndarray, reach: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``tab`` [batch, token, ...] with its points outside ``reach`` (which, along the
    token axis, are the tail of each row) extended linearly in tokens from the row's
    last two reachable points, never decreasing. No serving state sits at those points;
    interpolation next to them uses the extension, a decode step's own shape (linear
    in the KV read)."""
    out = np.array(tab, dtype=np.float64)
    moved = np.moveaxis(out, 1, -1)             # [..., token] views of out
    rmask = np.moveaxis(reach, 1, -1)
    for idx in np.ndindex(moved.shape[:-1]):
        row, ok = moved[idx], rmask[idx]
        last = int(np.nonzero(ok)[0].max())
        if last == len(row) - 1:
            continue
        slope = max(0.0, (row[last] - row[last - 1]) / (tokens[last] - tokens[last - 1]))
        row[last + 1:] = row[last] + slope * (tokens[last + 1:] - tokens[last])
    return out


def _evaluate_points(evaluator, cost: Callable, weight: Callable, calls: list, desc: str,
                     keep=None) -> np.ndarray:
    """[time s, energy J] of ``cost(*call)`` for every call (NaN where ``keep`` is
    False). Points of a cycle-level evaluator are independent simulations and run on the
    run's threads, the largest by ``weight(call)`` first; the values do not depend on the
    thread count."""
    def one(c):
        p = cost(*c)
        return float(p.time_s), float(p.energy_j)
    keep = np.ones(len(calls), dtype=bool) if keep is None else np.ravel(keep)
    todo = [c for c, k in zip(calls, keep) if k]
    if not evaluator.cycle_level:
        vals = [one(c) for c in todo]
    else:
        vals = map_ordered(one, todo, cost=[weight(c) for c in todo], desc=desc)
    out = np.full((len(calls), 2), np.nan)
    out[keep] = np.asarray(vals, dtype=np.float64).reshape(len(todo), 2)
    return out


def _error_point(rng, grid: TableGrid, simulated: bool) -> tuple[int, float]:
    """An error sample's batch (uniform in 1..max_batch) and mean KV tokens per request
    (log-uniform up to max_tokens, then :func:`_reachable_mean`)."""
    b = int(rng.integers(1, grid.max_batch + 1))
    mean = float(np.exp(rng.uniform(0, np.log(grid.max_tokens))))
    return b, _reachable_mean(grid, b, mean, simulated)


def _reachable_mean(grid: TableGrid, batch: int, mean: float, simulated: bool) -> float:
    """An error sample's mean KV tokens per request, within what ``batch`` requests can
    hold in the pool (with room for the lengths' spread) when the evaluator simulates."""
    if not simulated or grid.kv_tokens is None:
        return mean
    return max(1.0, min(mean, grid.kv_tokens / (2.0 * batch)))


def _check_values(name: str, v: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ConfigError("evaluator", f"{name} {what} must be finite and >= 0")


def _rel_errors(approx: np.ndarray, true: np.ndarray) -> np.ndarray:
    """[max, mean, p95] of |approx - true| / true (0 where true is 0)."""
    rel = np.where(true > 0, np.abs(approx - true) / np.where(true > 0, true, 1.0), 0.0)
    rel = rel if rel.size else np.zeros(1)
    return np.array([rel.max(), rel.mean(), np.percentile(rel, 95)])


def _compute_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                    verify_layouts: list[KVLayout] | None = None) -> dict:
    """The table arrays for ``layouts`` (in the order of their names): times and, beside
    each, energies (all NaN when the evaluator does not price energy); verify steps for
    ``verify_layouts`` (default: all) when the grid asks for them."""
    bg, tg = grid.batches(), grid.tokens()
    out: dict[str, np.ndarray] = {"batch_grid": bg, "token_grid": tg,
                                  "layouts": np.asarray([str(x) for x in layouts], dtype=str)}

    def evaluate_all(calls, desc, keep=None) -> np.ndarray:
        return _evaluate_points(evaluator, evaluator.cost,
                                lambda c: c[1] * float(np.sum(c[2])), calls, desc, keep)

    reach = grid.reachable(simulated=evaluator.needs_fit)
    phases = [(f"decode[{lay}]", "decode", lay) for lay in layouts] + \
        [("prefill", "prefill", CONTIGUOUS)]
    calls = [(phase, int(b), np.full(int(b), c), lay)
             for _, phase, lay in phases for b in bg for c in tg]
    calls += [("kv_copy", 1, np.array([c]), CONTIGUOUS) for c in tg]
    kept = np.concatenate([np.tile(reach.ravel(), len(phases)), reach[0]])
    vals = evaluate_all(calls, "iteration tables", kept)
    priced = bool(np.all(np.isfinite(vals[kept, 1])))
    if not priced:
        vals[:, 1] = np.nan          # one evaluator prices all its points or none
    n = len(bg) * len(tg)
    for i, (name, phase, _) in enumerate(phases):
        _store_table(out, name, phase, vals[i * n:(i + 1) * n], (len(bg), len(tg)), reach,
                     tg, priced)
    copy = vals[len(phases) * n:]
    out["kv_copy"] = fill_unreachable(copy[None, :, 0], reach[:1], tg)[0]
    out["kv_copy_energy"] = fill_unreachable(copy[None, :, 1], reach[:1], tg)[0] \
        if priced else copy[:, 1]
    if grid.chunk_tokens:
        out.update(_mixed_tables(evaluator, layouts, grid, seed, priced))
    if grid.verify_tokens:
        out.update(_verify_tables(evaluator, layouts if verify_layouts is None
                                  else verify_layouts, grid, seed, priced, reach))

    # interpolation error at random heterogeneous batches (drawn in a fixed order)
    rng = np.random.default_rng(seed)
    samples = []
    for name, phase, lay in phases:
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            samples.append((name, (phase, b, _sample_lengths(rng, b, mean, grid.max_tokens),
                                   lay)))
    truth = evaluate_all([c for _, c in samples], "table error samples")
    for name, phase, _ in phases:
        pick = [i for i, (nm, _) in enumerate(samples) if nm == name]
        approx = np.array([[interp2(bg, tg, out[col], float(samples[i][1][1]),
                                    float(samples[i][1][2].mean()))
                            for col in (name, _energy_name(name))] for i in pick])
        approx = approx.reshape(len(pick), 2)
        label = "prefill" if phase == "prefill" else f"decode {name[7:-1]}"
        out[f"err[{label}]"] = _rel_errors(approx[:, 0], truth[pick, 0])
        if priced:
            out[f"eerr[{label}]"] = _rel_errors(approx[:, 1], truth[pick, 1])
    return out


def _mixed_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                  priced: bool) -> dict:
    """The mixed-iteration tables of ``layouts`` over (batch, decode tokens, chunk
    tokens), and their interpolation error at random iterations: heterogeneous decode
    lengths and one to three chunks, half of them continuing a prompt."""
    bg, tg, kg = grid.batches(), grid.tokens(), grid.chunks()

    def evaluate_all(calls, desc, keep=None) -> np.ndarray:
        v = _evaluate_points(evaluator, evaluator.mixed_cost,
                             lambda c: float(np.sum(c[0])) + float(np.sum(c[1])), calls,
                             desc, keep)
        if not priced:
            v[:, 1] = np.nan
        return v

    out: dict[str, np.ndarray] = {"chunk_grid": kg}
    shape = (len(bg), len(tg), len(kg))
    rng = np.random.default_rng([seed, 3])
    reach = grid.reachable(kg, simulated=evaluator.needs_fit)
    for lay in layouts:
        calls = [(np.full(int(b), c), np.array([[0.0, k]]), lay)
                 for b in bg for c in tg for k in kg]
        vals = evaluate_all(calls, f"mixed tables {lay}", reach)
        _store_table(out, f"mixed[{lay}]", "mixed", vals, shape, reach, tg, priced)
        samples = []
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            total = int(rng.integers(1, int(grid.chunk_tokens) + 1))
            parts = np.diff(np.sort(np.r_[0, rng.integers(0, total + 1, int(
                rng.integers(0, 3))), total]))
            parts = parts[parts > 0].astype(np.float64)
            prior = np.where(rng.random(parts.size) < 0.5, 0.0, np.round(
                rng.uniform(0, grid.max_tokens / 2, parts.size)))
            samples.append((_sample_lengths(rng, b, mean, grid.max_tokens),
                            np.stack([prior, parts], axis=1), lay))
        if not samples:
            continue
        truth = evaluate_all(samples, "mixed table error samples")
        approx = np.array([interp3_pair(bg, tg, kg, out[f"mixed[{lay}]"],
                                        out[f"mixed_energy[{lay}]"], float(c.size),
                                        float(c.mean()), float(ch[:, 1].sum()))
                           for c, ch, _ in samples])
        out[f"err[mixed {lay}]"] = _rel_errors(approx[:, 0], truth[:, 0])
        if priced:
            out[f"eerr[mixed {lay}]"] = _rel_errors(approx[:, 1], truth[:, 1])
    return out


def verify_point(decode_context, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``mixed_cost`` arguments (decode context, chunks) that price one speculative
    verify step: every request of ``decode_context`` (its KV tokens) scores ``tokens`` =
    k + 1 positions. Each request is a decode row over its KV, laid out as the
    allocator's layout (the weights read once for all rows, each request's KV read once),
    plus a chunk of k tokens starting fresh (k more rows through the projections, their
    KV written, their causal attention among themselves). Left out: the scores of those
    k queries against the earlier KV, FLOPs only (the KV is read once for all k + 1
    queries of a request); at (k + 1) x (query heads / KV heads) FLOPs per KV byte (fp16)
    a verify attention stays memory-bound, so they add little. The LM head is priced as
    the evaluator prices a mixed iteration's (the cycle-level one: a row per decode
    request and per chunk, where a verify step computes k + 1 per request; its weight
    read, what a small batch pays, is counted once either way)."""
    ctx = np.asarray(decode_context, dtype=np.float64).ravel()
    chunks = np.zeros((ctx.size, 2))
    chunks[:, 1] = int(tokens) - 1
    return ctx, chunks


def _verify_cost(evaluator, decode_context, tokens: int, kv_layout) -> PointCost:
    """The evaluator's price of a verify step: its own ``verify_cost`` where it has one
    (the analytic placeholder: its mixed-iteration energy would count the weights
    twice), else ``mixed_cost`` at :func:`verify_point`."""
    own = getattr(evaluator, "verify_cost", None)
    if own is not None:
        return own(decode_context, tokens, kv_layout)
    return evaluator.mixed_cost(*verify_point(decode_context, tokens), kv_layout)


def _verify_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                   priced: bool, reach: np.ndarray) -> dict:
    """The verify-step tables of ``layouts`` over (batch, KV tokens per request) and their
    interpolation error at random batches of heterogeneous lengths."""
    bg, tg, q = grid.batches(), grid.tokens(), int(grid.verify_tokens)

    def evaluate_all(ctxs, lay, desc, keep=None) -> np.ndarray:
        v = _evaluate_points(evaluator, lambda c: _verify_cost(evaluator, c, q, lay),
                             lambda c: float(np.sum(c[0])), [(c,) for c in ctxs], desc,
                             keep)
        if not priced:
            v[:, 1] = np.nan
        return v

    out: dict[str, np.ndarray] = {"verify_tokens": np.asarray(q)}
    rng = np.random.default_rng([seed, 5])
    for lay in layouts:
        vals = evaluate_all([np.full(int(b), c) for b in bg for c in tg], lay,
                            f"verify tables {lay}", reach)
        _store_table(out, f"verify[{lay}]", "verify", vals, (len(bg), len(tg)), reach, tg,
                     priced)
        samples = []
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            samples.append(_sample_lengths(rng, b, mean, grid.max_tokens))
        if not samples:
            continue
        truth = evaluate_all(samples, lay, "verify table error samples")
        approx = np.array([interp2_pair(bg, tg, out[f"verify[{lay}]"],
                                        out[f"verify_energy[{lay}]"], float(c.size),
                                        float(c.mean())) for c in samples])
        out[f"err[verify {lay}]"] = _rel_errors(approx[:, 0], truth[:, 0])
        if priced:
            out[f"eerr[verify {lay}]"] = _rel_errors(approx[:, 1], truth[:, 1])
    return out


def default_batched_tokens(prefill_s: Callable[[int], float], decode_s: float,
                           max_batch: int, max_tokens: int) -> int:
    """The default chunked-prefill budget (tokens per iteration, vLLM's
    ``max_num_batched_tokens``): the smallest power of two >= 2 x ``max_batch`` whose
    prefill (``prefill_s(tokens)``, seconds, one prompt) costs at least
    ``CHUNK_COST_RATIO`` batch-1 decode steps (``decode_s``); at most the power of two
    above ``max_tokens`` (the longest request: a larger budget changes nothing). SLOs do
    not enter it: they measure a run, they do not steer it."""
    t = 1 << max(1, (2 * int(max_batch) - 1).bit_length())
    cap = max(t, 1 << max(1, (int(max_tokens) - 1).bit_length()))
    while t < cap and prefill_s(t) < CHUNK_COST_RATIO * decode_s:
        t *= 2
    return t


#: namespace of the iteration tables in the result cache
TABLES_NS = "serving-iteration-tables"


def _store_table(out: dict, name: str, phase: str, vals: np.ndarray, shape: tuple,
                 reach: np.ndarray, tokens: np.ndarray, priced: bool) -> None:
    """``out[name]`` the times (column 0 of ``vals``) and its energy table the energies
    (column 1) in ``shape``, unreachable points filled; both checked (the energies when
    the evaluator prices them)."""
    t = fill_unreachable(vals[:, 0].reshape(shape), reach, tokens)
    _check_values(phase, t, "times")
    out[name] = t
    e = vals[:, 1].reshape(shape)
    out[_energy_name(name)] = fill_unreachable(e, reach, tokens) if priced else e
    if priced:
        _check_values(phase, out[_energy_name(name)], "energies")


def _energy_name(table: str) -> str:
    """The energy table beside time table ``table``: decode[x] -> decode_energy[x]."""
    head, sep, rest = table.partition("[")
    return f"{head}_energy{sep}{rest}"


def build_tables(evaluator: PointEvaluator, layouts, grid: TableGrid, *, seed: int = 0,
                 cache: bool = True, cache_dir=None) -> IterationTables:
    """Sample ``evaluator`` over ``grid`` for every layout in ``layouts`` (and the
    contiguous one, which prefill and copies use) and measure the interpolation error.
    The grid is the evaluator's ``table_grid(grid)`` (an evaluator whose points are
    simulations may coarsen it). With ``cache`` the arrays are stored under a hash of the
    evaluator's ``cache_key()``, the grid, the layouts and the code version (the
    evaluator's ``cache_salt()``, e.g. ``code_digest("dram_models", "h2m2sim.npu")``, or
    all the code when that is None; :func:`h2m2sim.cache.cached`), so a second run with
    the same inputs reuses them."""
    if not isinstance(evaluator, PointEvaluator):
        raise ConfigError("evaluator", "must be a PointEvaluator (h2m2sim.compute.evaluator), "
                          f"got {type(evaluator).__name__}")
    for lay in layouts:
        if not isinstance(lay, KVLayout):
            raise ConfigError("kv_layout", f"must be a KVLayout, got {lay!r}")
    # verify steps only for the layouts asked for (the run's allocator's)
    asked = sorted(set(layouts), key=str)
    # ordered by name: the order fixes the random error samples of each layout
    layouts = sorted(set(layouts) | {CONTIGUOUS}, key=str)
    grid = evaluator.table_grid(grid)
    grid_key = dataclasses.asdict(grid)
    if grid.chunk_tokens is None:       # tables without mixed iterations keep their key
        del grid_key["chunk_tokens"]
    if grid.verify_tokens is None:      # ... and so do tables without verify steps
        del grid_key["verify_tokens"]
    if grid.kv_tokens is None or not evaluator.needs_fit:
        del grid_key["kv_tokens"]       # it changes only what a simulation skips
    key = {"evaluator": evaluator.cache_key(), "grid": grid_key,
           "layouts": [str(x) for x in layouts], "seed": seed}
    if grid.verify_tokens is not None:
        key["verify_layouts"] = [str(x) for x in asked]
    salt = evaluator.cache_salt()
    # the same tables again in this process (another point or run) are not recomputed;
    # two evaluator classes never share an entry, whatever their keys
    cls = type(evaluator)
    memo_key = {**key, "class": f"{cls.__module__}.{cls.__qualname__}"}
    compute = lambda: memoized(TABLES_NS, memo_key, lambda: _compute_tables(  # noqa: E731
        evaluator, layouts, grid, seed, asked), salt=salt)
    arrays = cached(TABLES_NS, key, compute, fmt="npz", cache_dir=cache_dir, salt=salt,
                    enabled=cache)
    return IterationTables(arrays, evaluator.label, evaluator.cycle_level)

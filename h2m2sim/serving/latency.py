"""Per-request metrics of a serving run, from the requests' times alone: counts,
throughput, TTFT / TPOT / queueing / end-to-end percentiles, inter-token latencies and
SLO goodput. Times are seconds (NaN: never happened)."""
from __future__ import annotations

import numpy as np

__all__ = ["percentiles", "weighted_percentile", "slo_met", "request_metrics",
           "latency_metrics", "energy_metrics", "TokenGaps"]


def percentiles(x: np.ndarray) -> dict:
    """p50/p90/p99/mean of the finite values of x (None when there are none)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` each counted ``weights`` times: the
    smallest value whose cumulative weight reaches q % of the total (the inverted CDF,
    numpy's ``inverted_cdf`` for integer weights). None when the weight is 0."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = np.isfinite(v) & (w > 0)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return None
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    i = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
    return float(v[order][min(i, v.size - 1)])


def slo_met(slo_ttft_s, slo_tpot_s, arr, first_t, finish_t, out) -> np.ndarray | None:
    """Which requests finished within the TTFT and TPOT objectives (s; a request of one
    token has no TPOT); None without an objective."""
    if slo_ttft_s is None and slo_tpot_s is None:
        return None
    ok = np.isfinite(first_t) & np.isfinite(finish_t)
    if slo_ttft_s is not None:
        ok &= (first_t - arr) <= slo_ttft_s
    if slo_tpot_s is not None:
        multi = out >= 2
        tpot = np.zeros(len(out))
        tpot[multi] = (finish_t[multi] - first_t[multi]) / (out[multi] - 1)
        ok &= ~multi | (tpot <= slo_tpot_s)
    return ok


def request_metrics(arr, admit_t, first_t, finish_t, out, rejected, cut, npre) -> dict:
    """Per-run metrics of the requests alone (seconds; NaN = never happened): counts,
    throughput, and TTFT / TPOT / queueing delay / end-to-end percentiles."""
    served = ~rejected
    completed = int(np.sum(np.isfinite(finish_t)))
    tokens = int(out[served].sum())
    t0 = float(arr[served].min()) if served.any() else 0.0
    t1 = float(np.nanmax(finish_t)) if completed else t0
    span = max(t1 - t0, 0.0)
    multi = np.isfinite(first_t) & (out >= 2)
    tpot = np.full(len(out), np.nan)
    tpot[multi] = (finish_t[multi] - first_t[multi]) / (out[multi] - 1)
    n_rej = int(rejected.sum())
    m = {
        "requests": int(len(out)),
        "requests_completed": completed,
        "requests_rejected": n_rej,
        "rejected_reasons": {"prompt_does_not_fit_the_context": n_rej} if n_rej else {},
        "requests_cut": int(cut.sum()),
        "output_tokens": tokens,
        "duration_s": span,
        "total_time_ns": span * 1e9,
        "tokens_per_s": tokens / span if span > 0 else None,
        "requests_per_s": completed / span if span > 0 else None,
        "preempted_requests": int(np.count_nonzero(npre)),
    }
    for name, x in (("ttft", first_t - arr), ("tpot", tpot), ("queue_delay", admit_t - arr),
                    ("e2e", finish_t - arr)):
        for q, v in percentiles(x).items():
            m[f"{name}_{q}_s"] = v
    return m


def latency_metrics(slo_ttft_s, slo_tpot_s, arr, first_t, finish_t, out, itl_s, itl_count,
                    span: float) -> dict:
    """Inter-token latency percentiles (``itl_p50_s``, ``itl_p90_s``, ``itl_p99_s``,
    ``itl_mean_s``; seconds, every token after a request's first counted once) and,
    with an SLO (``slo_ttft_s``, ``slo_tpot_s``; None: not constrained),
    ``slo_attainment`` (the share of all requests, rejected ones included, whose TTFT
    and TPOT met them; a request of one token has no TPOT) and ``goodput_rps`` (those
    requests per second of the run's ``span``). Null where not applicable."""
    m = {f"itl_{name}_s": weighted_percentile(itl_s, itl_count, q)
         for name, q in (("p50", 50), ("p90", 90), ("p99", 99))}
    tot = float(np.sum(itl_count))
    m["itl_mean_s"] = float(np.dot(itl_s, itl_count) / tot) if tot > 0 else None
    m["itl_tokens"] = int(tot)
    m["slo_ttft_s"], m["slo_tpot_s"] = slo_ttft_s, slo_tpot_s
    ok = slo_met(slo_ttft_s, slo_tpot_s, arr, first_t, finish_t, out)
    if ok is None:
        m["slo_attainment"] = m["goodput_rps"] = None
        return m
    met = int(np.count_nonzero(ok))
    m["slo_attainment"] = met / len(out) if len(out) else None
    m["goodput_rps"] = met / span if span > 0 else None
    return m


def energy_metrics(breakdown: dict | None, output_tokens: int) -> dict:
    """``energy_j`` (J, the run: the sum of ``breakdown``'s parts) and
    ``energy_per_output_token_j`` (J per output token served); None when the
    iteration tables price no energy (``breakdown`` None)."""
    if breakdown is None:
        return {"energy_j": None, "energy_per_output_token_j": None}
    total = float(sum(breakdown.values()))
    return {"energy_j": total,
            "energy_per_output_token_j": total / output_tokens if output_tokens else None}


class TokenGaps:
    """Inter-token latencies as groups: ``gap_s[i]`` seconds for ``count[i]`` tokens
    (every token after a request's first counted once), so that a decode window of many
    steps adds one or two groups, not one entry per token."""

    def __init__(self):
        self.gap_s: list[float] = []
        self.count: list[int] = []

    def add(self, gap_s: float, count: int) -> None:
        self.gap_s.append(gap_s)
        self.count.append(count)

    def since(self, last: np.ndarray, t: float) -> None:
        """Tokens emitted at ``t`` by requests whose previous tokens came at ``last``:
        their gaps, one group per distinct previous time."""
        if last.size == 0:
            return
        lo, hi = last.min(), last.max()
        if lo == hi:
            self.gap_s.append(t - float(lo))
            self.count.append(int(last.size))
            return
        vals, counts = np.unique(last, return_counts=True)
        self.gap_s.extend((t - vals).tolist())
        self.count.extend(counts.tolist())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap s, tokens) of the groups."""
        return (np.asarray(self.gap_s, dtype=np.float64),
                np.asarray(self.count, dtype=np.float64))

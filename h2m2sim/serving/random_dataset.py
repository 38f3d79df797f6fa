"""The random dataset of serving benchmarks: ``random:IN:OUT`` names requests of IN
prompt and OUT output tokens, as ``vllm bench serve --dataset-name random
--random-input-len IN --random-output-len OUT`` sends them.

``random:IN:OUT:R`` draws each length uniformly from ``[L (1 - R), L (1 + R)]`` (whole
tokens, at least 1) with the run's seed, as vLLM's ``--random-range-ratio R`` does; R =
0 (the default, as vLLM's) gives every request the same lengths. The prompts are random
tokens, so no two share a prefix (no prefix block hashes) and there is no text. There
are no arrival times: every request is ready at t = 0 (a closed loop,
``max_concurrency``, or a Poisson ``arrival_rate`` sends them). The number of requests is
``max_requests``, by default vLLM's ``--num-prompts`` default.
"""
from __future__ import annotations

import math
import re

import numpy as np

from h2m2sim.errors import ConfigError

__all__ = ["RANDOM_PREFIX", "DEFAULT_RANDOM_REQUESTS", "RANDOM_ARRIVALS", "is_random",
           "random_lengths"]

RANDOM_PREFIX = "random:"

#: Requests of a random dataset when max_requests is not given: ``vllm bench serve
#: --num-prompts``' default (vLLM 0.10, vllm/benchmarks/serve.py).
DEFAULT_RANDOM_REQUESTS = 1000

#: Longest prompt or output a random dataset may ask for (tokens).
MAX_RANDOM_TOKENS = 1 << 24

#: Most requests a random dataset may make (``max_concurrency``'s bound): each is held
#: in memory, so 10^9 of them would exhaust it before the run starts.
MAX_RANDOM_REQUESTS = 1 << 20

#: A length: plain decimal digits (no sign, spaces or digit separators, which ``int``
#: would take).
_DIGITS = re.compile(r"[0-9]+")


def is_random(name) -> bool:
    """Whether the trace name ``name`` is a random dataset."""
    return isinstance(name, str) and name.startswith(RANDOM_PREFIX)


def _parse(name: str) -> tuple[int, int, float]:
    """(IN, OUT, R) of ``random:IN:OUT[:R]``; a ConfigError naming it otherwise."""
    parts = name[len(RANDOM_PREFIX):].split(":")
    usage = "expected random:IN:OUT or random:IN:OUT:R (prompt and output tokens, " \
            "whole numbers >= 1; R a range ratio in [0, 1))"
    if len(parts) not in (2, 3):
        raise ConfigError(name, usage)
    if not all(_DIGITS.fullmatch(p) for p in parts[:2]):
        raise ConfigError(name, usage)
    try:
        lens = [int(p) for p in parts[:2]]
        ratio = float(parts[2]) if len(parts) == 3 else 0.0
    except ValueError:
        raise ConfigError(name, usage) from None
    if not all(1 <= n <= MAX_RANDOM_TOKENS for n in lens):
        raise ConfigError(name, f"lengths must be whole numbers in 1..{MAX_RANDOM_TOKENS}; "
                          + usage)
    if not (math.isfinite(ratio) and 0.0 <= ratio < 1.0):
        raise ConfigError(name, usage)
    return lens[0], lens[1], ratio


def _lengths(mean: int, ratio: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if ratio == 0.0:
        return np.full(n, mean, dtype=np.int64)
    lo = max(1, int(math.floor(mean * (1.0 - ratio))))
    hi = max(lo, int(math.ceil(mean * (1.0 + ratio))))
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


#: How a random dataset's requests arrive (the trace's arrival note).
RANDOM_ARRIVALS = "random dataset: every request ready at t = 0"


def random_lengths(name: str, max_requests: int | None = None, seed: int = 0
                   ) -> tuple[str, np.ndarray, np.ndarray]:
    """(label, prompt tokens, output tokens) of the random dataset ``name`` (module
    docstring): ``max_requests`` requests (default :data:`DEFAULT_RANDOM_REQUESTS`),
    lengths drawn with ``seed``."""
    prompt, output, ratio = _parse(name)
    n = DEFAULT_RANDOM_REQUESTS if max_requests is None else int(max_requests)
    if n <= 0:
        raise ConfigError("max_requests", f"must be > 0, got {n}")
    if n > MAX_RANDOM_REQUESTS:
        raise ConfigError("max_requests", f"a random dataset makes at most "
                          f"{MAX_RANDOM_REQUESTS} requests, got {n}")
    rng = np.random.default_rng([seed, 11])
    prompts = _lengths(prompt, ratio, n, rng)
    outputs = _lengths(output, ratio, n, rng)
    label = f"random-{prompt}-{output}" + (f"-r{ratio:g}" if ratio else "")
    return label, prompts, outputs

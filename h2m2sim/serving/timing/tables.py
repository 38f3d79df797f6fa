"""The grid the evaluator is sampled on and the interpolated tables the serving engine
reads (:class:`IterationTables`): seconds and joules per iteration."""
from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

from .interp import interp2, interp2_pair, interp3_pair

__all__ = ["TableGrid", "IterationTables"]


@dataclasses.dataclass(frozen=True)
class TableGrid:
    """Where the evaluator is sampled. ``batch`` points: powers of two up to and including
    ``max_batch``; token points: ``token_points`` values spaced geometrically from 1 to
    ``max_tokens`` (mean KV tokens per request for decode, mean prompt tokens for
    prefill, copied tokens for kv_copy)."""

    max_batch: int
    max_tokens: int
    token_points: int = 14
    error_samples: int = 12
    chunk_tokens: int | None = None     # chunked prefill's token budget (None: no mixed)
    #: KV tokens a replica's pool holds at most (None: no bound): points of more KV than
    #: that are reached by no serving state, and a simulating evaluator skips them
    kv_tokens: int | None = None
    #: tokens per request of a speculative verify step, k + 1 (None: no verify table)
    verify_tokens: int | None = None

    def batches(self) -> np.ndarray:
        b = [1]
        while b[-1] * 2 < self.max_batch:
            b.append(b[-1] * 2)
        if b[-1] != self.max_batch:
            b.append(self.max_batch)
        return np.asarray(b, dtype=np.float64)

    def tokens(self) -> np.ndarray:
        pts = np.unique(np.round(np.geomspace(1, max(2, self.max_tokens),
                                              max(2, self.token_points))))
        return pts.astype(np.float64)

    def reachable(self, extra: np.ndarray | float = 0.0, simulated: bool = True
                  ) -> np.ndarray:
        """[batch, token] mask of the points a serving state can reach: ``b`` requests
        of ``c`` KV tokens (plus ``extra`` tokens, e.g. a prefill chunk) fit in
        ``kv_tokens``. The two smallest token points always count, so that every batch
        row can be extended along the token axis (:func:`fill_unreachable`). For an
        evaluator that does not simulate (``simulated`` False) every point counts: its
        closed form is defined everywhere, while a simulation of a point no serving state
        reaches may not even fit the device."""
        b, c = self.batches(), self.tokens()
        if self.kv_tokens is None or not simulated:
            return np.ones((len(b), len(c)) + np.shape(extra), dtype=bool)
        m = np.multiply.outer(np.outer(b, c), np.ones(np.shape(extra))) + extra \
            <= self.kv_tokens
        m[:, :2] = True
        return m

    def chunks(self) -> np.ndarray:
        """Chunk-token points of the mixed table: ``token_points`` values spaced
        geometrically from 1 to ``chunk_tokens``."""
        pts = np.unique(np.round(np.geomspace(1, max(2, self.chunk_tokens or 2),
                                              max(2, self.token_points))))
        return pts.astype(np.float64)


class IterationTables:
    """Interpolated iteration times and energies; the object the serving loop uses.

    ``decode_step_s(batch, context_tokens, kv_layout)``, ``prefill_s(prompt_tokens)`` and
    ``kv_copy_s(tokens)`` return seconds; ``decode_step_j``, ``prefill_j`` and
    ``kv_copy_j`` the joules of the same iterations, from energy tables on the same grid
    interpolated the same way (NaN throughout when the evaluator does not price energy:
    ``prices_energy`` is False). ``errors`` holds the measured relative interpolation
    error of the times per (phase, layout): max, mean and p95 over random points with
    *heterogeneous* per-request lengths, so it includes the error of keying a batch by its
    mean length; ``energy_errors`` the same for the energies, at the same points.
    ``label`` and ``cycle_level`` come from the evaluator."""

    def __init__(self, arrays: Mapping[str, np.ndarray], label: str, cycle_level: bool):
        self.batch_grid = np.asarray(arrays["batch_grid"], dtype=np.float64)
        self.token_grid = np.asarray(arrays["token_grid"], dtype=np.float64)
        # the arrays name layouts as text (they are stored in .npz files)
        names = [str(x) for x in np.asarray(arrays["layouts"]).tolist()]
        self.layouts = [KVLayout.parse(x) for x in names]

        def table(key):
            return np.ascontiguousarray(arrays[key], dtype=np.float64)

        self.decode = {KVLayout.parse(x): table(f"decode[{x}]") for x in names}
        self.decode_energy = {KVLayout.parse(x): table(f"decode_energy[{x}]") for x in names}
        self.prefill = table("prefill")
        self.prefill_energy = table("prefill_energy")
        self.copy = table("kv_copy")[None, :]
        self.copy_energy = table("kv_copy_energy")[None, :]
        self.prices_energy = bool(np.all(np.isfinite(self.prefill_energy)))
        self._one = np.zeros(1)
        self.chunk_grid = None
        self.mixed, self.mixed_energy = {}, {}
        if "chunk_grid" in arrays:
            self.chunk_grid = np.asarray(arrays["chunk_grid"], dtype=np.float64)
            self.mixed = {KVLayout.parse(x): table(f"mixed[{x}]") for x in names}
            self.mixed_energy = {KVLayout.parse(x): table(f"mixed_energy[{x}]")
                                 for x in names}
        self.verify_tokens = int(arrays["verify_tokens"]) if "verify_tokens" in arrays else 0
        self.verify, self.verify_energy = {}, {}
        for x in names:
            if f"verify[{x}]" in arrays:
                self.verify[KVLayout.parse(x)] = table(f"verify[{x}]")
                self.verify_energy[KVLayout.parse(x)] = table(f"verify_energy[{x}]")
        self.errors = _errors(arrays, "err[")
        self.energy_errors = _errors(arrays, "eerr[")
        self.label, self.cycle_level = label, bool(cycle_level)

    def table(self, kv_layout: KVLayout) -> np.ndarray:
        """Decode step times (s) of ``kv_layout`` over (batch grid, token grid)."""
        return self.decode[self._known(kv_layout)]

    def energy_table(self, kv_layout: KVLayout) -> np.ndarray:
        """Decode step energies (J) of ``kv_layout``, on the grid of :meth:`table`."""
        return self.decode_energy[self._known(kv_layout)]

    def _known(self, kv_layout: KVLayout) -> KVLayout:
        if kv_layout not in self.decode:
            raise ConfigError("kv_layout", f"no decode table for layout '{kv_layout}'; built "
                              f"for: {', '.join(map(str, self.layouts))}")
        return kv_layout

    def _decode(self, tab, batch: int, context_tokens) -> float:
        total = float(np.asarray(context_tokens, dtype=np.float64).sum())
        return float(interp2(self.batch_grid, self.token_grid, tab, float(batch),
                             total / max(batch, 1)))

    def decode_step_s(self, batch: int, context_tokens, kv_layout: KVLayout) -> float:
        """One decode step; ``context_tokens`` is the per-request array or their total."""
        return self._decode(self.table(kv_layout), batch, context_tokens)

    def decode_step_j(self, batch: int, context_tokens, kv_layout: KVLayout) -> float:
        """Joules of the decode step of :meth:`decode_step_s`."""
        return self._decode(self.energy_table(kv_layout), batch, context_tokens)

    def _prefill(self, tab, prompt_tokens) -> float:
        p = np.asarray(prompt_tokens, dtype=np.float64)
        if p.size == 0:
            return 0.0
        return float(interp2(self.batch_grid, self.token_grid, tab, float(p.size),
                             float(p.mean())))

    def prefill_s(self, prompt_tokens) -> float:
        return self._prefill(self.prefill, prompt_tokens)

    def prefill_cost(self, prompt_tokens) -> tuple[float, float]:
        """(seconds, joules) of one prefill iteration: :meth:`prefill_s` and
        :meth:`prefill_j` with one interpolation (the loop's per-prefill price)."""
        p = np.asarray(prompt_tokens, dtype=np.float64)
        if p.size == 0:
            return 0.0, 0.0
        t, e = interp2_pair(self.batch_grid, self.token_grid, self.prefill,
                            self.prefill_energy, float(p.size), float(p.mean()))
        return float(t), float(e)

    def prefill_j(self, prompt_tokens) -> float:
        """Joules of the prefill iteration of :meth:`prefill_s`."""
        return self._prefill(self.prefill_energy, prompt_tokens)

    @property
    def max_chunk_tokens(self) -> int:
        """The largest chunk budget the mixed tables were sampled for (0: none)."""
        return 0 if self.chunk_grid is None else int(self.chunk_grid[-1])

    def mixed_tables(self, kv_layout: KVLayout) -> tuple[np.ndarray, np.ndarray]:
        """(times s, energies J) of mixed iterations of ``kv_layout`` over (batch grid,
        token grid, chunk grid)."""
        if kv_layout not in self.mixed:
            raise ConfigError("serving.chunked_prefill", "the iteration tables were built "
                              f"without mixed iterations for layout '{kv_layout}'")
        return self.mixed[kv_layout], self.mixed_energy[kv_layout]

    def mixed_cost(self, batch: int, context_sum: float, chunk_tokens: float,
                   kv_layout: KVLayout) -> tuple[float, float]:
        """(seconds, joules) of one mixed iteration: ``batch`` decode requests holding
        ``context_sum`` KV tokens together, and prefill chunks of ``chunk_tokens`` tokens
        in all."""
        tab, etab = self.mixed_tables(kv_layout)
        t, e = interp3_pair(self.batch_grid, self.token_grid, self.chunk_grid, tab, etab,
                            float(batch), context_sum / max(batch, 1), float(chunk_tokens))
        return float(t), float(e)

    def verify_tables(self, kv_layout: KVLayout) -> tuple[np.ndarray, np.ndarray]:
        """(times s, energies J) of speculative verify steps of ``kv_layout`` (each
        request scoring :attr:`verify_tokens` positions) over (batch grid, token grid)."""
        if kv_layout not in self.verify:
            raise ConfigError("serving.speculative", "the iteration tables were built "
                              f"without verify steps for layout '{kv_layout}'")
        return self.verify[kv_layout], self.verify_energy[kv_layout]

    def kv_copy_s(self, tokens: int) -> float:
        return float(interp2(self._one, self.token_grid, self.copy, 0.0, float(tokens)))

    def kv_copy_j(self, tokens: int) -> float:
        """Joules of the copy of :meth:`kv_copy_s`."""
        return float(interp2(self._one, self.token_grid, self.copy_energy, 0.0,
                             float(tokens)))

    def error_summary(self) -> dict:
        return {k: dict(v) for k, v in self.errors.items()}

    def energy_error_summary(self) -> dict:
        return {k: dict(v) for k, v in self.energy_errors.items()}


def _errors(arrays: Mapping[str, np.ndarray], prefix: str) -> dict:
    """{name: {max, mean, p95}} of the arrays named ``<prefix>name]``."""
    out = {}
    for key in arrays:
        if key.startswith(prefix):
            e = np.asarray(arrays[key], dtype=float)
            out[key[len(prefix):-1]] = {"max": float(e[0]), "mean": float(e[1]),
                                        "p95": float(e[2])}
    return out

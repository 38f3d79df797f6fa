"""Energy of serving iterations, priced the way a decode iteration's is
(:mod:`h2m2sim.decode.energy`, :mod:`h2m2sim.npu.energy`).

A serving replica is ``cards`` identical cards running the per-card shard of the model in
lock step (tensor parallel, :func:`~h2m2sim.serving.timing.cycle_eval.shard_model`). One
iteration's energy is that of one card times ``cards``; one card's is
:func:`~h2m2sim.decode.energy.iteration_energy` of its sides' activities over the
iteration time: the serving side's activity, its DRAM idle for the rest of the iteration,
every other side of the system idle throughout, and the card's all-reduce bytes priced
per bit at the system's ``interconnect.energy_pj_per_bit`` (the card link is not
modelled separately: an assumption, stated with the results).

:class:`EstimateEnergy` is the analytic (``estimate``-fidelity) source: the counts of the
iteration's kernel graph, the DRAM as one sequential stream of its bytes
(:func:`~h2m2sim.decode.energy.estimate_energy`, the same function a decode iteration at
``estimate`` uses). The cycle-level evaluator prices the activities of its own kernel
runs with :func:`card_energy_j`.

Units: J for energies, ns for times inside, bytes.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.decode.energy import IterationEnergy, estimate_energy, iteration_energy
from h2m2sim.npu.energy import Activity, stream_energy

__all__ = ["EstimateEnergy", "card_energy_j", "allreduce_link_bytes", "energy_key"]


def allreduce_link_bytes(cards: int, nbytes: float) -> float:
    """Bytes one card sends in a ring all-reduce of ``nbytes``: 2 (c-1) steps of
    ``nbytes / c`` (the schedule the time model prices)."""
    return 0.0 if cards <= 1 else 2 * (cards - 1) * nbytes / cards


def card_energy_j(system, side: str, act: Activity, busy_ns: float, iteration_ns: float,
                  link_bytes: float, batch: int) -> float:
    """One card's energy (J) over an iteration of ``iteration_ns``: ``act`` on ``side``
    for ``busy_ns`` (its DRAM idle for the rest), the other sides idle, ``link_bytes``
    over the link."""
    activity: dict[str, Activity] = {s: Activity() for s in system.side_names}
    activity[side] = act
    e = IterationEnergy(activity, {side: busy_ns}, link_bytes)
    return float(iteration_energy(system, e, iteration_ns, max(batch, 1),
                                  "estimate")["energy_j"])


def energy_key(system, model, cards: int) -> str:
    """Digest of everything the energy prices of ``system`` depend on (sides with their
    chips and DRAM, MMU, interconnect), the model and the card count."""
    blob = json.dumps({"sides": [to_dict(s) for s in system.sides],
                       "mmu": to_dict(system.mmu), "link": to_dict(system.interconnect),
                       "model": to_dict(model), "cards": int(cards)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, eq=False)
class EstimateEnergy:
    """Analytic energy of serving iterations on ``side`` of ``system``, ``cards`` cards
    tensor parallel each running ``shard``, the per-card model (module docstring).
    Decode and prefill: the shard's decoder-layer kernels (the LM head and embeddings
    are left out, as at ``estimate`` in a decode iteration); KV copy: a sequential read
    and write of the card's share of the KV bytes. The model's dtype throughout."""

    system: Any
    side: str
    shard: Any
    cards: int = 1

    def cache_key(self) -> Mapping[str, Any]:
        return {"estimate_energy": self._key[0], "side": self.side}

    def iteration_j(self, phase: str, batch: int, context_tokens_per_request,
                    time_s: float) -> float:
        """Joules of one ``phase`` iteration lasting ``time_s`` seconds, all cards."""
        shard = self.shard
        ctx = np.maximum(np.round(np.asarray(context_tokens_per_request, dtype=np.float64)),
                         1).astype(np.int64).ravel()
        if phase == "kv_copy":
            nbytes = 2.0 * float(ctx.sum()) * shard.kv_bytes_per_token_per_layer() \
                * int(shard.layers)
            spec = self.system.side(self.side).dram_spec
            act = stream_energy(spec, nbytes, 0.0, 0.5)
            return self.cards * card_energy_j(self.system, self.side, act, 0.0,
                                              time_s * 1e9, 0.0, 1)
        act = self._work(phase, int(batch), ctx)
        rows = int(ctx.sum()) if phase == "prefill" else int(batch)
        ar = 2 * int(shard.layers) * allreduce_link_bytes(
            self.cards, rows * int(shard.hidden) * shard.dtype_bytes())
        return self.cards * card_energy_j(self.system, self.side, act, 0.0, time_s * 1e9,
                                          ar, int(batch))

    def _work(self, phase: str, batch: int, ctx: np.ndarray) -> Activity:
        """The serving side's activity in one ``phase`` iteration of ``batch`` requests
        with contexts ``ctx`` (tokens, int64): its kernel graph's counts, which do not
        depend on the iteration's time. Kept in this process for each shape (of this
        system, side, model and cards): building the graph is most of a table's cost, and
        tables ask for the same shape again (each layout's table, a mixed step's two
        affine parts, another evaluator of the same system)."""
        key = (self._key, phase, batch, ctx.tobytes())
        with _WORK_LOCK:
            hit = _WORK.get(key)
        if hit is not None:
            return hit
        act = estimate_energy(self.system, self.shard, batch, tuple(ctx.tolist()), {},
                              (self.side,), None, phase=phase).activity[self.side]
        with _WORK_LOCK:
            if len(_WORK) >= MAX_SHAPES:    # a long-lived process: start over
                _WORK.clear()
            _WORK[key] = act
        return act

    @functools.cached_property
    def _key(self) -> tuple[str, str]:
        """What the activities depend on (:func:`energy_key` and the side), worked out
        once: evaluators of one system and model (each table's, each sweep point's)
        share their shapes' activities."""
        return energy_key(self.system, self.shard, self.cards), self.side


#: Iteration shapes whose activity this process keeps (about 200 bytes each plus 8 per
#: request): more than the tables of the largest grid ask for.
MAX_SHAPES = 1 << 16
#: (EstimateEnergy._key, phase, batch, contexts as bytes) -> the serving side's Activity
_WORK: dict[tuple, Activity] = {}
_WORK_LOCK = threading.Lock()

"""Serving iteration times on a system of several memory sides (H2M2's asymmetric HBM +
LPDDR device; two HBM sides such as ``hbm8``): each decode step is priced the way
``h2m2sim run`` prices a decode iteration of that batch and context
(:func:`h2m2sim.decode.job.simulate`), the mapper of the run's ``policy.mapper``
deciding anew for each table point which heads and units live on which side (H2M2's
dynamic mapping: Hwang et al., "Hardware-based Heterogeneous Memory Management for Large
Language Model Inference", arXiv:2504.14893, 2025, Section 4.3; the migrations between
two mappings are not priced), with both sides' chips running at once.

* ``fidelity: estimate``: the mapper's roofline per side and sublayer (fast: a few ms a
  point), the same numbers as ``h2m2sim run --set simulation.fidelity=estimate``;
  ``sampled`` / ``cycle``: the NPU chip model and DRAM engine on both sides (seconds a
  point; the token axis is coarsened as for one side, :data:`.cycle_eval.TABLE_TOKEN_POINTS`).
* The KV is laid out as the system's ``mmu.kv_layout`` says (per-request extents); the
  allocator's layout (paged blocks) changes capacity and admission, not the step's DRAM
  pattern, and the label says so.
* Prefill and KV copies run on the first side's chip alone, priced by ``prefill`` (as
  ``h2m2sim run`` prices a prefill step: :func:`.prefill_job.prefill_evaluator`); their
  energy, when ``prefill`` prices none, is the first side's analytic estimate
  (:class:`.energy.EstimateEnergy`).
* ``cards`` > 1: each card runs its tensor-parallel share (:func:`h2m2sim.model.shard.
  shard_model`) and the cards join two all-reduces per layer, priced by the system's
  collective (``system.collective``); energy is each card's iteration energy times the
  cards (the all-reduce's wire energy is not counted).

Units: seconds, joules, tokens.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.cache import code_digest
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.compute.llm_roofline import RooflineEvaluator
from h2m2sim.compute.roofline import RooflineDevice
from h2m2sim.decode.job import ALLREDUCES_PER_LAYER, iteration_options, simulate
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import MAPPERS
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.model.shard import shard_model
from h2m2sim.system import resolve_system

from .cycle_eval import TABLE_TOKEN_POINTS, CycleEvaluator
from ..energy import EstimateEnergy

__all__ = ["MappedEvaluator", "maps_sides", "mapped_evaluator", "first_side_evaluator"]


def maps_sides(system) -> bool:
    """True when serving on ``system`` maps the model over several memory sides (an NPU
    system of two or more sides, not a GPU)."""
    return len(system.sides) > 1 and all(s.gpu is None for s in system.sides)


class MappedEvaluator(PointEvaluator):
    """Point evaluator of an NPU system (module docstring; serving maps a system of
    several sides with it, and a study may price a one-sided system the same way, as
    ``h2m2sim run`` prices its decode steps, to compare like with like). ``model``: the
    whole model (sharded over ``cards`` here); ``mapper``: a name of
    :data:`h2m2sim.mapping.MAPPERS`; ``mapper_params``: the decode-iteration options of
    ``policy.mapper_params``; ``prefill``: the evaluator of prefill and KV-copy steps."""

    def __init__(self, model, system, *, prefill: PointEvaluator, mapper: str = "greedy",
                 mapper_params: dict | None = None, cards: int = 1,
                 fidelity: str = "estimate"):
        self.system = resolve_system(system, "system")
        if any(s.gpu is not None for s in self.system.sides):
            raise ConfigError("system", f"{self.system.name} is a GPU: its steps are priced "
                              "by the GPU kernel model, not by an NPU mapping")
        MAPPERS.get(mapper)
        iteration_options(mapper_params)              # refuses what is not an option
        if fidelity not in ("estimate", "sampled", "cycle"):
            raise ConfigError("simulation.fidelity", f"unknown fidelity {fidelity!r}")
        self.model, self.cards = model, int(cards)
        self.shard = shard_model(model, self.cards)
        # the decode job refuses a multi-card system: it prices one card's share
        self.card = dataclasses.replace(self.system, cards=1)
        self.mapper, self.params = mapper, dict(mapper_params or {})
        self.fidelity, self.prefill = fidelity, prefill
        # what prices the first side's steps when ``prefill`` prices their time only
        self.energy = EstimateEnergy(self.card, self.system.side_names[0], self.shard,
                                     self.cards)
        self.cycle_level = fidelity != "estimate"
        self._memo: dict = {}
        sides = "+".join(self.system.side_names)
        self.label = (f"decode: {mapper} mapping over sides {sides} of {self.system.name} "
                      f"({fidelity}, KV as mmu.kv_layout lays it){self._cards_note()}; "
                      f"prefill and KV copies: {prefill.label}")

    def _cards_note(self) -> str:
        return f", {self.cards} cards tensor parallel" if self.cards > 1 else ""

    @property
    def needs_fit(self) -> bool:
        """Every point is a mapping decision, which refuses a footprint the sides cannot
        hold: the tables price only the points a serving state reaches."""
        return True

    def cache_key(self) -> Any:
        blob = json.dumps({"sides": [to_dict(s) for s in self.system.sides],
                           "mmu": to_dict(self.system.mmu),
                           "link": to_dict(self.system.interconnect),
                           "collective": to_dict(self.system.collective)},
                          sort_keys=True, default=str)
        return {"mapped": {"system": hashlib.sha256(blob.encode()).hexdigest(),
                           "shard": to_dict(self.shard), "cards": self.cards,
                           "mapper": self.mapper, "params": self.params,
                           "fidelity": self.fidelity, "prefill": self.prefill.cache_key()}}

    def cache_salt(self) -> str:
        return code_digest("dram_models", "h2m2sim.npu", "h2m2sim.memory", "h2m2sim.model",
                           "h2m2sim.decode", "h2m2sim.mapping", "h2m2sim.compute",
                           "h2m2sim.serving.energy", "h2m2sim.serving.timing")

    def table_grid(self, grid):
        if not self.cycle_level:
            return grid
        return dataclasses.replace(grid, token_points=min(grid.token_points,
                                                          TABLE_TOKEN_POINTS))

    def evaluate(self, phase, batch, context_tokens_per_request, kv_layout) -> float:
        return self.cost(phase, batch, context_tokens_per_request, kv_layout).time_s

    def decode_metrics(self, batch: int, ctx: np.ndarray) -> dict:
        """The decode iteration's metrics (:func:`h2m2sim.decode.job.simulate`) of one
        card: ``batch`` requests holding ``ctx`` KV tokens each."""
        lens = tuple(int(max(round(float(c)), 1)) for c in ctx)
        key = (int(batch), lens)
        if key not in self._memo:      # the layouts' tables share their points
            self._memo[key] = simulate(self.card, self.shard, int(batch), lens, self.mapper,
                                       self.params, fidelity=self.fidelity)
        return self._memo[key]

    def cost(self, phase, batch, context_tokens_per_request, kv_layout: KVLayout
             ) -> PointCost:
        if phase != "decode":
            c = self.prefill.cost(phase, batch, context_tokens_per_request, kv_layout)
            if np.isfinite(c.energy_j):
                return c
            return PointCost(c.time_s, self.energy.iteration_j(
                phase, batch, context_tokens_per_request, c.time_s))
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64).ravel()
        if int(batch) < 1 or ctx.size != int(batch):
            raise ConfigError("batch", f"needs {batch} context lengths, got {ctx.size}")
        m = self.decode_metrics(int(batch), ctx)
        row = int(self.shard.hidden) * self.shard.dtype_bytes()
        ar_ns = ALLREDUCES_PER_LAYER * int(self.shard.layers) * \
            self.system.collective.allreduce_over(int(batch) * row, self.cards)
        return PointCost((float(m["iteration_time_ns"]) + ar_ns) * 1e-9,
                         self.cards * float(m["energy_j"]))


def first_side_evaluator(model, system, cards: int, fidelity: str, *, seed: int = 0,
                         cache: bool = True, cache_dir=None) -> PointEvaluator:
    """The evaluator of steps run on ``system``'s first side alone over ``cards`` cards
    (prefill, KV copies): its chip's roofline over its engine-measured DRAM at
    ``estimate``, the NPU chip model and DRAM engine otherwise."""
    if fidelity == "estimate":
        device = RooflineDevice(system, system.side_names[0], cache=cache,
                                cache_dir=cache_dir)
        return RooflineEvaluator(model, model.dtype, device=device, cards=cards)
    return CycleEvaluator(model, system, cards=cards, fidelity=fidelity, seed=seed,
                          cache=cache, cache_dir=cache_dir)


def mapped_evaluator(model, device, cfg, *, mapper: str = "greedy",
                     mapper_params: dict | None = None, fidelity: str = "estimate",
                     seed: int = 0, cache: bool = True, cache_dir=None) -> MappedEvaluator:
    """The ``"mapped"`` evaluator of a serving replica: ``device.system``'s sides mapped
    by ``mapper`` over ``device.devices`` cards (``cfg``, the serving configuration, is
    not needed: the model carries the run's KV dtype)."""
    first = first_side_evaluator(model, device.system, device.devices, fidelity, seed=seed,
                                 cache=cache, cache_dir=cache_dir)
    return MappedEvaluator(model, device.system, prefill=first, mapper=mapper,
                           mapper_params=mapper_params, cards=device.devices,
                           fidelity=fidelity)

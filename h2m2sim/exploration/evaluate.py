"""Evaluating one design: run its configuration, price it, keep the metrics a study reads.

:func:`evaluate` is what a worker runs (in this process, a local pool or on Dask); it
never raises for a design the simulator refuses, because an invalid design is a finding
of the search, recorded with its reason. :class:`EvaluationCache` keeps every evaluation
in the study folder by configuration hash, so a design sampled twice, or a study
resumed, runs nothing again.
"""
from __future__ import annotations

import json
import logging
import math
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dram_models.console import inner_progress_off
from h2m2sim import runner
from h2m2sim.config import RunConfig
from h2m2sim.errors import SimError
from h2m2sim.exploration.cost import CostModel, design_metrics
from h2m2sim.store import atomic_write_json

log = logging.getLogger(__name__)

__all__ = ["Design", "evaluate", "EvaluationCache", "scalar_metrics"]


@dataclass(frozen=True)
class Design:
    """What a worker needs to evaluate a design: its resolved configuration (hash
    ``key``) and the cost model that prices it."""
    key: str
    config: RunConfig
    cost: CostModel


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite-or-not real-number metrics of a run (the columns a study can read)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def evaluate(design: Design, _job: Any = None) -> dict[str, Any]:
    """Run and price ``design``: ``{"metrics", "error", "timing"}``. A design the
    simulator refuses (a :class:`SimError`: it does not fit, a combination is refused)
    has ``error`` set to the reason; so does one that meets an internal error, with
    ``internal`` True, logged with its traceback, so that one bad design cannot stop a
    study of hundreds."""
    t0 = time.perf_counter()
    try:
        with inner_progress_off():
            res = runner.run(design.config)
        metrics = scalar_metrics(res.metrics)
        metrics.update(design_metrics(design.config, res.metrics, design.cost))
    except SimError as err:
        return _failed(str(err), t0)
    except Exception as err:  # noqa: BLE001 - recorded; see the docstring
        log.warning("internal error evaluating design %s:\n%s", design.key[:12],
                    traceback.format_exc())
        return {**_failed(f"internal error: {type(err).__name__}: {err}", t0),
                "internal": True}
    return {"metrics": metrics, "error": None,
            "timing": {"wall_s": time.perf_counter() - t0}}


def _failed(reason: str, t0: float) -> dict[str, Any]:
    return {"metrics": {}, "error": reason, "timing": {"wall_s": time.perf_counter() - t0}}


class EvaluationCache:
    """``FOLDER/<config hash>.json``: one evaluation per file, written atomically."""

    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored evaluation of ``key``, or None (also for an unreadable file,
        which is then evaluated again)."""
        try:
            rec = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict) or not isinstance(rec.get("metrics"), dict):
            return None
        rec["metrics"] = {k: (math.nan if v is None else v)
                          for k, v in rec["metrics"].items()}
        return rec

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        if record.get("internal"):
            return      # a bug may be fixed: evaluate it again next time
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path(key), dict(record))

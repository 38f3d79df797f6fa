"""A serving configuration completed by its engine (the configuration loader's step for
``workload.serving``): the engine named (the system's default when the configuration
names none, :func:`~.engine_profile.default_engine`) and its defaults in the keys the
configuration leaves out. The engine's chunked prefill gives way to a feature the run
uses that is not modelled with it (:mod:`.features`) and to a system of several memory
sides, whose mapped evaluator prices no mixed step; asked for, the same combination is
refused as before.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from h2m2sim.errors import ConfigError

from .config import resolve_serving
from .engine_profile import default_engine, load_engine
from .features import Setup, check
from .resolve import kv_window, with_model_context

__all__ = ["with_engine_defaults", "DEFAULTED"]

#: Serving keys an engine's defaults fill (fields of
#: :class:`~.engine_profile.EngineDefaults` of the same names).
DEFAULTED = ("max_batch", "chunked_prefill", "max_num_batched_tokens", "max_prefill_tokens",
             "memory_fraction")


def with_engine_defaults(raw: Mapping[str, Any], system, allocator, model, key: str
                         ) -> dict[str, Any]:
    """``raw`` (a ``workload.serving`` mapping) with ``engine`` named and the engine's
    defaults in the keys it leaves out (module docstring); ``allocator`` is the run's
    allocator class, ``model`` its model."""
    resolve_serving(raw, key)          # its own mistakes first, as given
    out = dict(raw)
    name = out.get("engine") or default_engine(system)
    out["engine"] = name
    profile = load_engine(name, f"{key}.engine" if key else "serving.engine")
    for k in DEFAULTED:
        if k not in out:
            out[k] = getattr(profile.defaults, k)
    if "chunked_prefill" not in raw and out["chunked_prefill"] and _maps_sides(system):
        out["chunked_prefill"] = False      # its evaluator prices no mixed step
    if "chunked_prefill" not in raw and out["chunked_prefill"]:
        # the run's features, resolved without chunked prefill (so that a mistake in
        # them is reported as such), then checked with it
        base = dataclasses.replace(resolve_serving({**out, "chunked_prefill": False}, key),
                                   chunked_prefill=True)
        setup = Setup(base, allocator, past_window=_past_window(base, model))
        try:
            check(setup, only={"chunked"})
        except ConfigError:
            out["chunked_prefill"] = False
    return out


def _maps_sides(system) -> bool:
    """Whether serving maps the model over several memory sides of ``system`` (an NPU
    system of two or more sides), whose evaluator cannot price a mixed step."""
    from .timing.mapped_eval import maps_sides
    return system is not None and maps_sides(system)


def _past_window(cfg, model) -> bool | None:
    """Whether a sliding-window model is served past its window (None: no model)."""
    if model is None:
        return None
    return kv_window(with_model_context(cfg, model), model) is not None

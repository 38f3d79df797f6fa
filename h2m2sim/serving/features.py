"""Which serving features combine: one table (:data:`RULES`) that the configuration
loader (:func:`check_config`), the run's checks when a configuration is loaded and in
:func:`~.run.serve` (:func:`check`) and the engine builder (:func:`check_engine`) all
read, and that the configuration reference prints (:func:`table_markdown`).

A feature (:data:`FEATURES`) is named by the configuration key that turns it on and is
on or off for a :class:`Setup`: the serving configuration and, where known, the
allocator, the replicas and how the model is served. A rule says that two features are
not modelled together, or that one needs the other; a refusal is one line naming both
keys and why.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from h2m2sim.errors import ConfigError

__all__ = ["Setup", "Feature", "FEATURES", "RULES", "check", "check_config",
           "check_engine", "table_markdown"]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a serving run combines: its configuration (``cfg``, a ServingConfig) and,
    where known (None: not yet), its allocator's class, its replicas, whether a
    sliding-window model is served past its window, and whether the engine is given a
    speculation and a lower KV tier (an engine built from objects; None: as ``cfg``
    says)."""

    cfg: object
    allocator: type | None = None
    replicas: int | None = None
    past_window: bool | None = None
    speculating: bool | None = None
    tier: bool | None = None


class Feature(NamedTuple):
    """A serving feature: the configuration key that turns it on, what it is, when it is
    on (None: not known for this setup)."""

    key: str
    label: str
    on: Callable[[Setup], bool | None]


def _allocator(flags: tuple[str, ...]) -> Callable[[Setup], bool | None]:
    return lambda s: None if s.allocator is None else any(
        getattr(s.allocator, f) for f in flags)


def _given(s: Setup, attr: str, from_cfg: bool) -> bool:
    own = getattr(s, attr)
    return from_cfg if own is None else own


FEATURES: dict[str, Feature] = {
    "chunked": Feature("serving.chunked_prefill", "chunked prefill",
                       lambda s: bool(s.cfg.chunked_prefill)),
    "speculative": Feature("serving.speculative", "speculative decoding",
                           lambda s: _given(s, "speculating", s.cfg.speculative is not None)),
    "pools": Feature("serving.disaggregate", "disaggregated prefill and decode pools",
                     lambda s: s.cfg.pools_apart),
    "split": Feature("serving.disaggregate", "pools split from one system's cards",
                     lambda s: s.cfg.disaggregate is not None),
    "prefill_system": Feature("serving.prefill_system", "the prefill pool's system",
                              lambda s: s.cfg.prefill_system is not None),
    "decode_system": Feature("serving.decode_system", "the decode pool's system",
                             lambda s: s.cfg.decode_system is not None),
    "pool_replicas": Feature("serving.pool_replicas", "replicas per pool",
                             lambda s: tuple(s.cfg.pool_replicas) != (1, 1)),
    "streaming": Feature("serving.kv_streaming", "KV streamed layer by layer",
                         lambda s: bool(s.cfg.kv_streaming)),
    "prefix": Feature("serving.prefix_caching", "prefix caching",
                      lambda s: bool(s.cfg.prefix_caching)),
    "tier": Feature("serving.kv_offload", "a lower KV tier",
                    lambda s: _given(s, "tier", s.cfg.kv_offload is not None)),
    "tier_capacity": Feature("serving.kv_offload_capacity_bytes", "its capacity",
                             lambda s: s.cfg.kv_offload_capacity_bytes is not None),
    "tier_policy": Feature("serving.kv_offload_policy", "the tier's eviction order",
                           lambda s: s.cfg.kv_offload_policy is not None),
    "link": Feature("serving.kv_link", "the link between the pools",
                    lambda s: s.cfg.kv_link is not None),
    "deployment": Feature("serving.deployment", "replicas or tensor_parallel of the whole "
                          "system", lambda s: s.cfg.deployment.replicas is not None
                          or s.cfg.deployment.tensor_parallel is not None),
    "cold": Feature("serving.kv_offload_running", "cold KV of running requests",
                    lambda s: bool(s.cfg.kv_offload_running)),
    "recompute": Feature("serving.preemption", "recompute preemption",
                         lambda s: s.cfg.preemption == "recompute"),
    "predictor": Feature("serving.predictor", "a length predictor",
                         lambda s: s.cfg.predictor is not None),
    "ellm": Feature("policy.allocator", "an allocator that manages activation memory "
                    "(ellm)", _allocator(("manages_activations",))),
    "history": Feature("policy.allocator", "an allocator that learns lengths or uses "
                       "predictions (odma)", _allocator(("learns_lengths", "uses_prediction"))),
    "replicas": Feature("serving.deployment.replicas", "several replicas",
                        lambda s: None if s.replicas is None else s.replicas > 1),
    "past_window": Feature("serving.max_context_tokens", "a sliding-window model served "
                           "past its window", lambda s: s.past_window),
}


class Rule(NamedTuple):
    """``first`` and ``second`` (FEATURES names) are not modelled together (``needs``
    False), or ``first`` needs ``second`` (``needs`` True); ``why``."""

    first: str
    second: str
    why: str
    needs: bool = False


_NOT_YET = "not modelled together yet"

#: Every rule of combination (module docstring).
RULES: tuple[Rule, ...] = (
    Rule("tier_capacity", "tier", "it is the capacity of the tier kv_offload names", True),
    Rule("tier", "tier_capacity", "the tier needs its capacity", True),
    Rule("tier", "prefix", "the tier holds the prefix blocks the cache evicts", True),
    Rule("tier_policy", "tier", "it orders the blocks of a lower tier", True),
    Rule("cold", "tier", "cold KV is held in the lower tier", True),
    Rule("cold", "chunked", _NOT_YET),
    Rule("cold", "speculative", _NOT_YET),
    Rule("prefill_system", "decode_system", "prefill_system and decode_system come together",
         True),
    Rule("decode_system", "prefill_system", "prefill_system and decode_system come together",
         True),
    Rule("prefill_system", "split", "with prefill_system and decode_system each pool is "
         "its whole system: leave disaggregate unset"),
    Rule("pool_replicas", "pools", "it sets the replicas of disaggregated pools", True),
    Rule("streaming", "pools", "it streams the KV from the prefill to the decode pool",
         True),
    Rule("link", "pools", "the KV crosses it from the prefill to the decode pool", True),
    Rule("deployment", "pools", "each pool's replicas are pool_replicas, each over its "
         "pool's cards / replicas: leave deployment.replicas and tensor_parallel unset"),
    Rule("pools", "speculative", _NOT_YET),
    Rule("pools", "chunked", _NOT_YET),
    Rule("speculative", "chunked", _NOT_YET + ": use one of them"),
    Rule("pools", "history", "a decode pool's requests bring no length history: use an "
         "allocator that needs none (paged, static)"),
    Rule("pools", "predictor", "the pools are modelled without predicted lengths: leave "
         "the predictor unset, with an allocator and scheduler that need none"),
    Rule("pools", "ellm", "eLLM's scheduling prefills and decodes in one engine"),
    Rule("ellm", "chunked", "eLLM's Algorithm 1 plans whole prefills; serve its "
         "chunked-prefill baseline with a paged allocator"),
    Rule("ellm", "speculative", "it manages activation memory"),
    Rule("ellm", "tier", "it offloads KV its own way"),
    Rule("ellm", "replicas", "it runs as one replica"),
    Rule("ellm", "past_window", "its pool is not sized to a window"),
    Rule("past_window", "recompute", "a recomputed context longer than the window would "
         "be a prefill past it: use preemption swap"),
    Rule("past_window", "prefix", "a request's shared prefix leaves its window"),
    Rule("past_window", "chunked", _NOT_YET),
    Rule("past_window", "speculative", _NOT_YET),
)

#: the features an engine built from objects decides (its allocator, speculation, tier)
_ENGINE = {"ellm", "past_window", "speculative"}


def check(setup: Setup, only: set[str] | None = None, relative: bool = False) -> None:
    """Refuse what ``setup`` combines that :data:`RULES` refuses (a ConfigError naming
    the first key, the second and why); rules about what is not known yet are passed
    over, and with ``only`` every rule that involves none of those features.
    ``relative``: the first key without ``serving.`` (the serving section's loader adds
    its own path)."""
    for rule in RULES:
        if only is not None and not {rule.first, rule.second} & only:
            continue
        a, b = FEATURES[rule.first], FEATURES[rule.second]
        on_a, on_b = a.on(setup), b.on(setup)
        if not on_a or on_b is None:
            continue
        key = a.key.removeprefix("serving.") if relative else a.key
        if rule.needs and not on_b:
            raise ConfigError(key, f"needs {b.key} ({b.label}): {rule.why}")
        if not rule.needs and on_b:
            raise ConfigError(key, f"{a.label} is not modelled with {b.key} "
                                   f"({b.label}): {rule.why}")


def check_config(cfg) -> None:
    """The rules a serving configuration alone decides (its loader's check)."""
    check(Setup(cfg), relative=True)


def check_engine(cfg, allocator, speculating: bool, tier: bool, past_window: bool) -> None:
    """The rules an engine decides from what it is given: its allocator, speculation, a
    lower tier and a window, with ``cfg``'s chunked prefill."""
    check(Setup(cfg, type(allocator), None, past_window, speculating, tier), _ENGINE)


def table_markdown() -> str:
    """The rules as a Markdown table, for the configuration reference."""
    rows = ["| feature | with | rule | why |", "|---|---|---|---|"]
    for r in RULES:
        a, b = FEATURES[r.first], FEATURES[r.second]
        rows.append(f"| `{a.key}` ({a.label}) | `{b.key}` ({b.label}) | "
                    f"{'needs' if r.needs else 'not together'} | {r.why} |")
    return "\n".join(rows)

"""Exploration specs: a base design, the keys searched, what is optimised and what must
hold, read from YAML into frozen dataclasses.

::

    name: h2m2-decode                 # optional (default: the file's name)
    base: ../configs/h2m2-llama.yaml  # a run or serve configuration (path or inline)
    space:                            # key path -> range or choice (h2m2sim.exploration.space)
      system.sides[0].capacity_bytes: {low: 32, high: 192, step: 32, unit: GB}
      workload.batch: {low: 8, high: 256, log: true, unit: requests}
    objectives:                       # metric -> min or max (1 to 4 of them)
      tokens_per_s_per_dollar: max
      energy_per_token_j: min
    constraints:                      # "METRIC <= VALUE" or "METRIC >= VALUE"
      - tpot_p99_s <= 0.1
      - node_power_w <= 3000
    cost: 2025                        # a cost model of workloads/costs/, or a file
    fidelity: {search: estimate, confirm: sampled, confirm_points: 8}
    search: {sampler: nsga2, trials: 30, batch: 10, seed: 0}
    references:                       # designs marked on the plots: settings on the base
      lpddr-only: {system: lpddr-only}
    plot: [tokens_per_s_per_dollar, energy_per_token_j]

Every part is checked before anything runs: each searched key at both ends of its
range (and each choice) must make a valid configuration, so a typo in a path or a value
out of a key's bounds is one line naming ``space.<path>``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dram_models.schema import suggest
from h2m2sim.cache import plain
from h2m2sim.config import RunConfig, apply_sets, load_config, normalize_raw, read_yaml, set_key
from h2m2sim.errors import ConfigError
from h2m2sim.exploration.cost import CostModel, load_cost_model
from h2m2sim.exploration.space import Choice, Parameter, parse_parameter

__all__ = ["ExploreSpec", "Objective", "Constraint", "Fidelity", "SearchSettings",
           "read_spec", "build_spec", "SPEC_KEYS", "FIDELITIES", "MAX_TRIALS"]

SPEC_KEYS = ("name", "description", "base", "space", "objectives", "constraints", "cost",
             "fidelity", "search", "references", "plot")
FIDELITIES = ("estimate", "sampled", "cycle")
MAX_TRIALS = 100_000
MAX_OBJECTIVES = 4
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Objective:
    """A metric of the run (or of :func:`h2m2sim.exploration.cost.design_metrics`) to
    minimise or maximise."""
    metric: str
    direction: str          # "min" or "max"

    @property
    def optuna_direction(self) -> str:
        return "minimize" if self.direction == "min" else "maximize"


@dataclass(frozen=True)
class Constraint:
    """``metric <= bound`` (``op`` "<=") or ``metric >= bound`` (">=")."""
    metric: str
    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"

    def violation(self, value: float) -> float:
        """How far ``value`` is past the bound, relative to the bound (<= 0: satisfied);
        relative, so that constraints in different units weigh alike when a search ranks
        infeasible designs by their total violation. A missing or non-finite value
        violates by 1."""
        if value is None or not math.isfinite(value):
            return 1.0
        scale = abs(self.bound) or 1.0
        excess = value - self.bound if self.op == "<=" else self.bound - value
        return excess / scale

    def holds(self, value: float) -> bool:
        return self.violation(value) <= 0


@dataclass(frozen=True)
class Fidelity:
    """``search``: the ``simulation.fidelity`` trials run at (a serving run's estimate is
    its analytic evaluator); ``confirm``: the fidelity the front is run again at (None:
    not confirmed), at most ``confirm_points`` of its designs."""
    search: str = "estimate"
    confirm: str | None = "sampled"
    confirm_points: int = 8


@dataclass(frozen=True)
class SearchSettings:
    """``sampler`` (a name of :data:`h2m2sim.exploration.samplers.SAMPLERS`); ``trials``
    evaluated in all; ``batch`` of them sampled together and evaluated at once (NSGA-II's
    population); ``seed`` of every random choice of the search; ``grid_levels``: values per
    range of a grid search (None: as many as ``trials`` allows)."""
    sampler: str | None = None
    trials: int = 30
    batch: int = 10
    seed: int = 0
    grid_levels: int | None = None


@dataclass(frozen=True)
class ExploreSpec:
    name: str
    description: str
    base: dict[str, Any]                    # raw run configuration, settings applied
    space: tuple[Parameter, ...]
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...]
    cost: CostModel
    fidelity: Fidelity
    search: SearchSettings
    references: dict[str, dict[str, Any]]   # name -> {key path: value}
    plot: tuple[str, str] | None
    spec: dict[str, Any] = field(repr=False)    # normalised, base inlined
    inputs: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def digest(self) -> str:
        """sha256 of what decides the trials: the base, space, objectives, constraints,
        prices, search fidelity and search settings but the trial count. A study may
        be resumed with more trials, other references, plots or confirmation."""
        spec = {k: self.spec.get(k) for k in ("base", "space", "objectives",
                                              "constraints", "cost")}
        spec["fidelity"] = self.fidelity.search
        spec["search"] = {k: v for k, v in self.search.__dict__.items() if k != "trials"}
        text = json.dumps(plain(spec), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def metrics(self) -> list[str]:
        """Every metric the spec reads: objectives first, then constraints."""
        names = [o.metric for o in self.objectives] + [c.metric for c in self.constraints]
        return list(dict.fromkeys(names))

    def config(self, settings: Mapping[str, Any], fidelity: str) -> RunConfig:
        """The base with ``settings`` (key path -> configuration value) applied, run at
        ``fidelity``; a refused combination is the ConfigError of the configuration."""
        raw = set_key(self.base, "simulation.fidelity", fidelity)
        for path, value in settings.items():
            raw = set_key(raw, path, value)
        return load_config(raw)

    def settings(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Configuration values of a trial's sampled ``params`` (path -> sampled value)."""
        out = {}
        for p in self.space:
            v = params[p.path]
            out[p.path] = p.setting(p.value(v) if isinstance(p, Choice) else v)
        return out

    def shown(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's parameters as a reader sees them (a choice as its value)."""
        return {p.label: (p.value(params[p.path]) if isinstance(p, Choice)
                          else params[p.path]) for p in self.space if p.path in params}

    def spec_yaml(self) -> str:
        return yaml.safe_dump(plain(self.spec), sort_keys=False, default_flow_style=False)


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(key, "must be a name of letters, digits, '.', '_' or '-' (at "
                               f"most 100), got {value!r}")
    return value


def _mapping(spec: Mapping[str, Any], key: str, required: bool = False) -> dict[str, Any]:
    block = spec.get(key)
    if block is None:
        if required:
            raise ConfigError(key, "is required")
        return {}
    if not isinstance(block, Mapping):
        raise ConfigError(key, f"must be a mapping, got {block!r}")
    return dict(block)


def _check_keys(block: Mapping[str, Any], allowed: Iterable[str], prefix: str) -> None:
    allowed = tuple(allowed)
    for k in block:
        if k not in allowed:
            where = f"{prefix}.{k}" if prefix else str(k)
            raise ConfigError(where, "unknown key" + suggest(str(k), allowed)
                              + f"; allowed: {', '.join(allowed)}")


def _objectives(spec: Mapping[str, Any]) -> tuple[Objective, ...]:
    block = _mapping(spec, "objectives", required=True)
    if not 1 <= len(block) <= MAX_OBJECTIVES:
        raise ConfigError("objectives", f"give 1 to {MAX_OBJECTIVES} metrics, got "
                                        f"{len(block)}")
    out = []
    for metric, direction in block.items():
        _name(metric, "objectives")
        if direction not in ("min", "max"):
            raise ConfigError(f"objectives.{metric}", f"must be min or max, got "
                                                      f"{direction!r}")
        out.append(Objective(metric, direction))
    return tuple(out)


_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(<=|>=|<|>)\s*(\S+)\s*$")


def _constraint(text: Any, key: str) -> Constraint:
    m = _CONSTRAINT.match(text) if isinstance(text, str) else None
    if m is None:
        raise ConfigError(key, f"must read 'METRIC <= VALUE' or 'METRIC >= VALUE', got "
                               f"{text!r}")
    try:
        bound = float(m.group(3))
    except ValueError:
        raise ConfigError(key, f"bound {m.group(3)!r} is not a number") from None
    if not math.isfinite(bound) or abs(bound) > 1e15:
        raise ConfigError(key, f"bound must be a finite number of at most 1e15, got "
                               f"{m.group(3)}")
    # a strict bound is its closed form: the simulator's numbers are not exact enough
    # for < and <= to differ
    return Constraint(m.group(1), m.group(2)[0] + "=", bound)


def _constraints(spec: Mapping[str, Any]) -> tuple[Constraint, ...]:
    block = spec.get("constraints") or []
    if not isinstance(block, list):
        raise ConfigError("constraints", "must be a list such as ['tpot_p99_s <= 0.1']")
    return tuple(_constraint(c, f"constraints[{i}]") for i, c in enumerate(block))


def _int_in(block: Mapping[str, Any], key: str, prefix: str, default: Any, low: int,
            high: int) -> Any:
    value = block.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{prefix}.{key}", f"must be a whole number from {low} to "
                                             f"{high}, got {value!r}")
    return value


def _fidelity(spec: Mapping[str, Any]) -> Fidelity:
    block = _mapping(spec, "fidelity")
    _check_keys(block, ("search", "confirm", "confirm_points"), "fidelity")
    search = block.get("search", "estimate")
    if search not in FIDELITIES:
        raise ConfigError("fidelity.search", f"must be one of {', '.join(FIDELITIES)}, "
                                             f"got {search!r}")
    confirm = block.get("confirm", "sampled" if search == "estimate" else None)
    if confirm is not None and (confirm not in FIDELITIES or confirm == search):
        raise ConfigError("fidelity.confirm", "must be null or a fidelity other than the "
                          f"search's ({', '.join(f for f in FIDELITIES if f != search)}), "
                          f"got {confirm!r}")
    points = _int_in(block, "confirm_points", "fidelity", 8, 1, 256)
    return Fidelity(search, confirm, points)


def _search(spec: Mapping[str, Any]) -> SearchSettings:
    block = _mapping(spec, "search")
    _check_keys(block, ("sampler", "trials", "batch", "seed", "grid_levels"), "search")
    sampler = block.get("sampler")
    if sampler is not None:
        from h2m2sim.exploration.samplers import SAMPLERS
        SAMPLERS.get(sampler, "search.sampler")
    trials = _int_in(block, "trials", "search", 30, 1, MAX_TRIALS)
    batch = _int_in(block, "batch", "search", min(10, max(trials, 2)), 2, 1000)
    seed = _int_in(block, "seed", "search", 0, 0, 2**32 - 1)
    levels = _int_in(block, "grid_levels", "search", None, 2, 64)
    return SearchSettings(sampler, trials, batch, seed, levels)


def _base(spec: Mapping[str, Any], base_dir: Path, sets: Iterable[str]
          ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    base, inputs = spec.get("base"), []
    if isinstance(base, str):
        path = Path(base).expanduser()
        path = path if path.is_absolute() else base_dir / path
        base = read_yaml(path)
        inputs.append(("base", str(path)))
    if not isinstance(base, Mapping):
        raise ConfigError("base", "must be a run configuration (mapping) or the path of one")
    base = apply_sets(dict(base), sets)
    load_config(base)       # the base itself is a valid configuration
    return base, inputs


def _space(spec: Mapping[str, Any], base: dict[str, Any]) -> tuple[Parameter, ...]:
    block = _mapping(spec, "space", required=True)
    if not block:
        raise ConfigError("space", "must name at least one key to search")
    params = tuple(parse_parameter(path, s) for path, s in block.items())
    for i, p in enumerate(params):
        for q in params[:i]:
            if p.path.startswith((q.path + ".", q.path + "[")) or \
                    q.path.startswith((p.path + ".", p.path + "[")):
                raise ConfigError(f"space.{p.path}", f"overlaps space.{q.path}")
    for p in params:
        _check_ends(p, base, [q for q in params if q is not p])
    return params


def _ends(p: Parameter) -> list[Any]:
    """The values of ``p`` a check tries: both ends of a range, every choice."""
    return list(p.choices) if isinstance(p, Choice) else [p.low, p.high]


def _contexts(base: dict[str, Any], others: Sequence[Parameter]) -> list[dict[str, Any]]:
    """Bases a value is tried on: the base itself, every other searched key at its low
    (then its high) end, and each other key alone at each of its ends."""
    def with_(pairs: Iterable[tuple[Parameter, Any]]) -> dict[str, Any]:
        raw = base
        for q, v in pairs:
            raw = set_key(raw, q.path, q.setting(v))
        return raw
    out = [base, with_((q, _ends(q)[0]) for q in others),
           with_((q, _ends(q)[-1]) for q in others)]
    out += [with_([(q, v)]) for q in others for v in _ends(q)]
    return out


def _check_ends(p: Parameter, base: dict[str, Any], others: Sequence[Parameter]) -> None:
    """Each end of ``p``'s range (each choice) is a value its key accepts with some
    setting of the other searched keys: a path that names no key, or a value the key
    refuses whatever the rest, is refused here. A value refused only in combination
    (a capacity that fewer channels cannot address; a model past the memory) is a
    finding the search records for the designs that have it."""
    contexts = _contexts(base, others)
    for value in _ends(p):
        first = None
        for raw in contexts:
            try:
                load_config(set_key(raw, p.path, p.setting(value)))
            except ConfigError as err:
                own = err.key == p.path or err.key.startswith((p.path + ".", p.path + "["))
                if own or err.message.startswith(("unknown key", "unknown section")):
                    first = first or err
                    continue
            first = None
            break
        if first is not None:
            raise ConfigError(f"space.{p.path}", f"value {value!r}: {first.message}")


def _references(spec: Mapping[str, Any], base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    block = _mapping(spec, "references")
    out = {}
    for name, settings in block.items():
        _name(name, "references")
        if name == "base":
            raise ConfigError("references.base", "the base design is always marked; "
                                                 "choose another name")
        if settings is None:
            settings = {}
        if not isinstance(settings, Mapping):
            raise ConfigError(f"references.{name}", "must be a mapping of key paths to "
                                                    "values, e.g. {system: lpddr-only}")
        raw = base
        try:
            for path, value in settings.items():
                raw = set_key(raw, str(path), value)
            load_config(raw)
        except ConfigError as err:
            if "out of memory" not in err.message:
                raise ConfigError(f"references.{name}", f"{err.key}: {err.message}") \
                    from None
        out[name] = dict(settings)
    return out


def _plot(spec: Mapping[str, Any], objectives: tuple[Objective, ...]) -> tuple[str, str] | None:
    plot = spec.get("plot")
    if plot is None:
        return tuple(o.metric for o in objectives[:2]) if len(objectives) >= 2 else None
    if not (isinstance(plot, list) and len(plot) == 2 and all(isinstance(m, str) for m in plot)):
        raise ConfigError("plot", f"must name two metrics, [x, y], got {plot!r}")
    return plot[0], plot[1]


def build_spec(spec: Any, base_dir: str | os.PathLike = ".", name: str = "explore",
               sets: Iterable[str] = ()) -> ExploreSpec:
    """Validate a parsed spec (a relative ``base`` or ``cost`` path is taken from
    ``base_dir``); ``sets`` (``KEY=VALUE``) apply to the base."""
    spec = normalize_raw(spec)
    if not isinstance(spec, Mapping):
        raise ConfigError("", "an explore spec must be a mapping with keys "
                              + ", ".join(SPEC_KEYS))
    _check_keys(spec, SPEC_KEYS, "")
    base_dir = Path(base_dir)
    name = _name(spec.get("name") or name, "name")
    description = spec.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError("description", "must be a string")
    base, inputs = _base(spec, base_dir, sets)
    space = _space(spec, base)
    objectives = _objectives(spec)
    cost = _cost(spec.get("cost", "2025"), base_dir)
    inputs.append(("cost", cost.path))
    # the prices themselves, not where the file lies: a study moved with its folder
    # resumes, one whose prices changed does not
    prices = {k: v for k, v in plain(cost).items() if k != "path"}
    norm = {**{k: spec[k] for k in SPEC_KEYS if k in spec}, "name": name, "base": base,
            "cost": prices}
    return ExploreSpec(name, description, base, space, objectives, _constraints(spec),
                       cost, _fidelity(spec), _search(spec), _references(spec, base),
                       _plot(spec, objectives), norm, tuple(inputs))


def _cost(value: Any, base_dir: Path) -> CostModel:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError("cost", f"must name a cost model (e.g. 2025) or a file, got "
                                  f"{value!r}")
    text = str(value)
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml") and not path.is_absolute():
        path = base_dir / path
        text = str(path)
    return load_cost_model(text)


def read_spec(path: str | os.PathLike, sets: Iterable[str] = ()) -> ExploreSpec:
    """Read and check an explore spec file."""
    path = Path(path)
    spec = build_spec(read_yaml(path), base_dir=path.parent, name=_stem(path), sets=sets)
    return ExploreSpec(**{**spec.__dict__, "inputs": (("spec", str(path)), *spec.inputs)})


def _stem(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem)[:100].lstrip("._-")
    return stem or "explore"

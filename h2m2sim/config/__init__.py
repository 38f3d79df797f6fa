"""Run configuration: YAML -> validated, frozen dataclasses (``RunConfig``).

A run configuration has five sections::

    system:      preset name, {preset: NAME, <overrides>}, or inline   (required)
    model:       model-zoo name or inline mapping                       (required)
    workload:    batch, seq, phase, serving                             (optional)
    policy:      mapper, mapper_params, allocator, allocator_params, baseline
    simulation:  fidelity, seed, cache, cache_dir, workers, threads

``system``, ``model`` and ``workload.serving`` are resolved by the layers that own them,
through the :data:`RESOLVERS` table; mapper and allocator names are checked against the
layers' registries in :data:`REGISTRIES`.

Typical use::

    from h2m2sim.config import load_file, dump_yaml
    cfg = load_file("run.yaml", sets=["workload.batch=64"])
"""
from h2m2sim.cache import config_hash
from h2m2sim.config.loader import (
                                   apply_sets,
                                   dump_yaml,
                                   load_config,
                                   load_file,
                                   normalize_raw,
                                   parse_yaml,
                                   read_yaml,
                                   resolve_section,
                                   set_key,
)
from h2m2sim.config.schema import (
                                   EXAMPLE_YAML,
                                   REGISTRIES,
                                   REQUIRED_SECTIONS,
                                   RESOLVERS,
                                   SECTIONS,
                                   PolicyConfig,
                                   RunConfig,
                                   SimulationConfig,
                                   WorkloadConfig,
)
from h2m2sim.errors import ConfigError

__all__ = ["EXAMPLE_YAML", "RESOLVERS", "REGISTRIES", "SECTIONS", "REQUIRED_SECTIONS", "RunConfig",
           "WorkloadConfig", "PolicyConfig", "SimulationConfig", "ConfigError",
           "apply_sets", "dump_yaml", "load_config", "load_file", "normalize_raw",
           "parse_yaml", "read_yaml", "resolve_section", "set_key", "config_hash"]

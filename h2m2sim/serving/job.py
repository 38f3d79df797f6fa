"""The runner's serving job: a resolved run configuration with ``workload.serving`` in,
metrics out (``h2m2sim run`` / ``sweep``)."""
from __future__ import annotations

import dataclasses
from typing import Any

from h2m2sim.errors import ConfigError

from .run import EVALUATORS, analytic_evaluator, serve
from .setup import DEVICE_TABLE, _device_from_system

__all__ = ["run_serving"]


def run_serving(cfg: Any) -> dict:
    """Serve ``cfg.workload.serving`` (a :class:`~h2m2sim.serving.config.ServingConfig`)
    with ``cfg.policy.allocator`` / ``allocator_params`` on ``cfg.system`` and
    ``cfg.model``. ``simulation.fidelity: estimate`` uses the analytic placeholder;
    ``cycle`` / ``sampled`` the cycle-level evaluator (:mod:`.cycle_eval`) at that
    fidelity."""
    s = cfg.workload.serving
    s = dataclasses.replace(s, allocator=cfg.policy.allocator,
                            allocator_params=dict(cfg.policy.allocator_params or {}))
    name = getattr(cfg.system, "name", "system")
    device = _device_from_system(name, cfg.system)
    if device is None:
        if isinstance(cfg.system, str) and cfg.system in DEVICE_TABLE:
            device = DEVICE_TABLE[cfg.system]
        else:
            raise ConfigError("system", "the serving layer cannot read memory capacity and "
                              "bandwidth from this system (expects `sides` with "
                              "capacity_bytes and bandwidth)")
    if cfg.simulation.fidelity in ("cycle", "sampled"):
        from h2m2sim.system.config import SystemSpec
        if not isinstance(cfg.system, SystemSpec):
            raise ConfigError("simulation.fidelity", f"{cfg.simulation.fidelity!r} serving "
                              "simulates the system's chip and DRAM, which needs a system "
                              "with full side descriptions (a preset or system YAML); use "
                              "`fidelity: estimate` for the analytic placeholder")
        # simulate the configuration's own system (it may override the preset)
        device = dataclasses.replace(device, system=cfg.system)
        evaluator = EVALUATORS["cycle"](cfg.model, device, s,
                                        fidelity=cfg.simulation.fidelity,
                                        cache=cfg.simulation.cache,
                                        cache_dir=cfg.simulation.cache_dir)
    else:
        evaluator = analytic_evaluator(cfg.model, device, s)
    result = serve(None, s, model=cfg.model, device=device, evaluator=evaluator,
                   seed=cfg.simulation.seed, cache=cfg.simulation.cache,
                   cache_dir=cfg.simulation.cache_dir)
    return result.metrics

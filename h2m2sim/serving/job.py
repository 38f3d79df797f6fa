"""The runner's serving job: a resolved run configuration with ``workload.serving`` in,
metrics out (``h2m2sim run`` / ``sweep``)."""
from __future__ import annotations

from typing import Any

from .deployment import ServingDevice
from .run import EVALUATORS, analytic_evaluator, serve

__all__ = ["run_serving"]


def run_serving(cfg: Any) -> dict:
    """Serve ``cfg.workload.serving`` (a :class:`~h2m2sim.serving.config.ServingConfig`)
    with ``cfg.policy.allocator`` / ``allocator_params`` on ``cfg.system`` (its ``cards``
    tensor parallel) and ``cfg.model``. ``simulation.fidelity: estimate`` uses the
    analytic placeholder; ``cycle`` / ``sampled`` the cycle-level evaluator
    (:mod:`.cycle_eval`) at that fidelity."""
    s = cfg.workload.serving
    device = ServingDevice.from_system(cfg.system)
    sim = cfg.simulation
    if sim.fidelity in ("cycle", "sampled"):
        def evaluator(model, replica_device, c):
            return EVALUATORS.get("cycle")(model, replica_device, c, fidelity=sim.fidelity,
                                           cache=sim.cache, cache_dir=sim.cache_dir)
    else:
        evaluator = analytic_evaluator
    result = serve(None, s, allocator=cfg.policy.allocator,
                   allocator_params=cfg.policy.allocator_params, model=cfg.model,
                   device=device, evaluator=evaluator, seed=sim.seed, cache=sim.cache,
                   cache_dir=sim.cache_dir)
    return result.metrics

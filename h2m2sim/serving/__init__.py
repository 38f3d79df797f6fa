"""Request-level serving simulation.

* :mod:`.traces` -- request traces and Poisson arrivals;
* :mod:`.config` -- :class:`ServingConfig` (``workload.serving``);
* :mod:`.deployment` -- the device a run is served on (from a system and its cards), KV
  capacity, allocator and predictions;
* :mod:`.timing` -- iteration-time tables sampled from a point evaluator, the analytic
  placeholder, the Numba decode windows;
* :mod:`.cycle_eval` -- the cycle-level evaluator (NPU chip model and DRAM engine);
* :mod:`.loop` -- :class:`~.loop.ServingLoop`: continuous batching, KV admission,
  preemption, metrics;
* :mod:`.ellm` -- eLLM's activation model, Algorithms 1 and 2 and
  :class:`~.ellm.ElasticServingLoop`;
* :mod:`.run` -- :func:`~.run.serve`, one run from resolved pieces; :mod:`.job` -- the
  runner's serving job.
"""
from .traces import RequestTrace, load_trace, poisson_arrivals

__all__ = ["RequestTrace", "load_trace", "poisson_arrivals"]

"""Request-level serving simulation.

* :mod:`.traces` -- request traces and Poisson arrivals;
* :mod:`.config` -- :class:`ServingConfig` (``workload.serving``); :mod:`.features` --
  which features combine;
* :mod:`.deployment` -- the device a run is served on (from a system and its cards), KV
  capacity, allocator and predictions; :mod:`.resolve` -- a run's pieces resolved;
* :mod:`.timing` -- iteration-time tables sampled from a point evaluator, the analytic
  placeholder, the Numba decode windows, the cycle-level evaluators;
* the engine: :mod:`.request` (a request's status and tokens), :mod:`.scheduler`
  (admission, preemption victims and modes), :mod:`.kv_manager` (allocator, prefix
  cache, lower tier, swap and cold KV), :mod:`.prefill` (how admissions become
  iterations), :mod:`.decode` (decode windows), :mod:`.clock` (time, KV occupancy,
  timeline spans), :mod:`.engine` (one engine's step loop), :mod:`.metrics` (the record
  and its merge rules);
* :mod:`.cluster` -- replicas behind a router and pools on one event clock;
  :mod:`.disaggregated` -- prefill and decode pools;
* :mod:`.ellm` -- eLLM's activation model, Algorithms 1 and 2 as a prefill stage;
* :mod:`.run` -- :func:`~.run.serve`, one run from resolved pieces; :mod:`.replay` --
  :func:`~.replay.simulate`, one engine over a trace; :mod:`.job` -- the runner's
  serving job.
"""
from .traces import RequestTrace, load_trace, poisson_arrivals

__all__ = ["RequestTrace", "load_trace", "poisson_arrivals"]

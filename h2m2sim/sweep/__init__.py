"""Parameter sweeps: a base run configuration plus grid / zipped axes, run on a local
process pool or a Dask distributed cluster into a resumable result store.

* :mod:`h2m2sim.sweep.spec` — the sweep file format and its expansion into points;
* :mod:`h2m2sim.sweep.execute` — running points (in-process, process pool, Dask);
* :mod:`h2m2sim.sweep.run` — :func:`run_sweep`, which ties them to the result store
  (:mod:`h2m2sim.store`).
"""
from h2m2sim.sweep.run import SweepReport, default_workers, run_sweep
from h2m2sim.sweep.spec import Axis, Point, Sweep, build_sweep, read_sweep

__all__ = ["Axis", "Point", "Sweep", "build_sweep", "read_sweep", "run_sweep",
           "SweepReport", "default_workers"]

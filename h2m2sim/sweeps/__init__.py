"""Parameter sweeps: a base run configuration plus grid / zipped axes, run on a local
process pool or a Dask distributed cluster into a resumable result store.

* :mod:`h2m2sim.sweeps.spec` — the sweep file format and its expansion into points;
* :mod:`h2m2sim.sweeps.execute` — running points (in-process, process pool, Dask);
* :mod:`h2m2sim.sweeps.run` — :func:`run_sweep`, which ties them to the result store
  (:mod:`h2m2sim.store`).

The Python interface's ``h2m2sim.sweep(spec_or_path, out, ...)`` (:func:`h2m2sim.api.sweep`)
runs a sweep through this package and returns its rows.
"""
from h2m2sim.sweeps.run import SweepReport, default_workers, run_sweep
from h2m2sim.sweeps.spec import Axis, Point, Sweep, build_sweep, read_sweep

__all__ = ["Axis", "Point", "Sweep", "build_sweep", "read_sweep", "run_sweep",
           "SweepReport", "default_workers"]

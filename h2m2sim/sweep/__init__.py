"""Parameter sweeps: a base run configuration plus grid / zipped axes, run on a local
process pool or a Dask distributed cluster into a resumable result store.

* :mod:`h2m2sim.sweep.spec` — the sweep file format and its expansion into points;
* :mod:`h2m2sim.sweep.execute` — running points (in-process, process pool, Dask);
* :mod:`h2m2sim.sweep.run` — :func:`run_sweep`, which ties them to the result store
  (:mod:`h2m2sim.store`).

Calling this package, ``h2m2sim.sweep(spec_or_path, out, ...)``, runs a sweep and returns
its rows: it is :func:`h2m2sim.api.sweep`.
"""
import importlib
import sys
import types

from h2m2sim.sweep.run import SweepReport, default_workers, run_sweep
from h2m2sim.sweep.spec import Axis, Point, Sweep, build_sweep, read_sweep

__all__ = ["Axis", "Point", "Sweep", "build_sweep", "read_sweep", "run_sweep",
           "SweepReport", "default_workers"]


class _CallablePackage(types.ModuleType):
    """``h2m2sim.sweep`` names both this package and the API function: importing the
    package rebinds the name on ``h2m2sim`` to it, whatever was there, so the package
    itself answers the call (the API sits above this layer, hence the lookup by name)."""

    def __call__(self, *args, **kwargs):
        return importlib.import_module("h2m2sim.api").sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

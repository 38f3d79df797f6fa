"""The search strategies of an exploration, each an Optuna sampler made afresh for every
batch of trials.

A sampler is seeded from the spec's seed and the number of the batch's first trial, and
a batch is sampled whole before any of it is evaluated; so the trials of a study depend
on its spec and seed alone -- not on how many workers evaluate them, nor on where a
stopped study was resumed.
"""
from __future__ import annotations

import abc
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.exploration.space import Parameter
from h2m2sim.registry import Registry

__all__ = ["Sampler", "SAMPLERS", "require_optuna", "default_sampler", "batch_seed",
           "grid_size"]

INSTALL = "pip install 'h2m2sim[explore]'"


def require_optuna() -> Any:
    """The ``optuna`` module, or a one-line error saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("explore", f"needs Optuna, which is not installed: {INSTALL}") \
            from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # multivariate TPE and the journal file storage are marked experimental; the search
    # relies on them knowingly, and the warning would repeat for every batch
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def batch_seed(seed: int, first_trial: int) -> int:
    """The seed of the sampler of the batch starting at trial ``first_trial``."""
    return int(np.random.SeedSequence([seed, first_trial]).generate_state(1)[0])


Constraints = Callable[[Any], Sequence[float]] | None


class Sampler(abc.ABC):
    """One search strategy: :meth:`make` builds its Optuna sampler."""
    name: ClassVar[str]
    #: seeded afresh for each batch; False: with the spec's seed always (a grid, whose
    #: seed orders its points, must keep one order for the whole study)
    reseeded: ClassVar[bool] = True

    @abc.abstractmethod
    def make(self, seed: int, batch: int, constraints: Constraints,
             space: Sequence[Parameter], levels: int) -> Any:
        """An Optuna sampler seeded with ``seed``; ``batch`` trials form a generation;
        ``constraints`` maps a finished trial to its violations (<= 0 holds; None where
        the trials carry their constraints);
        ``levels``: values per range of a grid."""


SAMPLERS: Registry[type[Sampler]] = Registry("sampler", key="search.sampler")


def _constraints_arg(constraints: Constraints) -> dict[str, Any]:
    """The ``constraints_func`` keyword of a sampler, when constraints go through it."""
    return {} if constraints is None else {"constraints_func": constraints}


@SAMPLERS.register("nsga2")
class Nsga2(Sampler):
    """NSGA-II, a genetic search for the front of several objectives (Deb et al., IEEE
    Transactions on Evolutionary Computation, 2002); a generation is a batch."""
    name = "nsga2"

    def make(self, seed, batch, constraints, space, levels):
        from optuna.samplers import NSGAIISampler
        return NSGAIISampler(population_size=batch, seed=seed,
                             **_constraints_arg(constraints))


@SAMPLERS.register("tpe")
class Tpe(Sampler):
    """Tree-structured Parzen estimator (Bergstra et al., NeurIPS 2011): Bayesian search
    for one objective (several are supported too); a batch is sampled with a constant
    liar for the trials not yet finished."""
    name = "tpe"

    def make(self, seed, batch, constraints, space, levels):
        from optuna.samplers import TPESampler
        return TPESampler(seed=seed, n_startup_trials=batch, multivariate=True,
                          constant_liar=True,
                          **_constraints_arg(constraints))


@SAMPLERS.register("gp")
class GaussianProcess(Sampler):
    """Gaussian-process Bayesian optimisation (Optuna's GPSampler; needs PyTorch)."""
    name = "gp"

    def make(self, seed, batch, constraints, space, levels):
        try:
            import torch  # noqa: F401 - GPSampler needs it
        except ImportError:
            raise ConfigError("search.sampler", "gp needs PyTorch, which is not installed "
                                                "(pip install torch), or choose tpe") \
                from None
        from optuna.samplers import GPSampler
        return GPSampler(seed=seed, n_startup_trials=batch, **_constraints_arg(constraints))


@SAMPLERS.register("random")
class Random(Sampler):
    """Independent uniform draws (log-uniform on a log range)."""
    name = "random"

    def make(self, seed, batch, constraints, space, levels):
        from optuna.samplers import RandomSampler
        return RandomSampler(seed=seed)


@SAMPLERS.register("grid")
class Grid(Sampler):
    """Every combination of ``levels`` values per range (all values of a choice), in a
    seeded random order, so that a budget smaller than the grid is a random subset."""
    name = "grid"
    reseeded = False

    def make(self, seed, batch, constraints, space, levels):
        from optuna.samplers import GridSampler

        class Sampler(GridSampler):
            def after_trial(self, study, trial, state, values):
                """Nothing: Optuna's grid stops a study run by ``optimize`` once every
                point is taken, which a study told trial by trial cannot do; the search
                stops at the grid's size itself."""
        return Sampler({p.path: p.grid(levels) for p in space}, seed=seed)


def grid_size(space: Sequence[Parameter], levels: int) -> int:
    """Points in the grid of ``levels`` values per range."""
    return math.prod(len(p.grid(levels)) for p in space)


def grid_levels(space: Sequence[Parameter], trials: int) -> int:
    """The most values per range whose grid has at most ``trials`` points (2 at least)."""
    levels = 2
    while levels < 64 and grid_size(space, levels + 1) <= trials:
        levels += 1
    return levels


def default_sampler(n_objectives: int) -> str:
    """NSGA-II for several objectives, TPE for one."""
    return "nsga2" if n_objectives > 1 else "tpe"

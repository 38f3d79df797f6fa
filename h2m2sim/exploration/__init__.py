"""Design-space exploration (``h2m2sim explore``, :func:`h2m2sim.explore`): a
multi-objective search (Optuna) over any configuration key, under SLO, power and
capacity constraints, priced by a cost model whose every number has a source and a date;
searched at a cheap fidelity, its front confirmed at a detailed one.

Modules, lowest first: :mod:`~h2m2sim.exploration.cost` (prices and power),
:mod:`~h2m2sim.exploration.space` (searched keys), :mod:`~h2m2sim.exploration.spec`
(the spec file), :mod:`~h2m2sim.exploration.pareto` (fronts, hypervolume),
:mod:`~h2m2sim.exploration.samplers`, :mod:`~h2m2sim.exploration.evaluate` (one design),
:mod:`~h2m2sim.exploration.study` (the search), :mod:`~h2m2sim.exploration.confirm`,
:mod:`~h2m2sim.exploration.report` and :mod:`~h2m2sim.exploration.figures` (outputs),
:mod:`~h2m2sim.exploration.run` (one call). Optuna is imported only where a search
runs, so reading a spec needs no optional package.
"""

"""Kernel-memory mapping: which heads / columns of each sublayer live (and run) on which
memory side. See :mod:`.base` for the problem and tables, :mod:`.mappers` for the
mappers; ``MAPPERS`` is the registry used by configurations (``policy.mapper``)."""
from .base import SUBLAYERS, Mapping, Problem, SublayerTimes, head_aware_time, \
    sublayer_granular_time
from .mappers import GREEDY_ORDER, MAPPERS, NEEDS_TABLES, estimate_ns

__all__ = ["SUBLAYERS", "Mapping", "Problem", "SublayerTimes", "head_aware_time",
           "sublayer_granular_time", "GREEDY_ORDER", "MAPPERS", "NEEDS_TABLES", "estimate_ns"]

"""What a run hands the engine, as NamedTuples of arrays (Numba passes each as one struct
of its fields, so a compiled function takes a handful of groups instead of dozens of
arrays). Times are in ticks, addresses in bytes; every array is contiguous int64 unless
noted."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Config(NamedTuple):
    """The organization, controller settings, timings and command bus of a run."""

    cfg: np.ndarray         # organization and controller settings (layout.C_*)
    tim: np.ndarray         # timings the rule table does not hold (layout.T_*), ticks
    slots: np.ndarray       # per command: command-bus occupancy, ticks
    busid: np.ndarray       # per command: 0 row (or only) bus, 1 column bus
    off: np.ndarray         # per command: ticks from issue to its reference slot


class Rules(NamedTuple):
    """The compiled rule table (:func:`dram_models.rules.compile_rules`): the rules of
    preceding command c are entries ``offsets[c]..offsets[c + 1]``."""

    offsets: np.ndarray     # NCMD + 1 entries
    level: np.ndarray       # scope of each rule (commands.L_*)
    following: np.ndarray   # the command each rule constrains
    distance: np.ndarray    # minimum distance between reference slots, ticks


class AddressMap(NamedTuple):
    """The address mapping's decode tables (``AddressMapping.tables`` and
    ``chunk_tables``, see :func:`dram_models.engine.address._decode`)."""

    field: np.ndarray       # per mixed-radix step: the coordinate it feeds
    radix: np.ndarray       # per step: its radix
    log2: np.ndarray        # per step: log2 of the radix, -1 if not a power of two
    dst: np.ndarray         # per step: bit position within the coordinate
    sizes: np.ndarray       # per coordinate: number of values
    chunk: np.ndarray       # byte-wise lookup tables (2-D; no rows: not a permutation)
    pos: np.ndarray         # per coordinate: bit position in a looked-up word


class Traffic(NamedTuple):
    """The front-end: streams (``s_*``) own contiguous slices of descriptors (``d_*``,
    contiguous byte ranges), whose reads may belong to tile groups (``g_*``)."""

    s_first: np.ndarray     # per stream: first descriptor
    s_last: np.ndarray      # per stream: one past its last descriptor
    s_maxout: np.ndarray    # per stream: cap on bursts in flight (0: none)
    d_addr: np.ndarray      # per descriptor: byte address (uint64)
    d_nb: np.ndarray        # per descriptor: bursts
    d_write: np.ndarray     # per descriptor: 1 for writes (uint8)
    d_arrival: np.ndarray   # per descriptor: earliest issue tick (-1: none)
    d_grp: np.ndarray       # per descriptor: tile group of its data (-1: none)
    d_gate: np.ndarray      # per descriptor: group whose compute it waits for (-1: none)
    g_compute: np.ndarray   # per group: compute, ticks
    g_prev: np.ndarray      # per group: previous group of its chain (-1: first)
    g_next: np.ndarray      # per group: next group of its chain (-1: last)


class Paging(NamedTuple):
    """Address translation: a flat page table (no entries: none) and the TLB's settings
    (``layout.TL_*``)."""

    pt: np.ndarray          # physical frame of each virtual page from TL_VBASE
    tlbc: np.ndarray        # TLB settings
    warm: np.ndarray = np.zeros(0, dtype=np.int64)   # pages resident at the start, oldest
    #                                                  first (TLB state of earlier kernels)


class Inputs(NamedTuple):
    """Everything a general engine run reads and never writes."""

    config: Config
    rules: Rules
    amap: AddressMap
    traffic: Traffic
    paging: Paging

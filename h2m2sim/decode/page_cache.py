"""Demand-paged cache over a page reference string: how many references miss under a
replacement policy.

A reference string is an int64 array of page ids in ``[0, n_pages)``; the cache holds
``capacity`` pages (a count, not bytes) and starts empty. Every reference to a page not
resident is a miss: the page is brought in, evicting one page chosen by the policy when
the cache is full. Policies:

* ``lru``    -- evict the least recently referenced page;
* ``fifo``   -- evict the page brought in first (hits do not reorder);
* ``belady`` -- evict the page whose next reference is farthest in the future (never
  referenced again counts as infinitely far): the fewest misses any demand-paged policy
  can reach (Belady, "A study of replacement algorithms for a virtual-storage computer",
  IBM Systems Journal 1966).

Each policy is one Numba loop over the string: O(1) per reference for LRU (a doubly
linked list in arrays) and FIFO (a ring buffer), O(log capacity) for Belady (a max-heap
of next-use times with stale entries skipped).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from h2m2sim.errors import ConfigError

__all__ = ["POLICIES", "miss_flags", "cyclic_string"]

POLICIES = ("belady", "lru", "fifo")


def cyclic_string(n_pages: int, passes: int) -> np.ndarray:
    """Pages 0..n_pages-1 referenced in order, ``passes`` times (int64)."""
    return np.tile(np.arange(n_pages, dtype=np.int64), passes)


@njit(cache=True)
def _lru(refs, n_pages, capacity):
    prev = np.full(n_pages, -1, np.int64)   # towards the most recently used end
    nxt = np.full(n_pages, -1, np.int64)    # towards the least recently used end
    resident = np.zeros(n_pages, np.bool_)
    miss = np.zeros(refs.size, np.bool_)
    head = -1   # most recent
    tail = -1   # least recent
    size = 0
    for i in range(refs.size):
        p = refs[i]
        if resident[p]:
            if p == head:
                continue
            # unlink p
            a, b = prev[p], nxt[p]
            nxt[a] = b
            if b >= 0:
                prev[b] = a
            else:
                tail = a
        else:
            miss[i] = True
            if size == capacity:
                v = tail
                tail = prev[v]
                if tail >= 0:
                    nxt[tail] = -1
                else:
                    head = -1
                resident[v] = False
                size -= 1
            resident[p] = True
            size += 1
        # link p at the head
        prev[p] = -1
        nxt[p] = head
        if head >= 0:
            prev[head] = p
        head = p
        if tail < 0:
            tail = p
    return miss


@njit(cache=True)
def _fifo(refs, n_pages, capacity):
    resident = np.zeros(n_pages, np.bool_)
    queue = np.empty(capacity, np.int64)
    miss = np.zeros(refs.size, np.bool_)
    first = 0
    size = 0
    for i in range(refs.size):
        p = refs[i]
        if resident[p]:
            continue
        miss[i] = True
        if size == capacity:
            resident[queue[first]] = False
            queue[first] = p
            first = (first + 1) % capacity
        else:
            queue[(first + size) % capacity] = p
            size += 1
        resident[p] = True
    return miss


@njit(cache=True)
def _heap_push(keys, vals, n, key, val):
    i = n
    keys[i] = key
    vals[i] = val
    while i > 0:
        parent = (i - 1) // 2
        if keys[parent] >= keys[i]:
            break
        keys[parent], keys[i] = keys[i], keys[parent]
        vals[parent], vals[i] = vals[i], vals[parent]
        i = parent
    return n + 1


@njit(cache=True)
def _heap_pop(keys, vals, n):
    """Remove the root (the largest key) of a heap of ``n`` entries; returns n - 1."""
    n -= 1
    keys[0] = keys[n]
    vals[0] = vals[n]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        big = left
        if left + 1 < n and keys[left + 1] > keys[left]:
            big = left + 1
        if keys[i] >= keys[big]:
            break
        keys[big], keys[i] = keys[i], keys[big]
        vals[big], vals[i] = vals[i], vals[big]
        i = big
    return n


@njit(cache=True)
def _belady(refs, n_pages, capacity):
    m = refs.size
    never = m + 1
    next_use = np.empty(m, np.int64)   # index of the next reference to the same page
    last = np.full(n_pages, never, np.int64)
    for i in range(m - 1, -1, -1):
        next_use[i] = last[refs[i]]
        last[refs[i]] = i
    resident = np.zeros(n_pages, np.bool_)
    current = np.zeros(n_pages, np.int64)   # the page's next use as of its last reference
    # one heap entry per reference at most; stale entries (current differs) are skipped
    keys = np.empty(m, np.int64)
    vals = np.empty(m, np.int64)
    n = 0
    size = 0
    miss = np.zeros(m, np.bool_)
    for i in range(m):
        p = refs[i]
        if not resident[p]:
            miss[i] = True
            if size == capacity:
                while True:
                    k, v = keys[0], vals[0]
                    n = _heap_pop(keys, vals, n)
                    if resident[v] and current[v] == k:
                        resident[v] = False
                        size -= 1
                        break
            resident[p] = True
            size += 1
        current[p] = next_use[i]
        n = _heap_push(keys, vals, n, next_use[i], p)
    return miss


def miss_flags(refs: np.ndarray, capacity: int, policy: str) -> np.ndarray:
    """Per reference of ``refs`` (int64 page ids), whether it misses in a cache of
    ``capacity`` pages that starts empty, under ``policy`` (one of :data:`POLICIES`)."""
    refs = np.ascontiguousarray(refs, dtype=np.int64)
    if refs.size == 0:
        return np.zeros(0, bool)
    n_pages = int(refs.max()) + 1
    if capacity < 1:
        return np.ones(refs.size, bool)
    if policy == "lru":
        return _lru(refs, n_pages, int(capacity))
    if policy == "fifo":
        return _fifo(refs, n_pages, int(capacity))
    if policy == "belady":
        return _belady(refs, n_pages, int(capacity))
    raise ConfigError("policy.mapper_params.hierarchical.replacement",
                      f"must be one of {', '.join(POLICIES)}, got {policy!r}")

"""Threads for the independent simulations inside one run.

The DRAM engine releases the GIL (``nogil``), so independent engine runs -- e.g. the
pieces (side x sublayer x kernel group) of one decoder layer -- can run on several cores
from threads of one process. Results do not depend on the thread count: every piece is
its own deterministic simulation and the results are combined in a fixed order.

The count comes from ``simulation.threads`` (set around a run with :func:`use_threads`);
unset, it is one per available core, or 1 inside a worker process of a sweep (the sweep
already keeps every core busy with processes).
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import multiprocessing
import os
import threading
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_THREADS: contextvars.ContextVar[int | None] = contextvars.ContextVar("h2m2sim_threads",
                                                                       default=None)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not on Linux
        return os.cpu_count() or 1


def thread_count() -> int:
    """Threads the current run may use (see the module docstring)."""
    n = _THREADS.get()
    if n is not None:
        return n
    return 1 if multiprocessing.parent_process() is not None else available_cores()


@contextlib.contextmanager
def use_threads(n: int | None) -> Iterator[None]:
    """Run the enclosed code with ``n`` threads (None = the default)."""
    token = _THREADS.set(n)
    try:
        yield
    finally:
        _THREADS.reset(token)


def map_ordered(fn: Callable[[T], R], items: Sequence[T],
                cost: Sequence[float] | None = None, desc: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on up to :func:`thread_count` threads. Work inside
    ``fn`` runs single-threaded (no nested pools). With ``cost`` (an estimate per item)
    the costliest items start first, so the threads finish close together (longest
    processing time first); the result keeps the order of ``items`` either way. The
    first exception (in item order) is raised. ``desc`` labels a progress bar of the
    finished items (:func:`dram_models.console.progress`; none inside ``fn``)."""
    if desc is not None:
        return _with_progress(fn, items, cost, desc)
    n = min(thread_count(), len(items))
    if n <= 1:
        return [fn(x) for x in items]

    def one(x: T) -> R:
        with use_threads(1):
            return fn(x)

    order = range(len(items)) if cost is None else \
        sorted(range(len(items)), key=lambda i: -cost[i])
    ex = cf.ThreadPoolExecutor(max_workers=n, thread_name_prefix="h2m2sim")
    try:
        futures = {i: ex.submit(contextvars.copy_context().run, one, items[i])
                   for i in order}
        out = [futures[i].result() for i in range(len(items))]
    except (KeyboardInterrupt, SystemExit):
        # Ctrl-C: what has not started is dropped and the items in flight are not
        # waited for (a DRAM engine run cannot be interrupted and may take seconds)
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)
    return out


def _with_progress(fn: Callable[[T], R], items: Sequence[T], cost: Sequence[float] | None,
                   desc: str) -> list[R]:
    """:func:`map_ordered` with a bar that advances as each item finishes."""
    from dram_models.console import inner_progress_off, progress
    lock = threading.Lock()
    with progress(len(items), desc, leave=False) as bar:
        def one(x: T) -> R:
            with inner_progress_off():
                r = fn(x)
            with lock:
                bar.update(1)
            return r
        return map_ordered(one, items, cost)

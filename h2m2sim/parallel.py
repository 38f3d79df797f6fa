"""Threads for the independent simulations inside one run.

The DRAM engine releases the GIL (``nogil``), so independent engine runs -- e.g. the
pieces (side x sublayer x kernel group) of one decoder layer -- can run on several cores
from threads of one process. Results do not depend on the thread count: every piece is
its own deterministic simulation and the results are combined in a fixed order.

The count comes from ``simulation.threads`` (set around a run with :func:`use_threads`);
unset, it is one per available core, or 1 inside a worker process of a sweep (the sweep
already keeps every core busy with processes).

A run that simulates two systems (one and its baseline) names them in its progress bars
with :func:`progress_label`.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import multiprocessing
import os
import threading
import time
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_THREADS: contextvars.ContextVar[int | None] = contextvars.ContextVar("h2m2sim_threads",
                                                                       default=None)
_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("h2m2sim_progress_label",
                                                                    default=None)
_clock = time.monotonic             # what the time-left estimate reads (tests replace it)

#: A bar with the count and the elapsed time, then ``eta`` (``<MM:SS`` or nothing).
_BAR = "{{l_bar}}{{bar}}| {{n_fmt}}/{{total_fmt}} [{{elapsed}}{eta}]"


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


@contextlib.contextmanager
def progress_label(label: str | None) -> Iterator[None]:
    """Progress bars of the enclosed code (in this thread and the threads it starts)
    are named ``label`` + their own name, e.g. 'baseline layer kernels' (None: their own
    name alone)."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


def labelled(desc: str) -> str:
    """The name a progress bar called ``desc`` shows here (see :func:`progress_label`)."""
    label = _LABEL.get()
    return f"{label} {desc}" if label else desc


def map_ordered(fn: Callable[[T], R], items: Sequence[T],
                cost: Sequence[float] | None = None, desc: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on up to :func:`thread_count` threads. Work inside
    ``fn`` runs single-threaded (no nested pools). With ``cost`` (an estimate per item)
    the costliest items start first, so the threads finish close together (longest
    processing time first); the result keeps the order of ``items`` either way. The
    first exception (in item order) is raised. ``desc`` labels a progress bar of the
    finished items (:func:`dram_models.console.progress`; none inside ``fn``), named as
    :func:`labelled` says, with the time left as :class:`_TimeLeft` estimates it."""
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


class _TimeLeft:
    """The time-left part of a bar over ``total`` items, from the items finished after
    the first one: the first also does one-off work (a first run compiles the DRAM engine
    for a minute or two, after which each item takes seconds), and a rate that counted
    it would promise many minutes for what then takes seconds. So nothing is estimated
    until a second item has finished."""

    def __init__(self, bar, total: int):
        self.bar, self.total, self.finished = bar, total, 0
        self.first_s: float | None = None     # when the first item finished
        bar.bar_format = _BAR.format(eta="")

    def item_finished(self) -> None:
        """Count one more finished item (before the bar's update draws it)."""
        self.finished += 1
        now = _clock()
        if self.first_s is None:
            self.first_s = now
            return
        left_s = (self.total - self.finished) * (now - self.first_s) / (self.finished - 1)
        self.bar.bar_format = _BAR.format(eta="<" + self.bar.format_interval(left_s))


def _with_progress(fn: Callable[[T], R], items: Sequence[T], cost: Sequence[float] | None,
                   desc: str) -> list[R]:
    """:func:`map_ordered` with a bar that advances as each item finishes."""
    from dram_models.console import inner_progress_off, progress
    lock = threading.Lock()
    with progress(len(items), labelled(desc), leave=False) as bar:
        left = _TimeLeft(bar, len(items))

        def one(x: T) -> R:
            with inner_progress_off():
                r = fn(x)
            with lock:
                left.item_finished()
                bar.update(1)
            return r
        return map_ordered(one, items, cost)

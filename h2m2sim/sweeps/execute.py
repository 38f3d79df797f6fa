"""Running sweep points: in-process, on a local process pool, or on Dask distributed.

Workers receive the resolved config and the job function (pickled by reference, so the
job must be a top-level function of an importable module) and return the point's
record; only the coordinating process writes to the result store, so workers on other
machines need no shared file system.

A :class:`Backend` is entered (``with``) before the sweep writes its files, because
entering is where it can fail: a Dask scheduler out of reach, or an address Dask cannot
use, is one line before any sweep file exists. Local pool workers end themselves when
the sweep process that started them is gone (even after SIGKILL, which no handler
sees), so they never run on as orphans.
"""
from __future__ import annotations

import abc
import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from dram_models.console import inner_progress_off, thread_lock_only
from h2m2sim import runner
from h2m2sim.errors import ConfigError, SimError

__all__ = ["run_point", "execute", "backend_for", "Backend", "InProcess", "ProcessPool",
           "DaskCluster", "Task", "Call", "WorkerDied"]


class WorkerDied(SimError):
    """A worker process of the local pool ended without returning a result."""


CONNECT_TIMEOUT = "20s"  # how long to try reaching a Dask scheduler
PARENT_POLL_S = 0.25     # how often a pool worker checks that its sweep process lives
Task = tuple[str, Any, Callable[[Any], Any]]  # (config hash, RunConfig, job)
OnDone = Callable[[str, dict[str, Any]], None]
#: what a worker calls for one task: ``call(cfg, job)`` -> the point's record;
#: :func:`run_point` for configurations (other point kinds: h2m2sim.sweeps.tasks)
Call = Callable[[Any, Callable[[Any], Any]], dict[str, Any]]


def run_point(cfg: Any, job: Callable[[Any], Any]) -> dict[str, Any]:
    """Run one point: ``metrics``, ``error`` and ``timing`` (wall seconds, apart from
    the metrics). A user error (:class:`SimError`, e.g. out of memory) is a result of
    the point and is returned as ``error``; anything else is a bug and propagates,
    which stops the sweep (finished points are kept)."""
    t0 = time.perf_counter()
    try:
        with inner_progress_off():      # the sweep's bar counts points
            res = runner.run(cfg, job)
    except SimError as err:
        return {"metrics": {}, "error": str(err),
                "timing": {"wall_s": time.perf_counter() - t0}}
    return {"metrics": res.metrics, "error": None, "timing": res.timing}


def _drain(futures: dict, wait_iter: Any, on_done: OnDone, cancel: Callable[[], None],
           cancel_on_interrupt: bool = True) -> None:
    """Record every future as it completes; on the first failure cancel what has not
    started, keep recording what still finishes, then re-raise the failure. Ctrl-C
    (or another BaseException) cancels what has not started, unless
    ``cancel_on_interrupt`` is False, and propagates at once."""
    failure: BaseException | None = None
    try:
        for fut in wait_iter:
            h = futures[fut]
            if fut.cancelled():
                continue
            try:
                result = fut.result()
            except cf.CancelledError:
                continue
            except BrokenProcessPool:
                if failure is None:
                    failure = WorkerDied(
                        "a sweep worker process died abruptly (killed, out of memory, or "
                        "a script that starts a sweep without an `if __name__ == "
                        "'__main__':` guard); finished points are saved, rerun with "
                        "--resume")
                    cancel()
                continue
            except Exception as err:  # noqa: BLE001 - re-raised below
                if failure is None:
                    failure = err
                    cancel()
                continue
            on_done(h, result)
    except BaseException:
        if cancel_on_interrupt:
            cancel()
        raise
    if failure is not None:
        raise failure


class Backend(abc.ABC):
    """Where points run; a context manager (see the module docstring)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release what :meth:`__enter__` acquired."""

    @abc.abstractmethod
    def run(self, tasks: Sequence[Task], on_done: OnDone, call: Call = run_point) -> None:
        """Run ``tasks``, calling ``on_done(config_hash, record)`` in this process as each
        finishes (in completion order); a worker runs a task as ``call(cfg, job)`` (a
        top-level function, pickled by reference)."""


class InProcess(Backend):
    """Points one after another in this process."""

    def run(self, tasks: Sequence[Task], on_done: OnDone, call: Call = run_point) -> None:
        for h, cfg, job in tasks:
            on_done(h, call(cfg, job))


def start_worker(parent_pid: int) -> None:
    """Pool worker initializer: Ctrl-C and the end of the sweep process as
    :func:`exit_with_parent` says, and progress bars that leave no semaphore behind when
    :func:`stop_workers` ends the worker (:func:`dram_models.console.thread_lock_only`)."""
    thread_lock_only()
    exit_with_parent(parent_pid)


def exit_with_parent(parent_pid: int) -> None:
    """End this process as soon as ``parent_pid`` is no longer its parent. A daemon thread polls ``os.getppid()`` every :data:`PARENT_POLL_S`
    seconds; it runs while a point computes, because the DRAM engine releases the GIL.
    (Linux's PR_SET_PDEATHSIG is not used: it follows the thread that started the
    worker, not the process, and exists on Linux only.) Ctrl-C in a terminal signals
    the whole process group: the worker ignores it, and the sweep process, which
    handles it, stops the workers (:func:`stop_workers`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # nothing to flush: workers write no files of the sweep

    threading.Thread(target=watch, name="h2m2sim-parent-watch", daemon=True).start()


class ProcessPool(Backend):
    """Points on ``workers`` spawned local processes: started for each :meth:`run`, or,
    with ``keep``, once when the backend is entered and reused by every run until it is
    closed (a search that runs batch after batch pays the start of the processes, an
    import of the simulator each, once)."""

    def __init__(self, workers: int, keep: bool = False):
        self.workers, self.keep = workers, keep
        self._kept: cf.ProcessPoolExecutor | None = None

    def __enter__(self) -> ProcessPool:
        if self.keep:
            self._kept = self._start()
        return self

    def close(self) -> None:
        if self._kept is not None:
            self._kept.shutdown(wait=True)
            self._kept = None

    def _start(self) -> cf.ProcessPoolExecutor:
        ctx = multiprocessing.get_context("spawn")  # fork is unsafe with threads (numba)
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx,
                                      initializer=start_worker, initargs=(os.getpid(),))

    def run(self, tasks: Sequence[Task], on_done: OnDone, call: Call = run_point) -> None:
        ex = self._kept or self._start()
        try:
            futures = {ex.submit(call, cfg, job): h for h, cfg, job in tasks}

            def cancel() -> None:
                for f in futures:
                    f.cancel()
            # on Ctrl-C nothing is cancelled: CPython's pool (3.11) fails the futures
            # of a pool whose workers were stopped and cannot fail a cancelled one
            _drain(futures, cf.as_completed(futures), on_done, cancel,
                   cancel_on_interrupt=False)
        except (KeyboardInterrupt, SystemExit):
            # the points in flight are abandoned, not waited for (finished ones are
            # stored); the stopped pool fails the rest
            stop_workers(ex)
            self._shutdown(ex, cancel=False)
            raise
        except BaseException:
            self._shutdown(ex, cancel=True)
            raise
        if ex is not self._kept:
            ex.shutdown(wait=True)

    def _shutdown(self, ex: cf.ProcessPoolExecutor, cancel: bool) -> None:
        """Shut ``ex`` down after a failure; a kept pool is not reused after it."""
        ex.shutdown(wait=True, cancel_futures=cancel)
        if ex is self._kept:
            self._kept = None


def stop_workers(ex: cf.ProcessPoolExecutor, grace_s: float = 1.0) -> None:
    """Terminate the worker processes of ``ex`` (SIGTERM, then SIGKILL after
    ``grace_s``), so that shutting it down does not wait for the points they compute.
    Relies on the executor's ``_processes`` (CPython's, since 3.2); without it the
    shutdown waits as before."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(OSError, AttributeError):
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            with contextlib.suppress(OSError, AttributeError):
                p.kill()
            p.join(grace_s)


class DaskCluster(Backend):
    """Points on a Dask distributed cluster; entering connects to its scheduler."""

    def __init__(self, address: str):
        self.address = address
        self.client: Any = None

    def __enter__(self) -> DaskCluster:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError("--scheduler", "Dask distributed is not installed "
                                             "(pip install 'h2m2sim[distributed]')") from None
        try:
            _reach(self.address)
            self.client = Client(self.address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except Exception as err:  # noqa: BLE001 - any failure to connect is the user's
            raise ConfigError("--scheduler", f"cannot connect to {self.address}: {err}") \
                from None
        return self

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def run(self, tasks: Sequence[Task], on_done: OnDone, call: Call = run_point) -> None:
        from distributed import as_completed
        client = self.client
        if client is None:
            raise RuntimeError("DaskCluster.run outside its `with` block")
        futures = {client.submit(call, cfg, job, pure=False,
                                 key=f"h2m2sim-point-{i}-{h[:16]}-{time.time_ns()}"): h
                   for i, (h, cfg, job) in enumerate(tasks)}

        def cancel() -> None:
            client.cancel(list(futures))
        _drain(futures, as_completed(futures, loop=client.loop), on_done, cancel)


def _reach(address: str) -> None:
    """Open and close one connection to the scheduler at ``address`` (within
    :data:`CONNECT_TIMEOUT`, with the Dask configuration's security settings), so that
    an address out of reach, or TLS without its settings, fails before a ``Client``
    exists: a Client that failed to start waits twice the timeout in its finalizer."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    async def once() -> None:
        comm = await connect(address, timeout=CONNECT_TIMEOUT,
                             **Security().get_connection_args("client"))
        await comm.close()
    asyncio.run(once())


def backend_for(workers: int = 1, scheduler: str | None = None,
                n_tasks: int | None = None, keep: bool = False) -> Backend:
    """``scheduler`` (a Dask address) wins over ``workers``; ``workers == 1`` (or a
    single task) runs in this process, more use a spawn process pool of at most
    ``n_tasks`` processes (kept between runs with ``keep``)."""
    if scheduler:
        return DaskCluster(scheduler)
    if n_tasks is not None:
        workers = min(workers, n_tasks)
    return InProcess() if workers <= 1 else ProcessPool(workers, keep)


def execute(tasks: Sequence[Task], on_done: OnDone, workers: int = 1,
            scheduler: str | None = None) -> None:
    """Run ``tasks`` (config hash, config, job) on :func:`backend_for` and call
    ``on_done(config_hash, record)`` in the calling process as each finishes."""
    if not tasks:
        return
    with backend_for(workers, scheduler, len(tasks)) as backend:
        backend.run(tasks, on_done)

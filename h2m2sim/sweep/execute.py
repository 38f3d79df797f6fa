"""Running sweep points: in-process, on a local process pool, or on Dask distributed.

Workers receive the resolved config and the job function (pickled by reference, so the
job must be a top-level function of an importable module) and return the point's
record; only the coordinating process writes to the result store, so workers on other
machines need no shared file system. Local pool workers end themselves when the sweep
process that started them is gone (even after SIGKILL, which no handler sees), so they
never run on as orphans.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from h2m2sim import runner
from h2m2sim.errors import ConfigError, SimError

__all__ = ["run_point", "execute", "exit_with_parent", "Task", "WorkerDied"]


class WorkerDied(SimError):
    """A worker process of the local pool ended without returning a result."""


CONNECT_TIMEOUT = "20s"  # how long to try reaching a Dask scheduler
PARENT_POLL_S = 0.25     # how often a pool worker checks that its sweep process lives
Task = tuple[str, Any, Callable[[Any], Any]]  # (config hash, RunConfig, job)
OnDone = Callable[[str, dict[str, Any]], None]


def run_point(cfg: Any, job: Callable[[Any], Any]) -> dict[str, Any]:
    """Run one point: ``metrics``, ``error`` and ``timing`` (wall seconds, apart from
    the metrics). A user error (:class:`SimError`, e.g. out of memory) is a result of
    the point and is returned as ``error``; anything else is a bug and propagates,
    which stops the sweep (finished points are kept)."""
    t0 = time.perf_counter()
    try:
        res = runner.run(cfg, job)
    except SimError as err:
        return {"metrics": {}, "error": str(err),
                "timing": {"wall_s": time.perf_counter() - t0}}
    return {"metrics": res.metrics, "error": None, "timing": res.timing}


def _inline(tasks: Sequence[Task], on_done: OnDone) -> None:
    for h, cfg, job in tasks:
        on_done(h, run_point(cfg, job))


def _drain(futures: dict, wait_iter: Any, on_done: OnDone, cancel: Callable[[], None]
           ) -> None:
    """Record every future as it completes; on the first failure cancel what has not
    started, keep recording what still finishes, then re-raise the failure."""
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
        cancel()
        raise
    if failure is not None:
        raise failure


def exit_with_parent(parent_pid: int) -> None:
    """Pool worker initializer: end this process as soon as ``parent_pid`` is no longer
    its parent. A daemon thread polls ``os.getppid()`` every :data:`PARENT_POLL_S`
    seconds; it runs while a point computes, because the DRAM engine releases the GIL.
    (Linux's PR_SET_PDEATHSIG is not used: it follows the thread that started the
    worker, not the process, and exists on Linux only.)"""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # nothing to flush: workers write no files of the sweep

    threading.Thread(target=watch, name="h2m2sim-parent-watch", daemon=True).start()


def _pool(tasks: Sequence[Task], workers: int, on_done: OnDone) -> None:
    ctx = multiprocessing.get_context("spawn")  # fork is unsafe with threads (numba, tqdm)
    ex = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                initializer=exit_with_parent, initargs=(os.getpid(),))
    try:
        futures = {ex.submit(run_point, cfg, job): h for h, cfg, job in tasks}

        def cancel() -> None:
            for f in futures:
                f.cancel()
        _drain(futures, cf.as_completed(futures), on_done, cancel)
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def _dask(tasks: Sequence[Task], address: str, on_done: OnDone) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--scheduler", "Dask distributed is not installed "
                                         "(pip install 'h2m2sim[distributed]')") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise ConfigError("--scheduler", f"cannot connect to {address}: {err}") from None
    try:
        futures = {client.submit(run_point, cfg, job, pure=False,
                                 key=f"h2m2sim-point-{i}-{h[:16]}-{time.time_ns()}"): h
                   for i, (h, cfg, job) in enumerate(tasks)}

        def cancel() -> None:
            client.cancel(list(futures))
        _drain(futures, as_completed(futures, loop=client.loop), on_done, cancel)
    finally:
        client.close()


def execute(tasks: Sequence[Task], on_done: OnDone, workers: int = 1,
            scheduler: str | None = None) -> None:
    """Run ``tasks`` (config hash, config, job) and call ``on_done(config_hash, record)``
    in the calling process as each finishes (in completion order). ``scheduler`` (a
    Dask address) wins over ``workers``; ``workers == 1`` runs in this process, more use
    a spawn process pool."""
    if not tasks:
        return
    if scheduler:
        _dask(tasks, scheduler, on_done)
    elif workers <= 1 or len(tasks) == 1:
        _inline(tasks, on_done)
    else:
        _pool(tasks, min(workers, len(tasks)), on_done)

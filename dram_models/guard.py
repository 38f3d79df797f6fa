"""How a command line tool ends: the exit status and the one line a user sees.

Shared by ``dram_models.bench``, ``dram_models.replay`` and ``h2m2sim``, so that every
command answers the same way:

* a user error (:class:`~dram_models.errors.SimError`: bad option, setting, standard or
  trace) prints ``error: ...`` on one line and exits with :data:`USER_ERROR` (2); so
  does a request for more memory than the machine has (:class:`MemoryError`);
* anything else is a bug of the simulator: one line ``internal error: ...`` with a hint
  to rerun with ``--debug``, which shows the traceback instead; :data:`INTERNAL_ERROR`
  (70, ``EX_SOFTWARE`` of sysexits.h);
* Ctrl-C exits silently with 130 and a closed output pipe (``... | head``) with 141, the
  statuses a shell reports for SIGINT and SIGPIPE.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from .errors import SimError

USER_ERROR = 2
INTERNAL_ERROR = 70
INTERRUPTED = 130
BROKEN_PIPE = 141


def one_line(text: object, limit: int = 500) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def guarded(call: Callable[[], int], *, debug: bool, rerun: str) -> int:
    """Run ``call`` and map what escapes it to an exit status (see the module docstring).
    ``rerun`` is the command to show in the hint, e.g. ``"h2m2sim --debug run ..."``."""
    try:
        status = call()
        sys.stdout.flush()              # a closed pipe fails here, not at exit
        return status
    except SimError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return USER_ERROR
    except BrokenPipeError:
        _drop_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        return INTERRUPTED
    except MemoryError:
        # a size the inputs ask for (a count of requests, a batch) that this machine
        # cannot allocate: the user's to lower, not a bug
        print("error: out of memory: the inputs ask for more memory than this machine "
              "can allocate (a count or size too large?)", file=sys.stderr)
        return USER_ERROR
    except Exception as err:            # noqa: BLE001 -- the last line of defence
        if debug:
            raise
        print(f"internal error: {type(err).__name__}: {one_line(err) or '(no message)'} "
              f"(rerun with {rerun} for the traceback)", file=sys.stderr)
        return INTERNAL_ERROR


def exit_with(status: int) -> None:
    """End the process with ``status``, the way a command's entry point should. After
    Ctrl-C it ends at once: Python's normal exit would first wait for the threads of a
    simulation in flight (the DRAM engine runs outside the interpreter and cannot be
    interrupted; a large run takes seconds). Everything the command writes is written
    atomically, so nothing half-written is left; multiprocessing's finalizers still run,
    so no semaphore of a process pool is reported leaked."""
    if status != INTERRUPTED:
        sys.exit(status)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C changes nothing
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    mp_util = sys.modules.get("multiprocessing.util")
    run_finalizers = getattr(mp_util, "_run_finalizers", None)
    if run_finalizers is not None:
        run_finalizers(0)      # named semaphores and queues of process pools
    os._exit(status)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush of it at exit does not fail a
    second time on the closed pipe (the recipe of the Python docs, 'Note on SIGPIPE')."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return                          # not a file (a test's capture): nothing to flush
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)

"""What a command shows besides its results: log messages and progress bars, on stderr.

Library modules log through ``logging.getLogger(__name__)`` and show the progress of a
long task with :func:`progress`; they never configure anything. A command-line entry
point calls :func:`configure` once with the user's ``-v``/``-q`` counts:

* default: warnings; on a terminal also information (what is being done, a first
  compile) and progress bars, which belong together: a script or a pipe reading stderr
  gets warnings and the one-line error only;
* ``-q``: warnings and errors only, no progress bars (``-qq``: errors only);
* ``-v``: information wherever stderr goes, and debug messages of ``h2m2sim`` and
  ``dram_models`` (other libraries, e.g. Numba, stay at warnings).

Results stay on stdout, so ``--json`` output is JSON alone whatever is logged. Used as a
library without :func:`configure`, Python's default applies: warnings only.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time

PACKAGES = ("dram_models", "h2m2sim")

_progress: bool | None = None       # None: on when stderr is a terminal
_verbose = 0
_inner = contextvars.ContextVar("progress_inner", default=True)
_handler: logging.Handler | None = None


class _Formatter(logging.Formatter):
    """Information as it is; warnings and errors prefixed like the one-line errors of
    :mod:`dram_models.guard` (``warning: ...``); debug messages name their module."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            msg = f"{record.levelname.lower()}: {msg}"
        elif record.levelno < logging.INFO:
            msg = f"debug: {record.name}: {msg}"
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return msg


class _StderrHandler(logging.Handler):
    """Writes to ``sys.stderr`` as it is when the message comes (a redirect or a test's
    capture made after :func:`configure` still gets it), through ``tqdm.write`` once
    tqdm is loaded, so that a message does not cut through a progress bar."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Information only on a terminal, as progress bars, unless ``-v``."""
        if logging.INFO <= record.levelno < logging.WARNING and not _verbose:
            return _progress is not False and _is_terminal(sys.stderr)
        return super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            tqdm = sys.modules.get("tqdm")
            if tqdm is not None:
                tqdm.tqdm.write(msg, file=sys.stderr)
            else:
                sys.stderr.write(msg + "\n")
        except Exception:               # noqa: BLE001 -- logging's own convention
            self.handleError(record)


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):       # a closed stream
        return False


def level_for(verbose: int = 0, quiet: int = 0) -> int:
    """The logging level of this package's loggers for ``-v`` x verbose, ``-q`` x quiet."""
    return min(max(logging.INFO + 10 * (quiet - verbose), logging.DEBUG), logging.CRITICAL)


def add_arguments(parser, default=0) -> None:
    """``-v/--verbose`` and ``-q/--quiet`` (both repeatable) on ``parser``; ``default``
    ``argparse.SUPPRESS`` on a subcommand's parser, so that one given before the
    subcommand name is not reset by the subcommand's parser."""
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="information messages also when stderr is not a terminal, "
                             "and debug messages of the simulator")
    parser.add_argument("-q", "--quiet", action="count", default=default,
                        help="no progress bars and no information messages, warnings "
                             "only (-qq: errors only)")


def configure(verbose: int = 0, quiet: int = 0) -> None:
    """Set up logging and progress for a command (see the module docstring). Calling it
    again replaces the previous set-up (tests run several commands in one process)."""
    global _handler, _progress, _verbose
    level = level_for(verbose, quiet)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    _handler = _StderrHandler()
    _handler.setFormatter(_Formatter())
    root.addHandler(_handler)
    root.setLevel(max(level, logging.WARNING))
    for name in PACKAGES:
        logging.getLogger(name).setLevel(level)
    logging.captureWarnings(True)       # warnings.warn of a library: one line as well
    _progress = False if quiet else None
    _verbose = verbose


def thread_lock_only() -> None:
    """Progress bars of this process take a thread lock only. tqdm's default lock also
    holds a multiprocessing lock, which in a spawned process is a named semaphore: a pool
    worker stopped by a signal cannot release it, and the resource tracker then reports
    it leaked. Call before the first bar."""
    from tqdm import tqdm
    tqdm.set_lock(threading.RLock())


def progress(total: int | None, desc: str, unit: str = "it", leave: bool = True,
             enabled: bool | None = None):
    """A tqdm progress bar on stderr (a context manager with ``update(n)``), or one that
    shows nothing: with ``-q``, when stderr is not a terminal, inside
    :func:`inner_progress_off`, or with ``enabled=False``. ``enabled=True`` shows it even
    when stderr is not a terminal (a command's explicit ``--progress``)."""
    from tqdm import tqdm
    if enabled is None:
        enabled = _progress
    if not _inner.get():
        enabled = False
    bar = tqdm(total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr,
               dynamic_ncols=True, disable=None if enabled is None else not enabled)
    if not bar.disable:
        threading.Thread(target=_tick, args=(bar,), daemon=True).start()
    return bar


def _tick(bar, every_s: float = 1.0) -> None:
    """Redraw ``bar`` every second until it is closed: tqdm redraws only on an update,
    and one step can take minutes (a first compile), during which the elapsed time
    should still move."""
    while not bar.disable:              # close() sets it
        time.sleep(every_s)
        bar.refresh()                   # a no-op once closed


@contextlib.contextmanager
def inner_progress_off():
    """No progress bars in this block (in this thread and the threads it starts with its
    context): a task that has its own bar, e.g. a sweep point, runs quietly inside."""
    token = _inner.set(False)
    try:
        yield
    finally:
        _inner.reset(token)

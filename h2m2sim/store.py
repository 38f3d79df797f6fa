"""Result stores (a run's, a sweep's), output locations, and atomic file writes.

**A run** (``h2m2sim run CONFIG --out DIR``) writes::

    DIR/
      result.json         config hash, h2m2sim version, git revision, metrics
      config.yaml         the fully resolved configuration
      timing.json         wall-clock times of the run, in seconds (see "Results and
                          timings" below), and under "environment" the software
                          and host they were measured on (:func:`environment`)

**A sweep** (``h2m2sim sweep ... --out DIR``) writes::

    DIR/
      sweep.yaml          the sweep as run: base config inlined, axes, --set applied
      meta.json           format tag, h2m2sim version, git revision, axes, point count,
                          sha256 of the plan, when it was created / last updated, and
                          the "environment" of the last start (:func:`environment`)
      plan.json           every point of the sweep: index, config hash, swept values
      points/<hash>.json  one file per finished point (the source of truth): config
                          hash, swept values, the fully resolved config, all metrics
                          (including nested ones such as 'breakdown'), error message if
                          the point failed with a user error, h2m2sim version, git
                          revision, and a 'timing' object with the point's wall times
      results.csv         one row per finished point, in point order (derived from
                          plan.json + points/, rewritten atomically during and after
                          the sweep)
      timings.csv         the wall times of the same rows: point, config_hash, then one
                          column per timing (wall_s, decision_s, ..., finished_at)

``results.csv`` columns, in this order: ``point`` (index in the sweep), ``config_hash``
(sha256 of the resolved config, :func:`h2m2sim.cache.config_hash`), one column per
swept key path (for example ``workload.seq``, ``system.preset``), ``error`` (only if a
point failed with a user error such as out-of-memory), then every scalar metric in the
order the job reported them; nested metric mappings are flattened with dots
(``breakdown.attention_ns``). Lists are kept in the point files only. Cells: integers
and floats are written exactly (``repr``), booleans as ``true``/``false``, missing
values empty, lists and mappings (e.g. an inline system as a swept value) as compact
JSON. CSV was chosen over Parquet because every tool reads it and rows are few (one per
simulated point); the point files keep the full-precision, nested data.

**Results and timings.** Results depend only on the configuration: the same config and
seed give a byte-identical ``result.json``, and a sweep interrupted and resumed gives
the same ``results.csv`` and point files (outside their ``timing`` object) as one run
without interruption. Wall-clock times vary from run to run, so they are kept apart:
a job's metric is a wall time when it is named ``decision_s`` (how long a mapper took
to decide), ``elapsed_s``, or has ``wall`` as a word of its name (``wall_s``); these go
to ``timing.json`` / the ``timing`` object / ``timings.csv``, together with the
run's own ``wall_s`` (seconds, baseline run included) and ``finished_at``. Times
of the baseline run carry a ``baseline_`` prefix.

**Output locations are never reused silently.** ``run --out DIR`` refuses a folder
that already holds a run result; pass ``--overwrite`` to replace it (the three files
are written under temporary names first, then renamed into place, ``result.json``
last) or choose another ``--out``. ``sweep --out DIR`` refuses a folder that already
holds a sweep unless ``--resume`` is given, and ``--resume`` refuses a folder holding
a *different* sweep: the sha256 of the plan (axes, every point's config hash and
swept values) must match; resume with the folder's own ``DIR/sweep.yaml`` to finish
it. Neither command writes into the other's folder. An output that cannot be written
(a file where a folder should be, a read-only folder) is reported as one line naming
the path and the system's reason before anything runs; this holds for ``plot --out``
and ``model --export-trace`` too; an empty ``--out`` is refused, and a name or path
longer than the file system allows is named (shortened) with the limit. A new sweep
that fails before finishing any point removes what it created, so the same ``--out``
can be used again.

**One writer per folder.** While a run or a sweep writes its folder it holds an
exclusive lock (``flock``) on ``DIR/.h2m2sim.lock``, a file holding its process id and
removed when it ends. A second ``run``, ``sweep`` or ``sweep --resume`` into that folder
is refused at once, naming the holder's pid. The system drops the lock when its holder
ends, even by SIGKILL, so the file a killed process leaves behind blocks nothing. A
sweep folder whose plan has more points than finished records (a killed sweep, or one
still running) is read with a warning saying how many finished
(:meth:`ResultStore.incomplete`).

Every file is written to a temporary name in the same directory and renamed into place
with ``os.replace``, so a killed run or sweep leaves only whole files behind;
``--resume`` skips every point whose ``points/<hash>.json`` exists. Files get the
permissions the umask gives any new file (0644 under umask 022).

**Provenance.** The git revision is asked of git when h2m2sim runs from its own
checkout, and otherwise read from ``h2m2sim/_version.py``, which setuptools-scm writes
when the package is built (``pip install .``), so an installed copy still names the
commit it was built from (abbreviated). ``environment`` (python, numpy and numba
versions, CPU model, platform) sits with the wall times because it explains them.
"""
from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import importlib.metadata
import io
import json
import logging
import math
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # Windows: output folders are not locked
    fcntl = None  # type: ignore[assignment]

from h2m2sim import version
from h2m2sim.version import __version__
from h2m2sim.errors import ConfigError, SimError
from h2m2sim.outputs import (check_regular, given_out, not_a_dir, output_error,
                             path_exists, prepare_dir, prepare_file, refuse_inputs,
                             remove_empty_dirs, same_file, shown_path, writing_to)

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "git_revision",
           "built_revision", "environment", "cpu_model",
           "ResultStore", "RunOutput", "encode_cell", "decode_cell", "csv_text", "flatten_metrics",
           "read_csv", "FORMAT", "output_error", "prepare_dir", "prepare_file",
           "writing_to", "atomic_output_path", "is_wall_time", "split_timing",
           "plan_digest", "now_iso", "FolderLock", "LOCK_NAME", "shown_path", "given_out",
           "check_regular", "refuse_inputs", "same_file", "json_safe", "path_exists"]

log = logging.getLogger(__name__)

FORMAT = "h2m2sim-sweep/2"  # /1 kept wall times among the metrics (read_point converts)

#: Files a sweep writes at its top level (the only ones it may remove again).
SWEEP_FILES = ("sweep.yaml", "meta.json", "plan.json", "results.csv", "timings.csv")


def now_iso() -> str:
    """Local time as ISO 8601 with offset, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@contextlib.contextmanager
def atomic_output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that needs a file name; renamed to
    ``path`` when the block ends without an exception, removed otherwise. The name
    keeps every suffix of ``path`` (``.npz``, ``.csv.gz``), so writers that choose a
    format or append an extension by suffix behave as they would for ``path``."""
    path = Path(path)
    fd, tmp_name = _staging_file(path, ".tmp-", "-" + path.name)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


# -- one writer per folder -------------------------------------------------------------
#: the lock file of an output folder while a run or sweep writes it (module docstring)
LOCK_NAME = ".h2m2sim.lock"
LOCK_TRIES = 20  # times a lock is taken again after its holder removed the file


class FolderLock:
    """An exclusive ``flock`` on ``FOLDER/.h2m2sim.lock`` while this process writes the
    folder. Taking it never waits: a folder another process holds is refused at once
    (:meth:`acquire`). The system drops the lock when its holder ends, even by SIGKILL,
    so a lock file left by a killed process blocks nobody. Without ``fcntl`` (Windows),
    or on a file system that cannot lock, folders are not locked."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, key: str = "--out") -> None:
        """Take the lock and write this process's id into the file. Refused with one
        line naming the folder and the holder's pid when another process has it; an
        OSError (the folder cannot be written) propagates."""
        if fcntl is None or self._fd is not None:
            return
        for _ in range(LOCK_TRIES):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            if not self._lock(fd, key):
                return
            if _same_file(fd, self.path):
                break
            os.close(fd)    # the holder removed the file as it let go: lock the new one
        else:
            raise ConfigError(key, f"cannot lock {shown_path(self.folder)}: its lock file "
                                   "keeps being replaced")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def _lock(self, fd: int, key: str) -> bool:
        """flock ``fd``: True when taken, False (fd closed, a warning) when the file
        system cannot lock; another holder is the error of :meth:`acquire`."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            holder = _pid_in(fd)
            os.close(fd)
            pid = f" (pid {holder})" if holder else ""
            raise ConfigError(key, f"another h2m2sim process{pid} is writing "
                                   f"{shown_path(self.folder)}; wait for it to end or "
                                   "choose another folder") from None
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            with contextlib.suppress(OSError):
                self.path.unlink()
            log.warning("cannot lock %s (%s): another process writing it at the same "
                        "time would not be noticed", self.folder, err.strerror)
            return False

    def release(self) -> None:
        """Remove the lock file and let go of the lock (nothing if not held). The file
        goes first: a process that opened it meanwhile sees it replaced and retries."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def _pid_in(fd: int) -> int | None:
    """The process id a lock file holds, None if it holds none (yet)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(os.pread(fd, 32, 0).split()[0])
    return None


# -- atomic writes ----------------------------------------------------------------------
def _umask() -> int:
    """The process's umask: read from /proc on Linux; elsewhere set and restored at
    once (the only portable way to read it)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status") as fh:
            line = next(x for x in fh if x.startswith("Umask:"))
        return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _staging_file(path: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """(fd, name) of a new temporary file beside ``path`` with the permissions a plain
    ``open`` would give it: mkstemp makes it 0600 whatever the umask, and a result that
    only its writer can read is a surprise in a shared results folder."""
    check_regular(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one,
    never a partial one (temporary file in the same directory, fsync, os.replace).
    Safe when several processes write the same path concurrently."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _staging_file(path, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def json_safe(obj: Any) -> Any:
    """``obj`` as strict JSON can hold it: NaN and infinities (a metric a run could not
    compute) become null, NumPy scalars Python numbers, tuples lists."""
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(obj: Any) -> str:
    """The JSON rendering of every stored file (one key per line, key order kept;
    strict JSON: :func:`json_safe`)."""
    return json.dumps(json_safe(obj), indent=1, sort_keys=False, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


_GIT: list[str | None] = []


def git_revision() -> str | None:
    """Commit of the h2m2sim code that runs. From a git checkout of h2m2sim: its HEAD,
    ``+dirty`` if tracked files have uncommitted changes. From an installed package: the
    revision baked into it when it was built (:func:`built_revision`). None if neither is
    known."""
    if not _GIT:
        _GIT.append(_checkout_revision() or built_revision())
    return _GIT[0]


def _checkout_revision() -> str | None:
    """HEAD of the git checkout whose top folder holds this package, or None (git asked
    from an installed package would name whatever repository the environment sits in)."""
    pkg = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        lines = out.stdout.split()
        if out.returncode or len(lines) != 2 or Path(lines[0]).resolve() != pkg.parent:
            return None
        dirty = subprocess.run(["git", "-C", str(pkg), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return lines[1] + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def built_revision() -> str | None:
    """The abbreviated commit (``+dirty`` as above) that setuptools-scm wrote into
    ``h2m2sim/_version.py`` when the package was built; None for a source tree that was
    never built, or a build without git metadata."""
    node = version.BUILT_NODE
    if not node:
        return None
    node = node[1:] if node.startswith("g") else node   # git describe's 'g' prefix
    return node + ("+dirty" if version.BUILT_DIRTY else "")


def environment() -> dict[str, Any]:
    """The software and host a run was timed on: python, numpy and numba versions, CPU
    model, operating system. Wall times depend on them and results should not, so they
    are stored beside the wall times, never among the metrics."""
    return {"python": platform.python_version(), "numpy": _dist_version("numpy"),
            "numba": _dist_version("numba"), "cpu": cpu_model(),
            "platform": platform.platform()}


def _dist_version(name: str) -> str | None:
    """Installed version of distribution ``name`` (without importing it)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what :mod:`platform` knows."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    return platform.processor() or platform.machine()


# -- results and timings ----------------------------------------------------------------
#: Metric names that are wall-clock times whatever their spelling (module docstring).
WALL_TIME_NAMES = frozenset({"decision_s", "elapsed_s"})


def is_wall_time(name: str) -> bool:
    """Whether metric ``name`` is a wall-clock time (module docstring, "Results and
    timings"), which varies from run to run and so is kept out of the results."""
    return name in WALL_TIME_NAMES or "wall" in name.split("_")


def split_timing(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(results, wall times) of a job's metrics, each keeping the job's order; nested
    mappings are split alike (a timing keeps its dotted path as its name)."""
    results: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, Mapping):
            inner, inner_timing = split_timing(v)
            results[k] = inner
            timing.update({f"{k}.{n}": t for n, t in inner_timing.items()})
        elif is_wall_time(k):
            timing[k] = v
        else:
            results[k] = v
    return results, timing


def plan_digest(axes: list[str], points: list[dict[str, Any]]) -> str:
    """sha256 (hex) of a sweep's plan: its axes and every point's index, config hash and
    swept values, in a canonical JSON rendering (so a plan read back from plan.json has
    the digest of the plan that was written)."""
    plain = json.loads(json.dumps({"axes": list(axes), "points": list(points)},
                                  allow_nan=True))
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


# -- CSV cells --------------------------------------------------------------------------
def encode_cell(value: Any) -> str:
    """One CSV cell for ``value`` (see the module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def decode_cell(text: str) -> Any:
    """Inverse of :func:`encode_cell` (strings that look like numbers become numbers)."""
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar metrics with nested mappings flattened to dotted names; lists dropped."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_metrics(v, name + "."))
        elif v is None or isinstance(v, (bool, int, float, str)):
            out[name] = v
    return out


def read_csv(path: str | os.PathLike) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and decoded rows of a results CSV."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return [], []
        rows = [{c: decode_cell(v) for c, v in zip(header, line)} for line in reader]
    return header, rows


def csv_text(header: list[str], lines: Iterable[list[Any]]) -> str:
    """A CSV table: ``header``, then one row per line, each cell as :func:`encode_cell`
    writes it."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for line in lines:
        writer.writerow([encode_cell(v) for v in line])
    return buf.getvalue()


# -- a run's folder ---------------------------------------------------------------------
class RunOutput:
    """The output folder of one run (layout in the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = given_out(root)
        self.result_path = self.root / "result.json"
        self.config_path = self.root / "config.yaml"
        self.timing_path = self.root / "timing.json"
        self._created: Path | None = None
        self._lock = FolderLock(self.root)

    def paths(self) -> tuple[Path, Path, Path]:
        """The files a stored run consists of."""
        return self.result_path, self.config_path, self.timing_path

    def prepare(self, overwrite: bool = False) -> None:
        """Refuse a folder holding a sweep, or a run result unless ``overwrite``; then make
        the folder, check that it can be written and lock it (:class:`FolderLock`), all
        before the run, which may be long. The refusals are checked again under the
        lock: another process may have written the folder meanwhile. The lock is held
        until :meth:`write` or :meth:`abandon`."""
        self._refuse(overwrite)
        self._created = prepare_dir(self.root)
        try:
            with writing_to(self.root):
                self._lock.acquire()
            self._refuse(overwrite)
        except BaseException:
            self.abandon()
            raise

    def _refuse(self, overwrite: bool) -> None:
        where = shown_path(self.root)
        with writing_to(self.root):
            if (self.root / "plan.json").exists():
                raise ConfigError("--out", f"{where} holds a sweep; choose another --out")
            if self.result_path.exists() and not overwrite:
                raise ConfigError("--out", f"{where} already holds a run result "
                                           "(result.json); choose another --out or pass "
                                           "--overwrite to replace it")

    def abandon(self) -> None:
        """Let go of the folder: unlock it and remove the folders :meth:`prepare`
        created, if they are still empty."""
        self._lock.release()
        remove_empty_dirs(self.root, self._created)

    def write(self, result: Mapping[str, Any], config_yaml: str,
              timing: Mapping[str, Any]) -> None:
        """Write the three files: each is staged under a temporary name first, then all
        are renamed into place with ``result.json`` last, so a failure never leaves a new
        ``result.json`` beside an old configuration. Unlocks the folder."""
        try:
            self._write(result, config_yaml, timing)
        finally:
            self._lock.release()

    def _write(self, result: Mapping[str, Any], config_yaml: str,
               timing: Mapping[str, Any]) -> None:
        staged: list[tuple[Path, Path]] = []
        with writing_to(self.root):
            try:
                for path, text in ((self.config_path, config_yaml),
                                   (self.timing_path, json_text(dict(timing))),
                                   (self.result_path, json_text(dict(result)))):
                    fd, tmp = _staging_file(path, f".{path.name}.", ".tmp")
                    staged.append((Path(tmp), path))
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(text.encode())
                        fh.flush()
                        os.fsync(fh.fileno())
                for tmp, path in staged:
                    os.replace(tmp, path)
            finally:
                for tmp, _ in staged:
                    with contextlib.suppress(OSError):
                        tmp.unlink()


def _plan_problem(plan: Any) -> str | None:
    """What makes ``plan`` not a stored sweep plan, or None."""
    if not isinstance(plan, dict):
        return "not a JSON object"
    if not isinstance(plan.get("axes", []), list) or not isinstance(plan.get("points"), list):
        return "'axes' and 'points' must be lists"
    if not all(isinstance(a, str) for a in plan.get("axes", [])):
        return "'axes' must be a list of key paths (strings)"
    for i, p in enumerate(plan["points"]):
        if not (isinstance(p, dict) and isinstance(p.get("config_hash"), str)
                and isinstance(p.get("index"), int)
                and isinstance(p.get("params", {}), dict)):
            return f"point {i} lacks its index, config_hash or params"
    return None


def _load_record(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) when the point file ``path`` holds its record, else (None, why
    not). A record of format /1 comes with its wall times moved into ``timing`` as in
    the current format."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return None, " ".join(str(err).split())[:200]
    if not isinstance(rec, dict):
        return None, "not a JSON object"
    if rec.get("config_hash") != path.stem:
        return None, "it names another point"
    if not all(isinstance(rec.get(k) or {}, dict)
               for k in ("metrics", "timing", "params", "config")):
        return None, "its metrics, timing, params or config are not JSON objects"
    if "timing" not in rec:
        metrics, timing = split_timing(rec.get("metrics") or {})
        rec["metrics"] = metrics
        rec["timing"] = {"wall_s": rec.pop("elapsed_s", None), **timing,
                         "finished_at": rec.pop("finished_at", None)}
    return rec, None


# -- a sweep's folder -------------------------------------------------------------------
class ResultStore:
    """The output directory of one sweep (layout in the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        if not isinstance(root, (str, os.PathLike)):
            given_out(root)             # the one-line error naming --out
        self.given = os.fspath(root)  # before Path() turns "" into "."
        self.root = Path(root)
        self.points_dir = self.root / "points"
        self.plan_path = self.root / "plan.json"
        self.meta_path = self.root / "meta.json"
        self.csv_path = self.root / "results.csv"
        self.timings_path = self.root / "timings.csv"
        self.spec_path = self.root / "sweep.yaml"
        self._created: Path | None = None
        self._warned: set[Path] = set()
        self._lock = FolderLock(self.root)
        self._checked: tuple[list[str], list[dict[str, Any]], bool] | None = None

    def files(self) -> tuple[Path, ...]:
        """The files a sweep writes at the folder's top (points apart)."""
        return (self.plan_path, self.meta_path, self.csv_path, self.timings_path,
                self.spec_path)

    # -- opening ---------------------------------------------------------------------
    def holds_sweep(self) -> bool:
        """Whether the folder holds a sweep (a plan or any finished point)."""
        return self.plan_path.exists() or bool(self.finished())

    def check(self, axes: list[str], plan: list[dict[str, Any]], resume: bool) -> bool:
        """Refuse to write this sweep here: a folder holding a run result; one holding a
        sweep without ``resume``; with ``resume``, one holding a different sweep (plan
        digest). Writes nothing. Returns whether the folder holds no sweep yet."""
        given_out(self.given)
        self._checked = (axes, plan, resume)
        with writing_to(self.root):
            if self.root.exists() and not self.root.is_dir():
                raise not_a_dir(self.root)
            if (self.root / "result.json").exists():
                raise ConfigError("--out", f"{shown_path(self.root)} holds a run result "
                                           "(result.json); choose another --out")
            if not self.holds_sweep():
                return True
        return self._check_resume(axes, plan, resume)

    def _check_resume(self, axes: list[str], plan: list[dict[str, Any]],
                      resume: bool) -> bool:
        """:meth:`check` for a folder that holds a sweep."""
        where = shown_path(self.root)
        done = self.finished()
        if not resume:
            raise ConfigError("--out", f"{where} already holds a sweep ({len(done)} "
                                       "finished points); pass --resume to continue it or "
                                       "choose another --out")
        stored = self.plan()
        old = plan_digest(stored.get("axes", []), stored.get("points", []))
        new = plan_digest(axes, plan)
        if old != new:
            raise ConfigError("--out", f"{where} holds a different sweep (plan sha256 "
                                       f"{old[:12]}, this sweep {new[:12]}); choose another "
                                       f"--out, or resume it with its own file: h2m2sim "
                                       f"sweep {self.spec_path} --out {where} --resume")
        return False

    def prepare(self) -> bool | None:
        """Make the folder, check that it can be written (:func:`prepare_dir`) and lock
        it (:class:`FolderLock`, held until :meth:`filling` ends), then repeat the last
        :meth:`check` under the lock, since another process may have written the folder
        meanwhile. Returns what that check returns (None if there was none)."""
        self._created = prepare_dir(self.root)
        try:
            with writing_to(self.root):
                self._lock.acquire()
            return self.check(*self._checked) if self._checked else None
        except BaseException:
            self._lock.release()
            remove_empty_dirs(self.root, self._created)
            raise

    # -- writing ---------------------------------------------------------------------
    def start(self, spec_yaml: str, axes: list[str], plan: list[dict[str, Any]]) -> None:
        """Record the sweep (spec, axes and every point's index/hash/swept values)."""
        with writing_to(self.root):
            self.points_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.spec_path, spec_yaml)
            atomic_write_json(self.plan_path, {"axes": axes, "points": plan})
            meta = self.meta()
            now = now_iso()
            atomic_write_json(self.meta_path, {
                "format": FORMAT, "h2m2sim_version": __version__,
                "git_revision": git_revision(), "created": meta.get("created", now),
                "updated": now, "axes": axes, "n_points": len(plan),
                "plan_sha256": plan_digest(axes, plan), "environment": environment()})

    def discard(self) -> None:
        """Remove what :meth:`prepare` and :meth:`start` created, for a new sweep that
        failed before finishing any point: the sweep's own files, ``points/`` if empty,
        and the folders :meth:`prepare` made if empty. Nothing else is touched."""
        for name in SWEEP_FILES:
            with contextlib.suppress(OSError):
                (self.root / name).unlink()
        with contextlib.suppress(OSError):
            self.points_dir.rmdir()
        remove_empty_dirs(self.root, self._created)

    @contextlib.contextmanager
    def filling(self, fresh: bool, extra: Sequence[str] = ()):
        """Run the body that fills this store, then rebuild its CSVs. If the body fails,
        a new store that finished no point is discarded (with its ``extra`` files) and a
        resumed one keeps CSVs that match its stored points. The folder is unlocked
        at the end either way."""
        try:
            try:
                yield
            except BaseException:
                self._clean_up(fresh, extra)
                raise
            self.rebuild()
        finally:
            self._lock.release()

    def _clean_up(self, fresh: bool, extra: Sequence[str]) -> None:
        """After a failure: :meth:`discard` a new store that finished no point (and its
        ``extra`` files), else rebuild the CSVs from the points that are whole."""
        if fresh and not self.finished():
            for name in extra:
                with contextlib.suppress(OSError):
                    (self.root / name).unlink()
            self._lock.release()    # first: its file would keep the folder from going
            self.discard()
        elif self.plan_path.exists():
            with contextlib.suppress(SimError, OSError):  # the failure matters more
                self.rebuild(strict=False)

    def error_count(self) -> int:
        """Stored points whose run ended in an error."""
        return sum(1 for _, rec in self.records() if rec.get("error"))

    def warn_if_other_revision(self, resume: bool) -> None:
        """Warn when resuming points computed at another git revision."""
        old = self.meta().get("git_revision")
        if resume and self.finished() and old != git_revision():
            log.warning("resuming points computed at git revision %s with %s", old,
                        git_revision())

    def point_path(self, config_hash: str) -> Path:
        return self.points_dir / f"{config_hash}.json"

    def write_point(self, record: Mapping[str, Any]) -> None:
        """Atomically store one finished point (``record['config_hash']`` names it)."""
        with writing_to(self.root):
            atomic_write_json(self.point_path(record["config_hash"]), dict(record))

    # -- reading ---------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        try:
            return json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return {}

    def plan(self) -> dict[str, Any]:
        """The stored plan: ``axes`` (names) and ``points`` (index, config_hash, params
        each); a file of another shape is an error naming it."""
        try:
            plan = json.loads(self.plan_path.read_text())
        except OSError:
            raise ConfigError(str(self.root), "not a sweep result directory (no plan.json)") \
                from None
        except ValueError as err:
            raise ConfigError(str(self.plan_path), f"unreadable: {err}") from None
        problem = _plan_problem(plan)
        if problem:
            raise ConfigError(str(self.plan_path), f"not a sweep plan: {problem}")
        return plan

    def finished(self) -> set[str]:
        """Config hashes of every finished point on disk. A point file that does not hold
        its record (not JSON, not a mapping, another point's hash: damaged after it was
        written) is not finished: it is named in a warning, once, and computed again
        (the new record replaces it atomically)."""
        if not self.points_dir.is_dir():
            return set()
        done = set()
        for path in self.points_dir.glob("*.json"):
            _, problem = _load_record(path)
            if problem is None:
                done.add(path.stem)
            elif path not in self._warned:
                self._warned.add(path)
                log.warning("point file %s is unreadable (%s): the point is computed "
                            "again", path, problem)
        return done

    def read_point(self, config_hash: str) -> dict[str, Any]:
        """One point record; one of format /1 is read with its wall times moved into
        ``timing`` as in the current format."""
        path = self.point_path(config_hash)
        rec, problem = _load_record(path)
        if problem is not None:
            raise SimError(f"{path}: unreadable point record ({problem})")
        return rec

    def records(self, strict: bool = True) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        """(plan entry, point record) for every finished point, in point order. A point
        file that does not hold its record is an error naming the file (``strict``) or
        left out (while a resumed sweep computes it again)."""
        for entry in self.plan()["points"]:
            path = self.point_path(entry["config_hash"])
            if not path.exists():
                continue
            rec, problem = _load_record(path)
            if problem is not None and not strict:
                continue
            if problem is not None:
                raise SimError(f"{path}: unreadable point record ({problem}); rerun the "
                               "sweep with --resume to compute it again")
            yield entry, rec

    def rebuild(self, strict: bool = True) -> Path:
        """Rewrite ``results.csv`` and ``timings.csv`` from the plan and the finished
        points (``strict``: see :meth:`records`)."""
        texts = self._csv_texts(strict)
        with writing_to(self.root):
            self._write_csvs(texts)
        return self.csv_path

    def _csv_texts(self, strict: bool = True) -> tuple[str, str]:
        """The text of ``results.csv`` and of ``timings.csv``."""
        axes = list(self.plan().get("axes", []))
        rows, metric_cols, timing_cols, any_error = [], {}, {}, False
        for entry, rec in self.records(strict):
            metrics = flatten_metrics(rec.get("metrics") or {})
            timing = dict(rec.get("timing") or {})
            metric_cols.update(dict.fromkeys(metrics))
            timing_cols.update(dict.fromkeys(timing))
            any_error |= bool(rec.get("error"))
            rows.append((entry, rec, metrics, timing))
        fixed = ["point", "config_hash"] + axes + (["error"] if any_error else [])
        metric_names = list(metric_cols)
        header = fixed + [m if m not in fixed else f"metric:{m}" for m in metric_names]
        lines = []
        for entry, rec, metrics, _ in rows:
            params = entry.get("params", {})
            line = [entry["index"], entry["config_hash"]] + [params.get(a) for a in axes]
            if any_error:
                line.append(rec.get("error"))
            lines.append(line + [metrics.get(m) for m in metric_names])
        # the durations first, the clock reading after them
        timing_names = sorted(timing_cols, key=lambda n: n == "finished_at")
        timing_lines = [[entry["index"], entry["config_hash"]]
                        + [timing.get(t) for t in timing_names]
                        for entry, _, _, timing in rows]
        return (csv_text(header, lines),
                csv_text(["point", "config_hash"] + timing_names, timing_lines))

    def _write_csvs(self, texts: tuple[str, str]) -> None:
        atomic_write_text(self.csv_path, texts[0])
        atomic_write_text(self.timings_path, texts[1])

    def read(self) -> tuple[list[str], list[dict[str, Any]], list[str]]:
        """(columns, rows, swept axes) of the results, rebuilding the CSV first (when the
        directory is writable; otherwise the CSV is read as it is)."""
        texts = self._csv_texts()
        try:
            self._write_csvs(texts)
        except OSError:
            if not self.csv_path.exists():
                raise ConfigError(str(self.root), "cannot write results.csv and there is "
                                                  "none to read") from None
        try:
            header, rows = read_csv(self.csv_path)
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(str(self.csv_path), f"cannot read: {err}") from None
        return header, rows, list(self.plan().get("axes", []))

    def missing(self) -> list[int]:
        """Indices of the planned points that have no point file (the sweep was
        stopped, or is still running)."""
        return [e["index"] for e in self.plan()["points"]
                if not self.point_path(e["config_hash"]).exists()]

    def incomplete(self) -> str | None:
        """None when every planned point has finished; else a line naming the folder,
        how many points finished and how to finish the others."""
        missing, total = self.missing(), len(self.plan()["points"])
        if not missing:
            return None
        how = ("by rerunning its command with --resume" if self._of_functions() else
               f"with h2m2sim sweep {self.spec_path} --out {self.root} --resume")
        return (f"{shown_path(self.root)}: {total - len(missing)} of {total} points "
                f"finished; resume {how}")

    def _of_functions(self) -> bool:
        """Whether ``sweep.yaml`` is the note of a sweep of function calls, which is
        resumed by its own command (:mod:`h2m2sim.sweeps.tasks`), not a sweep file."""
        with contextlib.suppress(OSError, UnicodeDecodeError):
            with open(self.spec_path) as fh:
                return fh.readline().startswith("# a sweep of function calls")
        return False

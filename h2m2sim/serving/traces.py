"""Request traces: loading, validation and arrival processes.

A :class:`RequestTrace` is a request stream held in NumPy arrays: arrival time (seconds),
prompt length and output length (tokens), and optionally the prompt text and the prompt's
prefix block hashes. It is read from a CSV (plain or ``.gz``) whose header names at least
``prompt_tokens`` and ``output_tokens``; ``arrival_s``, ``prompt`` and
``prefix_block_hashes`` are optional, other columns are ignored. A ``.jsonl`` file (plain
or ``.jsonl.gz``) is read in the Mooncake trace format: one JSON object per line with
``input_length`` and ``output_length`` (tokens), optionally ``timestamp`` (milliseconds)
and ``hash_ids`` (a list of prefix block hashes), each present in every line or in none;
they are checked as the CSV columns ``prompt_tokens``, ``output_tokens``, ``arrival_s``
and ``prefix_block_hashes``.
The bundled traces (``workloads/traces``) can be named without a path: ``azure2023_conv``,
``azure2023_code``, ``alpaca``, ``mooncake2025_conv``.

Every file follows the same rules (:func:`_to_numbers` checks every column): the header
names each column once; at least one data row; ``prompt_tokens`` and ``output_tokens`` are
whole numbers in 0..2**40; ``arrival_s`` is a finite number of seconds in 0..1e9 that never
decreases from row to row (a trace is replayed in file order: unsorted arrivals are
refused, not sorted). ``prefix_block_hashes`` holds space-separated whole numbers in
0..2**62, one per block of the prompt (an empty field: none), with chain semantics (the
hash of block i names the whole prefix up to block i, as vLLM's block hashes and the
Mooncake trace's ``hash_ids``): no hash repeats within a request, and a hash appears at
one block position only and always after the same parent hash. Files of output lengths
(:func:`read_lengths`) hold whole numbers in 1..2**40. Every problem with a file (missing,
a directory, unreadable, not UTF-8 text, a damaged gzip stream, a bad value) is a
:class:`~h2m2sim.errors.ConfigError` whose key names the file and the data row (1-based,
header excluded) and whose message names the column and line.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import sys
import zlib
from pathlib import Path

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.store import path_exists, shown_path

from .random_dataset import RANDOM_ARRIVALS, is_random, random_lengths

__all__ = ["RequestTrace", "load_trace", "poisson_arrivals", "bundled_trace_path",
           "read_lengths", "prefix_reuse_trace", "BUNDLED_TRACES"]

#: Names of the traces shipped in ``workloads/traces`` (resolved by :func:`bundled_trace_path`).
BUNDLED_TRACES = {"azure2023_conv": "azure2023_conv.csv",
                  "azure2023_code": "azure2023_code.csv",
                  "alpaca": "alpaca.csv.gz",
                  "mooncake2025_conv": "mooncake2025_conv.jsonl.gz"}

REQUIRED_COLUMNS = ("prompt_tokens", "output_tokens")

#: Largest token count a trace may give (far beyond any model's context; keeps int64 sums
#: of tokens exact).
MAX_TOKENS = 2**40
#: Latest arrival a trace may give, seconds (32 years: float64 times then still resolve
#: better than a microsecond, so latencies computed from them stay exact).
MAX_ARRIVAL_S = 1e9
#: Largest prefix block hash (whole numbers 0..2**62 stay exact in int64 and in parsing).
MAX_HASH = 2**62
PREFIX_COLUMN = "prefix_block_hashes"
#: Fields of a Mooncake-format JSONL trace: required, then optional.
MOONCAKE_FIELDS = ("input_length", "output_length", "timestamp", "hash_ids")
# what reading a damaged file may raise (gzip: truncated or corrupt streams)
_UNREADABLE = (OSError, EOFError, UnicodeDecodeError, zlib.error)


@dataclasses.dataclass(frozen=True, eq=False)
class RequestTrace:
    """A request stream. Arrays have one entry per request, in arrival order.

    ``arrival_s`` float64 seconds (non-decreasing); ``prompt_tokens`` and ``output_tokens``
    int64 tokens; ``prompt_text`` a tuple of strings or ``None``; ``has_arrivals`` is
    False when the source had no arrival column (then ``arrival_s`` came from an arrival
    process, see ``arrival_note``). ``prefix_hashes`` (int64) and ``prefix_offsets``
    (int64, one more than requests) hold the prompts' prefix block hashes in CSR form:
    request i's are ``prefix_hashes[prefix_offsets[i]:prefix_offsets[i + 1]]``, or both
    are ``None`` when the trace has none.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prompt_text: tuple[str, ...] | None = None
    name: str = "trace"
    has_arrivals: bool = True
    arrival_note: str = ""
    prefix_hashes: np.ndarray | None = None
    prefix_offsets: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.prompt_tokens)
        if len(self.arrival_s) != n or len(self.output_tokens) != n or \
                (self.prompt_text is not None and len(self.prompt_text) != n):
            raise ValueError("RequestTrace arrays must have equal lengths")
        if (self.prefix_hashes is None) != (self.prefix_offsets is None) or (
                self.prefix_offsets is not None and (
                    len(self.prefix_offsets) != n + 1 or
                    int(self.prefix_offsets[-1]) != len(self.prefix_hashes))):
            raise ValueError("RequestTrace prefix hashes need one offset per request plus one")

    @property
    def has_prefix_hashes(self) -> bool:
        return self.prefix_hashes is not None

    def block_hashes(self, i: int) -> np.ndarray:
        """Prefix block hashes of request ``i`` (int64; empty without hashes)."""
        if self.prefix_hashes is None:
            return np.zeros(0, dtype=np.int64)
        return self.prefix_hashes[self.prefix_offsets[i]:self.prefix_offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def has_text(self) -> bool:
        return self.prompt_text is not None

    def subset(self, index) -> "RequestTrace":
        """The requests selected by ``index`` (an index array or boolean mask), in the
        given order (arrival order is the caller's business)."""
        idx = np.arange(len(self))[index]
        text = tuple(self.prompt_text[i] for i in idx) if self.prompt_text is not None else None
        hashes, offsets = None, None
        if self.prefix_hashes is not None:
            lo, hi = self.prefix_offsets[idx], self.prefix_offsets[idx + 1]
            counts = hi - lo
            offsets = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            # gather every selected row's range at once: its start, then +1 within the row
            take = np.repeat(lo - offsets[:-1], counts) + np.arange(int(offsets[-1]))
            hashes = self.prefix_hashes[take]
        return dataclasses.replace(self, arrival_s=self.arrival_s[idx],
                                   prompt_tokens=self.prompt_tokens[idx],
                                   output_tokens=self.output_tokens[idx], prompt_text=text,
                                   prefix_hashes=hashes, prefix_offsets=offsets)

    def with_arrivals(self, arrival_s: np.ndarray, note: str = "") -> "RequestTrace":
        """A copy with new arrival times (sorted; one per request)."""
        arrival_s = np.asarray(arrival_s, dtype=np.float64)
        if arrival_s.shape != self.arrival_s.shape:
            raise ValueError("one arrival time per request")
        return dataclasses.replace(self, arrival_s=arrival_s, has_arrivals=True,
                                   arrival_note=note)

    def with_poisson_arrivals(self, rate_per_s: float, seed: int = 0) -> "RequestTrace":
        """A copy whose arrivals are a seeded Poisson process at ``rate_per_s``; refused
        when they would run past MAX_ARRIVAL_S, the bound of a trace's own arrivals."""
        arrivals = poisson_arrivals(len(self), rate_per_s, seed)
        if len(arrivals) and not arrivals[-1] <= MAX_ARRIVAL_S:
            raise ConfigError("arrival_rate", f"{rate_per_s:g} req/s spreads {len(self)} "
                              f"requests over {arrivals[-1]:.3g} s, beyond the "
                              f"{MAX_ARRIVAL_S:.0e} s a trace may span")
        return self.with_arrivals(arrivals, f"Poisson arrivals at {rate_per_s:g} req/s "
                                            f"(seed {seed})")

    def split(self, fraction: float, seed: int = 0) -> tuple["RequestTrace", "RequestTrace"]:
        """(held out, rest): a seeded random ``fraction`` of the requests, and the others;
        both keep arrival order."""
        n = len(self)
        k = int(round(float(fraction) * n))
        held = np.zeros(n, dtype=bool)
        held[np.random.default_rng(seed).permutation(n)[:k]] = True
        return self.subset(held), self.subset(~held)

    def with_outputs(self, output_tokens: np.ndarray) -> "RequestTrace":
        """A copy with other output lengths (tokens, at least 1 each)."""
        out = np.maximum(np.asarray(output_tokens, dtype=np.int64), 1)
        if out.shape != self.output_tokens.shape:
            raise ValueError("one output length per request")
        return dataclasses.replace(self, output_tokens=out)

    def summary(self) -> dict:
        """Request count, duration and length statistics (for reports)."""
        def stats(a):
            if len(a) == 0:
                return {}
            return {"mean": float(np.mean(a)), "p50": float(np.percentile(a, 50)),
                    "p99": float(np.percentile(a, 99)), "max": int(np.max(a))}
        return {"name": self.name, "requests": len(self),
                "duration_s": float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0,
                "prompt_tokens": stats(self.prompt_tokens),
                "output_tokens": stats(self.output_tokens),
                "has_text": self.has_text, "arrivals": self.arrival_note or "from trace"}


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Arrival times (seconds, float64, sorted) of ``n`` requests of a Poisson process with
    ``rate_per_s`` requests per second, starting at t = 0 (the first request arrives at 0,
    as in the bundled traces). Deterministic for a given seed."""
    if not rate_per_s > 0 or not np.isfinite(rate_per_s):
        raise ConfigError("arrival_rate", f"must be a positive number of requests/s, "
                          f"got {rate_per_s!r}")
    if n <= 0:
        return np.zeros(0)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def bundled_trace_path(name: str) -> Path | None:
    """Path of a bundled trace (a key of :data:`BUNDLED_TRACES`), or None if ``name`` is
    not one."""
    fname = BUNDLED_TRACES.get(name)
    if fname is None:
        return None
    import workloads
    return Path(workloads.__file__).resolve().parent / "traces" / fname


def _open_text(path: Path):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _bad(path: str, row: int, line: int, column: str, message: str,
         item: str = "row") -> ConfigError:
    """An error naming the file and the data row (or other ``item``), the column and the
    line."""
    where = f"column '{column}' (line {line})" if item == "row" else f"line {line}"
    return ConfigError(f"{path} {item} {row}", f"{where}: {message}")


def _to_numbers(path: str, column: str, values: list[str], lines: list[int],
                integer: bool, lo: float = 0, hi: float = MAX_TOKENS,
                item: str = "row") -> np.ndarray:
    """``values`` (the text of one column, ``lines`` its lines) as float64, or int64 if
    ``integer``: finite numbers in lo..hi, whole if ``integer``. Vectorised, with an error
    naming the first bad value's ``item`` (1-based) and line."""
    def bad(i: int, message: str) -> ConfigError:
        return _bad(path, i + 1, lines[i], column, message, item)

    try:
        arr = np.array(values, dtype=np.float64)
        ok = np.isfinite(arr)
    except ValueError:
        arr, ok = None, None
    if arr is None or not ok.all():
        for i, text in enumerate(values):
            try:
                v = float(text)
            except ValueError:
                raise bad(i, f"not a number: {text!r}") from None
            if not np.isfinite(v):
                raise bad(i, f"not a finite number: {text!r}")
    low = np.flatnonzero(arr < lo)
    if low.size:
        raise bad(int(low[0]), f"must be >= {lo:g}, got {values[int(low[0])]}")
    high = np.flatnonzero(arr > hi)
    if high.size:
        raise bad(int(high[0]), f"must be <= {hi:.0f}, got {values[int(high[0])]}")
    if integer:
        frac = np.flatnonzero(arr != np.floor(arr))
        if frac.size:
            i = int(frac[0])
            raise bad(i, f"must be a whole number of tokens, got {values[i]}")
        return arr.astype(np.int64)
    return arr


def _why(err: BaseException) -> str:
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


def load_trace(path, max_requests: int | None = None, *, arrival_rate: float | None = None,
               seed: int = 0, keep_text: bool = True) -> RequestTrace:
    """Read and validate a request trace.

    ``path`` is a CSV file (``.gz`` for gzip), a Mooncake-format ``.jsonl`` file
    (``.jsonl.gz`` for gzip), the name of a bundled trace, or a random dataset
    ``random:IN:OUT[:R]`` (:mod:`.random_dataset`; its lengths drawn with ``seed``).
    ``max_requests`` keeps the first N data rows. ``arrival_rate`` (requests/s) replaces the
    arrivals with a seeded Poisson process — required for realistic latency metrics on a
    dataset without an ``arrival_s`` column; without it such a dataset gets every arrival at
    t = 0 (an offline run) and ``arrival_note`` says so. ``keep_text=False`` drops the
    prompt text (saves memory when no learned predictor is used).
    """
    if is_random(path):
        label, prompts, outputs = random_lengths(path, max_requests, seed)
        return RequestTrace(np.zeros(len(prompts)), prompts, outputs, None, label, False,
                            RANDOM_ARRIVALS)
    p = Path(path)
    if not path_exists(p):
        bundled = bundled_trace_path(str(path))
        if bundled is None:
            raise ConfigError(shown_path(path), "no such trace file (bundled traces: "
                              + ", ".join(BUNDLED_TRACES) + ")")
        p = bundled
    shown = str(path)
    if max_requests is not None and max_requests <= 0:
        raise ConfigError("max_requests", f"must be > 0, got {max_requests}")
    if _is_jsonl(p):
        return _load_jsonl(p, shown, max_requests, arrival_rate, seed)
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    try:
        fh = _open_text(p)
    except OSError as err:
        raise ConfigError(shown, f"cannot open: {_why(err)}") from None
    with fh:
        reader = csv.reader(fh)
        cols = _csv_columns(reader, shown, keep_text)
        fields = _csv_rows(reader, shown, cols, max_requests)
    return _assemble(shown, p.name.split(".")[0], fields, arrival_rate, seed)


def _csv_columns(reader, shown: str, keep_text: bool) -> dict:
    """The index of each column a trace uses (None: the file has no such column, or
    its text is not kept), from the header row."""
    try:
        header = next(reader)
    except StopIteration:
        raise ConfigError(shown, "empty file (expected a header row with "
                          "prompt_tokens,output_tokens[,arrival_s,prompt])") from None
    except (csv.Error, *_UNREADABLE) as err:
        raise ConfigError(shown, f"cannot read header: {_why(err)}") from None
    header = [h.strip().lstrip("\ufeff") for h in header]
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise ConfigError(shown, f"header names column(s) {', '.join(twice)} more than "
                          "once; each column may appear once")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(shown, "missing column(s) " + ", ".join(missing)
                          + f"; header has: {', '.join(header) or '(nothing)'}; required: "
                          "prompt_tokens, output_tokens (optional: arrival_s, prompt)")
    col = {name: header.index(name) for name in header}
    return {"prompt": col["prompt_tokens"], "output": col["output_tokens"],
            "arrival": col.get("arrival_s"), "text": col.get("prompt") if keep_text else None,
            "hashes": col.get(PREFIX_COLUMN)}


def _csv_rows(reader, shown: str, cols: dict, max_requests: int | None) -> "_Fields":
    """The data rows' fields (``cols``: :func:`_csv_columns`), the first
    ``max_requests`` of them."""
    need = max(i for i in cols.values() if i is not None) + 1
    got: dict[str, list] = {k: [] for k in cols}
    lines: list[int] = []
    row = 0
    try:
        for rec in reader:
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue  # blank line
            row += 1
            if len(rec) < need:
                raise ConfigError(f"{shown} row {row}",
                                  f"line {reader.line_num}: {len(rec)} field(s), the "
                                  f"header needs at least {need}")
            lines.append(reader.line_num)
            for k, i in cols.items():
                if i is not None:
                    got[k].append(rec[i])
            if max_requests is not None and row >= max_requests:
                break
    except csv.Error as err:
        raise ConfigError(f"{shown} row {row + 1}",
                          f"line {reader.line_num}: malformed CSV: {err}") from None
    except _UNREADABLE as err:
        raise ConfigError(f"{shown} row {row + 1}", f"cannot read: {_why(err)}") from None
    if row == 0:
        raise ConfigError(shown, "no requests (header only)")
    has = {k: cols[k] is not None for k in cols}
    return _Fields(got["prompt"], got["output"], got["arrival"] if has["arrival"] else None,
                   tuple(got["text"]) if has["text"] else None,
                   got["hashes"] if has["hashes"] else None, lines)


@dataclasses.dataclass
class _Fields:
    """The text of a trace's fields, one entry per request (``None``: the file has no
    such field), and each request's line in the file."""

    prompts: list[str]
    outputs: list[str]
    arrivals: list[str] | None
    texts: tuple[str, ...] | None
    hashes: list[str] | None
    lines: list[int]
    arrival_column: str = "arrival_s"
    arrival_units_per_s: float = 1.0   # ``arrivals`` are in 1/this seconds
    names: tuple[str, str] = ("prompt_tokens", "output_tokens")


def _assemble(shown: str, name: str, f: _Fields, arrival_rate, seed) -> RequestTrace:
    """A validated :class:`RequestTrace` from the fields of one file (CSV or JSONL): the
    same checks for every format (see the module docstring)."""
    lines = f.lines
    prompt_tokens = _to_numbers(shown, f.names[0], f.prompts, lines, integer=True)
    output_tokens = _to_numbers(shown, f.names[1], f.outputs, lines, integer=True)
    csr = _prefix_hashes(shown, f.hashes, lines) if f.hashes is not None else (None, None)
    if f.arrivals is not None:
        arrival = _to_numbers(shown, f.arrival_column, f.arrivals, lines, integer=False,
                              hi=MAX_ARRIVAL_S * f.arrival_units_per_s) / f.arrival_units_per_s
        back = np.flatnonzero(np.diff(arrival) < 0)
        if back.size:
            i = int(back[0]) + 1
            raise _bad(shown, i + 1, lines[i], f.arrival_column,
                       f"arrivals must be sorted (non-decreasing): {f.arrivals[i]} comes "
                       f"after {f.arrivals[i - 1]}")
        trace = RequestTrace(arrival, prompt_tokens, output_tokens, f.texts, name, True, "",
                             *csr)
    else:
        trace = RequestTrace(np.zeros(len(lines)), prompt_tokens, output_tokens, f.texts,
                             name, False, "no arrival times in the file: every request "
                             "arrives at t = 0 (offline run); give a Poisson rate for an "
                             "online run", *csr)
    if arrival_rate is not None:
        trace = trace.with_poisson_arrivals(arrival_rate, seed)
    return trace


def _is_jsonl(p: Path) -> bool:
    return ".jsonl" in p.suffixes[-2:]


def _load_jsonl(p: Path, shown: str, max_requests, arrival_rate, seed) -> RequestTrace:
    """A Mooncake-format trace: one JSON object per line with ``input_length`` and
    ``output_length`` (tokens), optionally ``timestamp`` (milliseconds since the start)
    and ``hash_ids`` (a list of prefix block hashes); other keys are ignored."""
    need, optional = MOONCAKE_FIELDS[:2], MOONCAKE_FIELDS[2:]
    got: dict[str, list[str]] = {k: [] for k in MOONCAKE_FIELDS}
    present = {k: None for k in optional}        # first line that has / lacks each field
    lines: list[int] = []
    try:
        fh = _open_text(p)
    except OSError as err:
        raise ConfigError(shown, f"cannot open: {_why(err)}") from None
    row, lineno = 0, 0
    with fh:
        try:
            for lineno, text in enumerate(fh, 1):
                if not text.strip():
                    continue
                row += 1
                rec = _json_object(shown, row, lineno, text)
                for key in need:
                    if key not in rec:
                        raise ConfigError(f"{shown} row {row}", f"line {lineno}: no "
                                          f"'{key}' field (required: {', '.join(need)}; "
                                          f"optional: {', '.join(optional)})")
                    got[key].append(_scalar_text(rec[key]))
                for key in optional:
                    has = key in rec
                    if present[key] is None:
                        present[key] = has
                    elif present[key] != has:
                        raise ConfigError(f"{shown} row {row}", f"line {lineno}: field "
                                          f"'{key}' is {'present' if has else 'missing'} "
                                          "here but not in the first row; every row or "
                                          "none must have it")
                got["timestamp"].append(_scalar_text(rec.get("timestamp")))
                if "hash_ids" in rec:
                    got["hash_ids"].append(_hash_text(shown, row, lineno, rec["hash_ids"]))
                lines.append(lineno)
                if max_requests is not None and row >= max_requests:
                    break
        except _UNREADABLE as err:
            raise ConfigError(f"{shown} row {row + 1}", f"cannot read: {_why(err)}") from None
    if row == 0:
        raise ConfigError(shown, "no requests (no JSON lines)")
    fields = _Fields(got["input_length"], got["output_length"],
                     got["timestamp"] if present["timestamp"] else None, None,
                     got["hash_ids"] if present["hash_ids"] else None, lines,
                     arrival_column="timestamp", arrival_units_per_s=1e3,
                     names=("input_length", "output_length"))
    return _assemble(shown, p.name.split(".")[0], fields, arrival_rate, seed)


def _json_object(shown: str, row: int, lineno: int, text: str) -> dict:
    try:
        rec = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"{shown} row {row}", f"line {lineno}: not JSON: "
                          f"{getattr(err, 'msg', err)}") from None
    except RecursionError:          # a value nested thousands deep: no request holds one
        raise ConfigError(f"{shown} row {row}", f"line {lineno}: a value nested too deep "
                          "to be a request field") from None
    if not isinstance(rec, dict):
        raise ConfigError(f"{shown} row {row}", f"line {lineno}: expected a JSON object, "
                          f"got {type(rec).__name__}")
    return rec


def _scalar_text(value) -> str:
    """A JSON value as the text the CSV checks read: numbers as written; strings, booleans,
    null and lists become texts that no number check accepts (quoted, True, None, [..])."""
    return repr(value)


def _hash_text(shown: str, row: int, lineno: int, value) -> str:
    """``hash_ids`` (a JSON list of whole numbers) as the CSV's space-separated text."""
    if not isinstance(value, list) or any(isinstance(h, bool) or not isinstance(h, int)
                                          for h in value):
        raise _bad(shown, row, lineno, "hash_ids", f"must be a list of whole numbers, got "
                   f"{json.dumps(value)[:60]}")
    return " ".join(map(str, value))


def _prefix_hashes(path: str, fields: list[str], lines: list[int]):
    """The ``prefix_block_hashes`` column (one text field per row) as (hashes, offsets) in
    CSR form, checked: whole numbers in 0..MAX_HASH with chain semantics (see the module
    docstring). Errors name the row, the line and the column."""
    words: list[str] = []
    counts = np.zeros(len(fields), dtype=np.int64)
    for i, text in enumerate(fields):
        parts = text.split()
        counts[i] = len(parts)
        words.extend(parts)
    offsets = np.zeros(len(fields) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    row_of = np.repeat(np.arange(len(fields)), counts)
    try:
        hashes = np.array(words, dtype=np.int64)
    except (ValueError, OverflowError):
        hashes = None
    if hashes is None or (hashes.size and (hashes.min() < 0 or hashes.max() > MAX_HASH)):
        for k, w in enumerate(words):
            if not (w.isascii() and w.isdigit() and int(w) <= MAX_HASH):
                r = int(row_of[k])
                raise _bad(path, r + 1, lines[r], PREFIX_COLUMN,
                           f"hash {w!r} is not a whole number in 0..{MAX_HASH}")
    if hashes.size == 0:
        return hashes, offsets
    pos = np.arange(hashes.size) - np.repeat(offsets[:-1], counts)   # block index in its row
    parent = np.where(pos > 0, np.roll(hashes, 1), -1)
    # one position and one parent per hash (chain semantics); sorting by hash puts every
    # use of a hash side by side, the first use first
    order = np.lexsort((np.arange(hashes.size), hashes))
    h, p, par = hashes[order], pos[order], parent[order]
    same = h[1:] == h[:-1]
    clash = np.flatnonzero(same & ((p[1:] != p[:-1]) | (par[1:] != par[:-1])))
    if clash.size:
        k, first = int(order[clash[0] + 1]), int(order[clash[0]])
        r, r0 = int(row_of[k]), int(row_of[first])
        what = "repeats within the request" if r == r0 else \
            f"follows another prefix than in row {r0 + 1} (line {lines[r0]})"
        raise _bad(path, r + 1, lines[r], PREFIX_COLUMN,
                   f"hash {int(hashes[k])} at block {int(pos[k])} {what}: a block hash names "
                   "the whole prefix up to its block")
    return hashes, offsets


def prefix_reuse_trace(n: int, reuse_ratio: float, *, prompt_blocks: int = 8,
                       block_tokens: int = 512, prefixes: int = 4, output_tokens: int = 64,
                       arrival_rate: float | None = None, seed: int = 0) -> RequestTrace:
    """A synthetic trace with a controlled prefix-reuse ratio: ``n`` requests whose prompts
    are ``prompt_blocks`` blocks of ``block_tokens`` tokens; the first ``k =
    round(reuse_ratio * prompt_blocks)`` blocks are one of ``prefixes`` shared prefixes
    (chosen uniformly with ``seed``), the rest are the request's own. So ``k /
    prompt_blocks`` of every prompt can be served from a cache that has seen its prefix.
    Outputs are ``output_tokens`` each; arrivals Poisson at ``arrival_rate`` (all at
    t = 0 when None)."""
    if not 0.0 <= reuse_ratio <= 1.0:
        raise ConfigError("reuse_ratio", f"must be in [0, 1], got {reuse_ratio}")
    if n <= 0 or prompt_blocks <= 0 or block_tokens <= 0 or prefixes <= 0 \
            or output_tokens <= 0:
        raise ConfigError("prefix_reuse_trace", "n, prompt_blocks, block_tokens, prefixes "
                          "and output_tokens must be > 0")
    k = int(round(reuse_ratio * prompt_blocks))
    rng = np.random.default_rng(seed)
    which = rng.integers(0, prefixes, n)
    shared = which[:, None] * prompt_blocks + np.arange(k)[None, :]
    own = prefixes * prompt_blocks + np.arange(n * (prompt_blocks - k)).reshape(
        n, prompt_blocks - k)
    hashes = np.concatenate([shared, own], axis=1).reshape(-1).astype(np.int64)
    offsets = np.arange(n + 1, dtype=np.int64) * prompt_blocks
    arrival = poisson_arrivals(n, arrival_rate, seed) if arrival_rate else np.zeros(n)
    note = f"Poisson arrivals at {arrival_rate:g} req/s (seed {seed})" if arrival_rate \
        else "every request at t = 0"
    return RequestTrace(arrival, np.full(n, prompt_blocks * block_tokens, dtype=np.int64),
                        np.full(n, output_tokens, dtype=np.int64), None,
                        f"prefix-reuse-{k}of{prompt_blocks}", True, note, hashes, offsets)


def read_lengths(path) -> np.ndarray:
    """Token lengths (int64, each in 1..2**40) from a text file (``.gz`` for gzip):
    integers separated by whitespace or commas. Errors name the file and the length
    (1-based) and its line."""
    shown = str(path)
    words: list[str] = []
    lines: list[int] = []
    try:
        with _open_text(Path(path)) as fh:
            for lineno, line in enumerate(fh, 1):
                for word in line.replace(",", " ").split():
                    words.append(word)
                    lines.append(lineno)
    except _UNREADABLE as err:
        raise ConfigError(shown, f"cannot read: {_why(err)}") from None
    if not words:
        raise ConfigError(shown, "holds no lengths (expected whole numbers >= 1 separated "
                          "by whitespace or commas)")
    return _to_numbers(shown, "length", words, lines, integer=True, lo=1, item="length")

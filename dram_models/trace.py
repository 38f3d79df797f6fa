"""Memory request traces: our compact ``.npz`` format and the text formats of
Ramulator 2 and DRAMsim3, so one trace can be run in all three simulators.

A :class:`Trace` is three parallel NumPy arrays:

* ``addr`` (uint64): physical byte address of the request;
* ``is_write`` (bool);
* ``arrival`` (int64): the cycle (DRAM command clock, CK, of the standard it is replayed
  on) at which the request is offered to the controller, or ``-1`` for "as soon as
  the controller accepts it" (open-loop, saturating).

Text formats (one request per line; blank lines and lines starting with ``#`` are
ignored when reading; files whose name ends in ``.gz`` are written gzip-compressed, and
any file starting with the gzip magic bytes is read decompressed, whatever its name):

* ``ramulator`` -- Ramulator 2 ``LoadStoreTrace`` front-end: ``LD 0x1f40`` or
  ``ST 0x1f40``. No timing: every request reads back with arrival -1 (open loop), so a
  timed trace saved in this format loses its arrival cycles;
* ``dramsim3`` -- DRAMsim3 trace: ``0x1f40 READ 120`` / ``0x1f40 WRITE 121`` (address,
  operation, arrival cycle). An open-loop trace is written with every request at cycle 0
  and reads back with arrival 0: every request is due at once and enters when the queue
  accepts it, which replays with the same statistics as arrival -1 (the engine counts
  read latency from a request's entry into the queue, not from its arrival cycle).

Addresses are written in hex (``0x``) or decimal, cycles in decimal, without signs.

:func:`load` tells the format from the content (:func:`detect`): an npz file starts with
the zip magic bytes; a text file's first request line decides between ``LD|ST <addr>``
(ramulator) and ``<addr> READ|WRITE <cycle>`` (dramsim3). A format given by the caller
that the content contradicts is refused, naming the file, the line and both formats.

Every trace, read from any format or built in code, follows the same rules
(:func:`check_arrays`):

* ``addr``, ``is_write`` and ``arrival`` are 1-D arrays of equal length (a file holds at
  least one request);
* ``addr`` holds integers in 0..2**64-1 (address bits above the configured capacity
  are ignored: addresses wrap, see :mod:`dram_models.mapping`);
* ``is_write`` holds booleans (or the integers 0 and 1);
* ``arrival`` holds integers: -1 for every request (no arrival cycles), or cycles >= 0
  for every request that never decrease, at most :data:`MAX_ARRIVAL_CK` (the engine
  counts up to 8 ticks per CK in int64) or a lower limit the reader is given
  (``python -m dram_models.replay --max-span``). Float arrays are refused, even if
  their values are whole.

Any problem raises :class:`~dram_models.errors.ConfigError` naming the file and the
request: ``FILE:LINE`` for the text formats, ``FILE ARRAY[INDEX]`` for npz arrays.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .errors import ConfigError

FORMATS = ("npz", "ramulator", "dramsim3")

#: The latest arrival cycle any trace may have, CK: up to 8 engine ticks per CK stay far
#: below the engine's int64 "never" (2**62).
MAX_ARRIVAL_CK = 2**40

_ADDR_LIMIT = 2**64 - 1
# magic bytes: an npz is a zip archive (local file header, or the end record of an empty
# one); a lone .npy array is taken as npz too, so its reader explains the difference
_NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")
_GZIP_MAGIC = b"\x1f\x8b"
# what reading a damaged file may raise (gzip: truncated or corrupt streams)
_UNREADABLE = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """A request trace (see module docstring for units and rules)."""

    addr: np.ndarray
    is_write: np.ndarray
    arrival: np.ndarray

    def __post_init__(self):
        addr, is_write, arrival = check_arrays(self.addr, self.is_write, self.arrival)
        object.__setattr__(self, "addr", addr)
        object.__setattr__(self, "is_write", is_write)
        object.__setattr__(self, "arrival", arrival)

    @classmethod
    def open_loop(cls, addr: np.ndarray, is_write: np.ndarray | None = None) -> "Trace":
        """A saturating trace: every request offered as soon as it is accepted."""
        addr = np.asarray(addr, dtype=np.uint64)
        if is_write is None:
            is_write = np.zeros(len(addr), dtype=np.bool_)
        return cls(addr, is_write, np.full(len(addr), -1, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.addr)

    @property
    def timed(self) -> bool:
        """True if the requests carry arrival cycles."""
        return bool(len(self.arrival)) and bool((self.arrival >= 0).any())

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Trace) and np.array_equal(self.addr, other.addr)
                and np.array_equal(self.is_write, other.is_write)
                and np.array_equal(self.arrival, other.arrival))

    def concat(self, other: "Trace") -> "Trace":
        return Trace(np.concatenate([self.addr, other.addr]),
                     np.concatenate([self.is_write, other.is_write]),
                     np.concatenate([self.arrival, other.arrival]))


def check_arrays(addr, is_write, arrival, source: str = "trace", lines=None,
                 limit: tuple[int, str] | None = None) -> tuple[np.ndarray, ...]:
    """``addr``, ``is_write`` and ``arrival`` as the engine takes them (uint64, bool,
    int64), after checking the rules of the module docstring.

    ``lines[i]`` is the line of request i in a text file ``source``; errors then name
    ``source:line``, else ``source array[i]``. ``limit`` is (the latest arrival cycle
    allowed, what sets it); default :data:`MAX_ARRIVAL_CK`."""
    def key(name: str, i: int | None = None) -> str:
        if i is None:
            return f"{source} {name}"
        return f"{source}:{lines[i]}" if lines is not None else f"{source} {name}[{i}]"

    def fail(name: str, i: int, rule: str, value) -> ConfigError:
        lead = f"{name} " if lines is not None else ""
        return ConfigError(key(name, i), f"{lead}{rule}, got {value}")

    arrays = {"addr": np.asarray(addr), "is_write": np.asarray(is_write),
              "arrival": np.asarray(arrival)}
    for name, a in arrays.items():
        if a.ndim != 1:
            raise ConfigError(key(name), f"must be a 1-D array, got shape {a.shape}")
    sizes = [len(a) for a in arrays.values()]
    if len(set(sizes)) > 1:
        raise ConfigError(source, "addr, is_write and arrival must have equal lengths, "
                          f"got {', '.join(map(str, sizes))}")
    addr = _integers(arrays["addr"], "addr", 0, _ADDR_LIMIT, "an address in 0..2**64-1",
                     key, fail)
    is_write = _flags(arrays["is_write"], key, fail)
    top, why = limit or (MAX_ARRIVAL_CK, "the engine's clock range")
    arrival = _integers(arrays["arrival"], "arrival", -1, top,
                        f"-1 (none) or a cycle in 0..{top} ({why})", key, fail)
    if arrival.size and arrival[0] == -1:
        mixed = np.flatnonzero(arrival != -1)
        if mixed.size:
            i = int(mixed[0])
            raise fail("arrival", i, "must be -1 like the first request's (a trace gives "
                       "every request an arrival cycle or none)", arrival[i])
    elif arrival.size:
        back = np.flatnonzero(arrival[1:] < arrival[:-1])
        if back.size:
            i = int(back[0]) + 1
            raise fail("arrival", i, f"must not be earlier than the previous request's "
                       f"{arrival[i - 1]} (arrivals never decrease)", arrival[i])
    return addr, is_write, arrival.astype(np.int64, copy=False)


def _integers(a: np.ndarray, name: str, lo: int, hi: int, rule: str, key, fail):
    """``a`` checked to hold integers in lo..hi, as int64 (lo < 0) or uint64."""
    dtype = np.int64 if lo < 0 else np.uint64
    if a.dtype == object:       # Python integers of a text file, some beyond 64 bits
        values = a.tolist()
        for i, v in enumerate(values):
            if type(v) is not int or not lo <= v <= hi:
                raise fail(name, i, f"must be {rule}", v)
        return np.array(values, dtype=dtype)
    if a.dtype.kind not in "iu":
        raise ConfigError(key(name), f"must hold integers ({rule}), got {a.dtype} values")
    info = np.iinfo(a.dtype)
    if info.min < lo or info.max > hi:
        bad = np.flatnonzero((a < lo) | (a > hi))
        if bad.size:
            i = int(bad[0])
            raise fail(name, i, f"must be {rule}", a[i])
    return np.ascontiguousarray(a, dtype=dtype)


def _flags(a: np.ndarray, key, fail) -> np.ndarray:
    """``a`` checked to hold booleans or the integers 0 and 1, as bool."""
    if a.dtype.kind in "iu":
        bad = np.flatnonzero((a != 0) & (a != 1))
        if bad.size:
            i = int(bad[0])
            raise fail("is_write", i, "must be 0 or 1", a[i])
    elif a.dtype.kind != "b":
        raise ConfigError(key("is_write"), f"must hold booleans (or 0 and 1), got "
                          f"{a.dtype} values")
    return np.ascontiguousarray(a, dtype=np.bool_)


def _open_text(path: Path, mode: str):
    """A text file in binary mode (reading decodes line by line, so an error names its
    line). Read compressed if its content starts with the gzip magic bytes, whatever its
    name; written compressed if its name ends in .gz."""
    gz = _head(path).startswith(_GZIP_MAGIC) if mode == "r" else str(path).endswith(".gz")
    return gzip.open(path, mode + "b") if gz else open(path, mode + "b")


def _head(path: Path, size: int = 8) -> bytes:
    """The first ``size`` bytes of a file (fewer if it is shorter)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError as err:
        raise ConfigError(str(path), f"cannot read ({err.strerror or err})") from None


def _line_format(tok: list[str]) -> str | None:
    """The text format a request line's tokens look like (even if malformed, so the
    parser of that format names what is wrong), or None."""
    if tok[0] in ("LD", "ST"):
        return "ramulator"
    if len(tok) >= 2 and tok[1] in ("READ", "WRITE"):
        return "dramsim3"
    return None


def _shown(line: str) -> str:
    """A line as an error message quotes it: stripped, at most 80 characters."""
    line = line.strip()
    return line if len(line) <= 80 else line[:77] + "..."


def detect(path: str | os.PathLike) -> tuple[str | None, int, str]:
    """The format of a trace file's content: ``(format, line, text)``.

    npz by its zip (or .npy) magic bytes, ``("npz", 0, "")``; otherwise text,
    gzip-compressed or not (by magic bytes), whose first request line (not blank, not a
    ``#`` comment) decides, given with its number and text. The format is None when that
    line fits no format (text ``""`` if it is not ASCII), and ``(None, 0, "")`` when the
    file holds no request line."""
    path = Path(path)
    if _head(path).startswith(_NPZ_MAGIC):
        return "npz", 0, ""
    lineno = 0
    try:
        with _open_text(path, "r") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("ascii")
                except UnicodeDecodeError:
                    return None, lineno, ""
                tok = line.split()
                if tok and not tok[0].startswith("#"):
                    return _line_format(tok), lineno, _shown(line)
    except _UNREADABLE as err:
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise ConfigError(f"{path}:{lineno + 1}", f"cannot read ({why})") from None
    return None, 0, ""


def _resolve(path: Path, fmt: str | None) -> str:
    """The format to read ``path`` in: ``fmt`` if the content agrees (or cannot tell),
    the detected one if ``fmt`` is None."""
    found, line, text = detect(path)
    where = f"{path}:{line}" if line else str(path)
    if fmt is None:
        if found is None:
            raise _undetected(where, line, text)
        return found
    if found is not None and found != fmt:
        what = "an npz archive" if found == "npz" else f"a {found} line {text!r}"
        raise ConfigError(where, f"format {fmt} was given, but the content is {what}; "
                          f"give format {found}, or none to detect it")
    return fmt


def _undetected(where: str, line: int, text: str) -> ConfigError:
    """The error for content whose format :func:`detect` cannot tell."""
    if not line:
        return ConfigError(where, "holds no requests (no request line to detect the trace "
                           "format from)")
    what = repr(text) if text else "a line that is not ASCII text"
    return ConfigError(where, f"cannot tell the trace format from {what}: expected an npz "
                       "archive, 'LD|ST <addr>' (ramulator) or '<addr> READ|WRITE <cycle>' "
                       "(dramsim3)")


_UINT = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)\Z")
_DEC = re.compile(r"[0-9]+\Z")


def _parse_uint(token: str, hex_ok: bool = True) -> int:
    """An unsigned integer token: decimal digits, or ``0x`` and hex digits if
    ``hex_ok``."""
    if not (_UINT if hex_ok else _DEC).match(token):
        raise ValueError(f"{token!r} is not an unsigned integer"
                         + (" (decimal or 0x hex)" if hex_ok else " (decimal)"))
    return int(token, 0) if token[:2] in ("0x", "0X") else int(token, 10)


def _int_array(values: list[int]) -> np.ndarray:
    """Python integers as an int64 (or uint64) array; an object array if some do not fit
    either (:func:`check_arrays` then names the first of them)."""
    for dtype in (np.int64, np.uint64):
        try:
            return np.array(values, dtype=dtype)
        except OverflowError:
            pass
    return np.array(values, dtype=object)


def save(trace: Trace, path: str | os.PathLike, fmt: str = "npz") -> Path:
    """Write ``trace`` to ``path`` in format ``fmt`` (see :data:`FORMATS`)."""
    path = Path(path)
    if fmt == "npz":
        np.savez_compressed(path, addr=trace.addr, is_write=trace.is_write,
                            arrival=trace.arrival)
        # numpy appends .npz when missing; report the real file name
        return path if str(path).endswith(".npz") else Path(str(path) + ".npz")
    if fmt == "ramulator":
        ops = np.where(trace.is_write, "ST", "LD")
        lines = [f"{o} 0x{a:x}\n" for o, a in zip(ops.tolist(), trace.addr.tolist())]
    elif fmt == "dramsim3":
        ops = np.where(trace.is_write, "WRITE", "READ")
        # DRAMsim3 needs a cycle on every line. An open loop is written at cycle 0: every
        # request is then due at once and enters when the queue accepts it, in DRAMsim3
        # as here (the engine counts latency from entry, so statistics are identical).
        cyc = np.maximum(trace.arrival, 0)
        lines = [f"0x{a:x} {o} {c}\n" for a, o, c in
                 zip(trace.addr.tolist(), ops.tolist(), cyc.tolist())]
    else:
        raise ConfigError("format", f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    with _open_text(path, "w") as fh:
        fh.write("".join(lines).encode("ascii"))
    return path


def load(path: str | os.PathLike, fmt: str | None = None,
         limit: tuple[int, str] | None = None) -> Trace:
    """Read a trace file. ``fmt`` None detects the format from the content (see
    :func:`detect`); a given ``fmt`` the content contradicts is refused. ``limit``
    (latest arrival cycle, what sets it) lowers :data:`MAX_ARRIVAL_CK`. Every problem
    is a :class:`ConfigError` naming the file (and line or row)."""
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError("format", f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if not path.exists():
        raise ConfigError(str(path), "trace file does not exist")
    if path.is_dir():
        raise ConfigError(str(path), "is a directory, not a trace file")
    fmt = _resolve(path, fmt)
    if fmt == "npz":
        arrays, lines = _read_npz(path), None
    else:
        *arrays, lines = _read_text(path, fmt)
    addr, is_write, arrival = check_arrays(*arrays, str(path), lines, limit)
    if len(addr) == 0:
        raise ConfigError(str(path), f"holds no requests ({fmt} trace)")
    return Trace(addr, is_write, arrival)


def _read_npz(path: Path) -> list[np.ndarray]:
    """The addr, is_write and arrival arrays of an npz trace (arrival -1 if absent)."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ConfigError(str(path), "is a single .npy array, not an .npz trace with "
                              "arrays addr, is_write and optionally arrival")
        with data:
            missing = [k for k in ("addr", "is_write") if k not in data.files]
            if missing:
                raise ConfigError(str(path), f"npz trace lacks array(s) {', '.join(missing)}; "
                                  "needs addr, is_write and optionally arrival; has "
                                  f"{', '.join(data.files) or 'none'}")
            addr = data["addr"]
            arrival = data["arrival"] if "arrival" in data.files else \
                np.full(np.shape(addr)[:1], -1, dtype=np.int64)
            return [addr, data["is_write"], arrival]
    except ConfigError:
        raise
    except _UNREADABLE as err:
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise ConfigError(str(path), f"not a readable .npz trace ({why})") from None


def _read_text(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """The addr, is_write and arrival arrays of a text trace, and each request's line."""
    requests: list[tuple[int, bool, int]] = []
    lines: list[int] = []
    lineno = 0
    try:
        with _open_text(path, "r") as fh:
            for lineno, raw in enumerate(fh, 1):
                req = _parse_line(raw, fmt, f"{path}:{lineno}")
                if req is not None:
                    requests.append(req)
                    lines.append(lineno)
    except ConfigError:
        raise
    except _UNREADABLE as err:
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise ConfigError(f"{path}:{lineno + 1}", f"cannot read ({why})") from None
    addrs, writes, arrivals = zip(*requests) if requests else ((), (), ())
    return (_int_array(list(addrs)), np.array(writes, dtype=np.bool_),
            _int_array(list(arrivals)), lines)


def _parse_line(raw: bytes, fmt: str, where: str) -> tuple[int, bool, int] | None:
    """The request (address, is_write, arrival cycle or -1) of one text line; None for a
    blank or comment line."""
    try:
        line = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(where, f"not ASCII text: a {fmt} trace has one request per "
                          "line") from None
    tok = line.split()
    if not tok or tok[0].startswith("#"):
        return None
    try:
        if fmt == "ramulator":
            if len(tok) != 2 or tok[0] not in ("LD", "ST"):
                raise ValueError("expected 'LD <addr>' or 'ST <addr>'")
            return _parse_uint(tok[1]), tok[0] == "ST", -1
        if len(tok) != 3 or tok[1] not in ("READ", "WRITE"):
            raise ValueError("expected '<addr> READ|WRITE <cycle>'")
        return _parse_uint(tok[0]), tok[1] == "WRITE", _parse_uint(tok[2], hex_ok=False)
    except ValueError as err:
        raise ConfigError(where, f"malformed {fmt} trace line {_shown(line)!r}: {err}") \
            from None

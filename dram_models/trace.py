"""Memory request traces: our compact ``.npz`` format and the text formats of
Ramulator 2 and DRAMsim3, so one trace can be run in all three simulators.

A :class:`Trace` is three parallel NumPy arrays:

* ``addr`` (uint64): physical byte address of the request;
* ``is_write`` (bool);
* ``arrival`` (int64): the cycle (DRAM command clock, CK, of the standard it is replayed
  on) at which the request is offered to the controller, or ``-1`` for "as soon as
  the controller accepts it" (open-loop, saturating).

Text formats (one request per line; blank lines and lines starting with ``#`` are
ignored when reading):

* ``ramulator`` -- Ramulator 2 ``LoadStoreTrace`` front-end: ``LD 0x1f40`` or
  ``ST 0x1f40`` (no timing: Ramulator 2 offers one request per front-end tick);
* ``dramsim3`` -- DRAMsim3 trace: ``0x1f40 READ 120`` / ``0x1f40 WRITE 121`` (address,
  operation, arrival cycle).

Malformed input raises :class:`~dram_models.errors.ConfigError` naming the file and
line number.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import os
from pathlib import Path

import numpy as np

from .errors import ConfigError

FORMATS = ("npz", "ramulator", "dramsim3")


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """A request trace (see module docstring for units)."""

    addr: np.ndarray
    is_write: np.ndarray
    arrival: np.ndarray

    def __post_init__(self):
        n = len(self.addr)
        if len(self.is_write) != n or len(self.arrival) != n:
            raise ConfigError("trace", "addr, is_write and arrival must have equal lengths")
        object.__setattr__(self, "addr", np.ascontiguousarray(self.addr, dtype=np.uint64))
        object.__setattr__(self, "is_write", np.ascontiguousarray(self.is_write, dtype=np.bool_))
        object.__setattr__(self, "arrival", np.ascontiguousarray(self.arrival, dtype=np.int64))

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
        """True if any request carries an arrival cycle."""
        return bool(len(self.arrival)) and bool((self.arrival >= 0).any())

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Trace) and np.array_equal(self.addr, other.addr)
                and np.array_equal(self.is_write, other.is_write)
                and np.array_equal(self.arrival, other.arrival))

    def concat(self, other: "Trace") -> "Trace":
        return Trace(np.concatenate([self.addr, other.addr]),
                     np.concatenate([self.is_write, other.is_write]),
                     np.concatenate([self.arrival, other.arrival]))


def _open_text(path: Path, mode: str):
    if str(path).endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, mode + "b"), encoding="ascii")
    return open(path, mode, encoding="ascii")


def _parse_int(token: str) -> int:
    return int(token, 16) if token.lower().startswith("0x") else int(token, 10)


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
        # DRAMsim3 needs a cycle on every line; open-loop requests get their index,
        # which offers them one per cycle, as Ramulator 2's trace front-end does.
        cyc = np.where(trace.arrival >= 0, trace.arrival, np.arange(len(trace)))
        lines = [f"0x{a:x} {o} {c}\n" for a, o, c in
                 zip(trace.addr.tolist(), ops.tolist(), cyc.tolist())]
    else:
        raise ConfigError("format", f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    with _open_text(path, "w") as fh:
        fh.writelines(lines)
    return path


def load(path: str | os.PathLike, fmt: str | None = None) -> Trace:
    """Read a trace file. ``fmt`` defaults from the file suffix (.npz or text)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(str(path), "trace file does not exist")
    if fmt is None:
        fmt = "npz" if path.suffix == ".npz" else "ramulator"
    if fmt == "npz":
        try:
            with np.load(path) as data:
                missing = [k for k in ("addr", "is_write") if k not in data]
                if missing:
                    raise ConfigError(str(path), f"npz trace lacks array(s) {missing}; "
                                      "needs addr, is_write and optionally arrival")
                addr = data["addr"]
                arrival = data["arrival"] if "arrival" in data else np.full(len(addr), -1)
                return Trace(addr, data["is_write"], arrival)
        except (OSError, ValueError) as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(str(path), f"not a readable .npz trace ({err})") from None
    if fmt not in FORMATS:
        raise ConfigError("format", f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    addrs: list[int] = []
    writes: list[bool] = []
    arrivals: list[int] = []
    with _open_text(path, "r") as fh:
        for lineno, line in enumerate(fh, 1):
            tok = line.split()
            if not tok or tok[0].startswith("#"):
                continue
            where = f"{path}:{lineno}"
            try:
                if fmt == "ramulator":
                    if len(tok) != 2 or tok[0] not in ("LD", "ST"):
                        raise ValueError("expected 'LD <addr>' or 'ST <addr>'")
                    writes.append(tok[0] == "ST")
                    addrs.append(_parse_int(tok[1]))
                    arrivals.append(-1)
                else:
                    if len(tok) != 3 or tok[1] not in ("READ", "WRITE"):
                        raise ValueError("expected '<addr> READ|WRITE <cycle>'")
                    addrs.append(_parse_int(tok[0]))
                    writes.append(tok[1] == "WRITE")
                    cyc = int(tok[2])
                    if cyc < 0:
                        raise ValueError("negative cycle")
                    if arrivals and cyc < arrivals[-1]:
                        raise ValueError(f"cycle {cyc} is earlier than the previous line's "
                                         f"{arrivals[-1]}; arrivals must not decrease")
                    arrivals.append(cyc)
                if addrs[-1] < 0 or addrs[-1] >= 2**64:
                    raise ValueError("address out of range")
            except ValueError as err:
                raise ConfigError(where, f"malformed {fmt} trace line {line.strip()!r}: {err}") \
                    from None
    return Trace(np.array(addrs, dtype=np.uint64), np.array(writes, dtype=np.bool_),
                 np.array(arrivals, dtype=np.int64))

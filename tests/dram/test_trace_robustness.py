"""Trace files of every format against bad input: each known failure, then a property
suite that mutates valid traces (bytes, fields, arrays) and requires either the project's
own one-line error naming the file or a valid run with finite results."""
from __future__ import annotations

import gzip
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dram_models import replay
from dram_models.errors import ConfigError
from dram_models.memory import MemorySystem
from dram_models.spec import load_standard
from dram_models.trace import MAX_ARRIVAL_CK, Trace, check_arrays, load, save

STD = ["--standard", "lpddr5-6400", "--channels", "1"]
TEXT = ("ramulator", "dramsim3")
KEYS = ("addr", "is_write", "arrival")
FINITE = ("sim_cycles", "sim_ns", "bandwidth_gbps", "efficiency", "avg_read_latency_ns",
          "p50_read_latency_ns", "p99_read_latency_ns", "row_hit_rate")


def _base(n: int = 24, seed: int = 0) -> Trace:
    """A small valid timed trace: burst-aligned addresses, a quarter writes."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, 1 << 19, n).astype(np.uint64) * np.uint64(32)
    return Trace(addr, rng.random(n) < 0.25, np.cumsum(rng.integers(0, 20, n)))


def _npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def _replay(capsys, path, fmt, *extra) -> tuple[int, str, str]:
    rc = replay.main([str(path), "--format", fmt, *STD, "--json", *extra])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _assert_one_line_error(rc: int, err: str, path) -> str:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0]
    return lines[0]


def _assert_outcome(rc: int, out: str, err: str, path) -> None:
    """Either the project's one-line error naming the file, or a run whose results are
    finite and count every request."""
    if rc != 0:
        _assert_one_line_error(rc, err, path)
        return
    assert err == ""
    data = json.loads(out)
    assert data["requests"] >= 1
    assert data["reads"] + data["writes"] >= data["requests"]
    for key in FINITE:
        assert math.isfinite(data[key]), (key, data[key])
    assert 0 < data["sim_ns"] < 2e9          # the default --max-span (1 s) plus service


# ---------------------------------------------------------------- the known failures
def test_truncated_npz_is_named(tmp_path, capsys):
    good = save(_base(), tmp_path / "t.npz")
    bad = tmp_path / "cut.npz"
    bad.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ConfigError, match="not a readable .npz trace"):
        load(bad)
    _assert_one_line_error(*_replay(capsys, bad, "npz")[::2], bad)


@pytest.mark.parametrize("fmt", TEXT)
def test_binary_garbage_as_text_names_the_line(tmp_path, capsys, fmt):
    p = tmp_path / "garbage.trace"
    p.write_bytes(b"LD 0x40\n" if fmt == "ramulator" else b"0x40 READ 0\n")
    p.write_bytes(p.read_bytes() + bytes(range(128, 256)) + b"\n")
    with pytest.raises(ConfigError) as info:
        load(p, fmt)
    assert info.value.key == f"{p}:2" and "not ASCII" in info.value.message
    _assert_one_line_error(*_replay(capsys, p, fmt)[::2], p)


def test_directory_and_missing_file(tmp_path, capsys):
    for fmt in ("npz", *TEXT):
        line = _assert_one_line_error(*_replay(capsys, tmp_path, fmt)[::2], tmp_path)
        assert "is a directory" in line
        gone = tmp_path / "gone.trace"
        line = _assert_one_line_error(*_replay(capsys, gone, fmt)[::2], gone)
        assert "does not exist" in line


def test_two_dimensional_addr_is_refused(tmp_path, capsys):
    t = _base(20)
    p = _npz(tmp_path / "t.npz", addr=t.addr.reshape(4, 5), is_write=t.is_write,
             arrival=t.arrival)
    with pytest.raises(ConfigError) as info:
        load(p)
    assert info.value.key == f"{p} addr" and "1-D" in info.value.message
    assert "(4, 5)" in _assert_one_line_error(*_replay(capsys, p, "npz")[::2], p)


@pytest.mark.parametrize("fmt", ["npz", "dramsim3"])
def test_far_arrivals_are_refused_at_once_with_the_bound(tmp_path, capsys, fmt):
    """An arrival of 2**62 or 10**18 CK would take the engine hours of refreshes."""
    t = _base(4)
    far = 2**62 if fmt == "npz" else 10**18
    if fmt == "npz":
        p = _npz(tmp_path / "t.npz", addr=t.addr, is_write=t.is_write,
                 arrival=np.array([0, 1, 2, far], dtype=np.int64))
    else:
        p = tmp_path / "t.trace"
        p.write_text(f"0x40 READ 0\n0x80 READ 1\n0xc0 READ 2\n0x100 READ {far}\n")
    t0 = time.perf_counter()
    rc, _, err = _replay(capsys, p, fmt)
    assert time.perf_counter() - t0 < 30
    line = _assert_one_line_error(rc, err, p)
    where = f"{p} arrival[3]" if fmt == "npz" else f"{p}:4"
    assert f"error: {where}:" in line
    assert "--max-span" in line and "800000000" in line      # 1 s of 1.25 ns CK
    with pytest.raises(ConfigError, match="engine's clock range"):
        load(p, fmt)


def test_max_span_moves_the_bound(tmp_path, capsys):
    """2 s of LPDDR5 time is refused by default and runs with --max-span 3."""
    p = tmp_path / "t.trace"
    p.write_text("0x40 READ 0\n0x80 WRITE 1600000000\n")
    _assert_one_line_error(*_replay(capsys, p, "dramsim3")[::2], p)
    rc, out, err = _replay(capsys, p, "dramsim3", "--max-span", "3")
    assert rc == 0, err
    assert 2e9 < json.loads(out)["sim_ns"] < 2.1e9


@pytest.mark.parametrize("key,values,needle", [
    ("addr", np.arange(4) * 64.5, "must hold integers"),
    ("addr", np.array([0.0, np.nan, 64.0, 128.0]), "must hold integers"),
    ("addr", np.array([0, -64, 64, 128]), "addr[1]: must be an address"),
    ("arrival", np.array([0, 1, -5, 9]), "arrival[2]: must be -1 (none) or a cycle"),
    ("arrival", np.array([-1, -1, 3, -1]), "arrival[2]: must be -1 like the first"),
    ("arrival", np.array([0, 5, 4, 9]), "arrival[2]: must not be earlier"),
    ("arrival", np.array([0.0, 1.0, 2.0, 3.0]), "must hold integers"),
    ("is_write", np.array([0, 5, 1, 0]), "is_write[1]: must be 0 or 1, got 5"),
    ("is_write", np.array([0.0, 1.0, 0.0, 1.0]), "must hold booleans"),
])
def test_npz_values_follow_the_rules(tmp_path, key, values, needle):
    arrays = {"addr": np.arange(4, dtype=np.uint64) * np.uint64(64),
              "is_write": np.zeros(4, bool), "arrival": np.arange(4)}
    arrays[key] = values
    p = _npz(tmp_path / "t.npz", **arrays)
    with pytest.raises(ConfigError) as info:
        load(p)
    assert str(info.value).startswith(str(p)) and needle in str(info.value)
    # the same rules hold for a trace built in code
    with pytest.raises(ConfigError, match="^trace "):
        Trace(**arrays)


@pytest.mark.parametrize("fmt", ["npz", *TEXT])
def test_every_format_follows_the_same_rules(tmp_path, fmt):
    """A decreasing arrival and an address beyond 64 bits give the same message in every
    format that can express them; an empty file is refused in every format."""
    empty = tmp_path / f"empty.{fmt}"
    if fmt == "npz":
        _npz(empty, addr=np.zeros(0, np.uint64), is_write=np.zeros(0, bool))
    else:
        empty.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match="holds no requests"):
        load(empty, fmt)
    if fmt == "ramulator":
        cases = {"huge": "LD 0x40\nST 0x10000000000000000\n"}
    elif fmt == "dramsim3":
        cases = {"huge": "0x40 READ 0\n0x10000000000000000 READ 1\n",
                 "back": "0x40 READ 5\n0x80 READ 4\n"}
    else:
        # (an npz array cannot hold 2**64: a negative address breaks the same rule)
        cases = {"huge": dict(addr=[64, -64], is_write=[0, 1], arrival=[0, 1]),
                 "back": dict(addr=[64, 128], is_write=[0, 0], arrival=[5, 4])}
    messages = {"huge": "must be an address in 0..2**64-1",
                "back": "must not be earlier than the previous request's 5"}
    for case, body in cases.items():
        p = tmp_path / f"{case}.{fmt}"
        if fmt == "npz":
            np.savez(p, **body)
        else:
            p.write_text(body)
        with pytest.raises(ConfigError) as info:
            load(p, fmt)
        assert messages[case] in str(info.value) and str(p) in info.value.key


def test_npz_structure_errors(tmp_path):
    t = _base(4)
    cases = {
        "keys": (_npz(tmp_path / "k.npz", adr=t.addr, is_write=t.is_write), "lacks array"),
        "lengths": (_npz(tmp_path / "l.npz", addr=t.addr, is_write=t.is_write[:3]),
                    "equal lengths"),
        "scalar": (_npz(tmp_path / "s.npz", addr=np.uint64(5), is_write=True), "1-D"),
        "object": (_npz(tmp_path / "o.npz", addr=np.array([1, None], dtype=object),
                        is_write=[0, 1]), "not a readable .npz"),
    }
    npy = tmp_path / "a.npz"
    np.save(tmp_path / "a.npy", t.addr)
    shutil.copy(tmp_path / "a.npy", npy)
    cases["npy"] = (npy, "single .npy array")
    for path, needle in cases.values():
        with pytest.raises(ConfigError, match=needle) as info:
            load(path)
        assert str(path) in str(info.value)


def test_gzip_damage_is_named(tmp_path):
    good = save(_base(60), tmp_path / "t.trace.gz", "dramsim3")
    cut = tmp_path / "cut.trace.gz"
    cut.write_bytes(good.read_bytes()[:-12])
    with pytest.raises(ConfigError, match="cannot read") as info:
        load(cut, "dramsim3")
    assert info.value.key.startswith(f"{cut}:")
    assert load(good, "dramsim3") == _base(60)


def test_check_arrays_keys_name_the_line_of_a_text_file():
    with pytest.raises(ConfigError) as info:
        check_arrays([64, 128], [0, 1], [3, 2], "f.trace", lines=[4, 9])
    assert info.value.key == "f.trace:9" and info.value.message.startswith("arrival ")
    addr, w, arr = check_arrays([64], [True], [-1])
    assert addr.dtype == np.uint64 and w.dtype == np.bool_ and arr.dtype == np.int64
    with pytest.raises(ConfigError, match="engine's clock range"):
        check_arrays([64], [0], [MAX_ARRIVAL_CK + 1])


# ---------------------------------------------------------------- property suite
_SCRATCH = Path(tempfile.mkdtemp(prefix="trace-fuzz-"))
_BASE = _base(16, seed=3)
BAD_TOKENS = ["nan", "inf", "-inf", "-1", "1e30", str(2**63), str(2**64), "0x" + "f" * 17,
              "1.5", "abc", "", "0x", "-0x40", "+5", "1_000", "\u0661\u0662", "0x40.0"]
BAD_VALUES = [np.nan, np.inf, -np.inf, -1, -2, 1e30, 2**62, 2**63, 2**64 - 1, 0.5, 5, True]
DTYPES = ["float64", "float32", "int8", "uint8", "int16", "bool", "U8", "complex128",
          "int64", "uint64"]


def _bytes_mutation():
    return st.one_of(
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
        st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
        st.tuples(st.just("empty")),
    )


def _mutate_bytes(data: bytes, m) -> bytes:
    if m[0] == "empty":
        return b""
    at = int(m[1] * len(data))
    if m[0] == "truncate":
        return data[:at]
    if m[0] == "flip":
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ m[2]]) + data[at + 1:]
    return data[:at] + m[2] + data[at:]


def _array_mutation():
    n = len(_BASE)
    key = st.sampled_from(KEYS)
    return st.one_of(
        st.tuples(st.just("value"), key, st.integers(0, n - 1), st.sampled_from(BAD_VALUES)),
        st.tuples(st.just("dtype"), key, st.sampled_from(DTYPES)),
        st.tuples(st.just("reshape"), key),
        st.tuples(st.just("scalar"), key),
        st.tuples(st.just("drop"), key),
        st.tuples(st.just("shorten"), key, st.integers(0, n)),
        st.tuples(st.just("empty")),
        st.tuples(st.just("untimed"), st.integers(0, n - 1)),
        st.tuples(st.just("late"), st.integers(20, 63), st.integers(0, n - 1)),
    )


def _mutate_arrays(m) -> dict:
    arrays = {"addr": _BASE.addr, "is_write": _BASE.is_write, "arrival": _BASE.arrival}
    kind = m[0]
    if kind == "value":
        values = arrays[m[1]].tolist()
        values[m[2]] = m[3]
        arrays[m[1]] = np.array(values)           # numpy picks a dtype, perhaps object
    elif kind == "dtype":
        with np.errstate(all="ignore"):
            arrays[m[1]] = arrays[m[1]].astype(m[2])
    elif kind == "reshape":
        arrays[m[1]] = arrays[m[1]].reshape(2, -1)
    elif kind == "scalar":
        arrays[m[1]] = arrays[m[1]][0]
    elif kind == "drop":
        del arrays[m[1]]
    elif kind == "shorten":
        arrays[m[1]] = arrays[m[1]][:m[2]]
    elif kind == "empty":
        arrays = {k: v[:0] for k, v in arrays.items()}
    elif kind == "untimed":                    # -1 from one request on
        arrival = arrays["arrival"].copy()
        arrival[m[1]:] = -1
        arrays["arrival"] = arrival
    else:                                      # late: a jump of 2**k CK from one request on
        arrival = arrays["arrival"].astype(np.uint64)
        arrival[m[2]:] += np.uint64(2**m[1])
        arrays["arrival"] = arrival
    return arrays


def _text_mutation():
    n = len(_BASE)
    return st.one_of(
        st.tuples(st.just("field"), st.integers(0, n - 1), st.integers(0, 2),
                  st.sampled_from(BAD_TOKENS)),
        st.tuples(st.just("drop"), st.integers(0, n - 1), st.integers(0, 2)),
        st.tuples(st.just("extra"), st.integers(0, n - 1), st.sampled_from(BAD_TOKENS)),
        st.tuples(st.just("swap"), st.integers(0, n - 1), st.integers(0, n - 1)),
        st.tuples(st.just("line"), st.integers(0, n),
                  st.sampled_from(["ADDR OP CYCLE", "# note", "", "LD", "READ 0x40 5",
                                   "\x00\x00", "0x40 READ 5 6"])),
        st.tuples(st.just("late"), st.integers(20, 64), st.integers(0, n - 1)),
    )


def _mutate_text(lines: list[str], m) -> list[str]:
    lines = list(lines)
    kind = m[0]
    if kind in ("field", "drop", "extra"):
        tok = lines[m[1]].split()
        if kind == "field":
            tok[min(m[2], len(tok) - 1)] = m[3]
        elif kind == "drop":
            del tok[min(m[2], len(tok) - 1)]
        else:
            tok.append(m[2])
        lines[m[1]] = " ".join(tok)
    elif kind == "swap":
        lines[m[1]], lines[m[2]] = lines[m[2]], lines[m[1]]
    elif kind == "line":
        lines.insert(m[1], m[2])
    else:                                      # late: add 2**k to the cycles from line i on
        for i in range(m[2], len(lines)):
            tok = lines[i].split()
            if len(tok) == 3:
                tok[2] = str(int(tok[2]) + 2**m[1])
                lines[i] = " ".join(tok)
    return lines


def _fresh(name: str) -> Path:
    d = Path(tempfile.mkdtemp(dir=_SCRATCH))
    return d / name


def _check_library(path: Path, fmt: str) -> None:
    """load() gives the project's error naming the file, or a trace that follows the
    rules."""
    try:
        t = load(path, fmt)
    except ConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        return
    assert len(t) >= 1 and t.addr.dtype == np.uint64 and t.arrival.dtype == np.int64
    assert (t.arrival == -1).all() or ((t.arrival >= 0).all() and
                                       (np.diff(t.arrival) >= 0).all())


CLI_SETTINGS = settings(max_examples=150, deadline=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow])


@CLI_SETTINGS
@given(m=st.one_of(_array_mutation(), _bytes_mutation()))
def test_mutated_npz_traces(capsys, m):
    path = _fresh("t.npz")
    if m[0] in ("truncate", "flip", "insert"):
        save(_BASE, path)
        path.write_bytes(_mutate_bytes(path.read_bytes(), m))
    else:                       # ("empty",) here: an archive of empty arrays
        np.savez(path, **_mutate_arrays(m))
    _check_library(path, "npz")
    _assert_outcome(*_replay(capsys, path, "npz"), path)


@CLI_SETTINGS
@given(fmt=st.sampled_from(TEXT), gz=st.booleans(),
       m=st.one_of(_text_mutation(), _bytes_mutation()))
def test_mutated_text_traces(capsys, fmt, gz, m):
    path = _fresh("t.trace" + (".gz" if gz else ""))
    save(_BASE, path, fmt)
    data = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    if m[0] in ("truncate", "flip", "insert", "empty"):
        raw = path.read_bytes()
        # damage the compressed stream itself half the time
        if gz and m[0] != "empty" and m[1] < 0.5:
            path.write_bytes(_mutate_bytes(raw, m))
        else:
            data = _mutate_bytes(data, m)
            path.write_bytes(gzip.compress(data) if gz else data)
    else:
        lines = _mutate_text(data.decode().splitlines(), m)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        path.write_bytes(gzip.compress(data) if gz else data)
    _check_library(path, fmt)
    _assert_outcome(*_replay(capsys, path, fmt), path)


def test_a_valid_trace_of_every_format_replays(tmp_path, capsys):
    """The property suite's starting point is valid in every format, and its run agrees
    with a direct one."""
    ms = MemorySystem(load_standard("lpddr5-6400"), channels=1)
    direct = ms.run_trace(_BASE).stats
    for fmt, name in (("npz", "t.npz"), ("dramsim3", "t.trace"), ("dramsim3", "t.trace.gz"),
                      ("ramulator", "r.trace")):
        path = save(_BASE, tmp_path / name, fmt)
        rc, out, err = _replay(capsys, path, fmt)
        _assert_outcome(rc, out, err, path)
        assert rc == 0
        if fmt != "ramulator":
            assert json.loads(out)["sim_cycles"] == direct.sim_cycles


@pytest.mark.parametrize("standard", ["ddr4-3200", "hbm3-6400"])
def test_addresses_at_the_top_of_the_range_wrap_like_any_other(standard):
    """Addresses up to 2**64 - 1 are valid and wrap above the capacity: a request whose
    bytes cross 2**64 (an unaligned one in the last burst) counts its two bursts, and
    the run equals that of the same addresses taken modulo the capacity."""
    ms = MemorySystem(load_standard(standard))
    top = np.array([2**64 - 64, 2**64 - 16, 2**64 - 4096, 2**64 - 1], dtype=np.uint64)
    writes = np.array([False, True, False, False])
    cap = np.uint64(ms.spec.organization.capacity_bytes)
    high = ms.run_trace(Trace.open_loop(top, writes)).stats
    low = ms.run_trace(Trace.open_loop(top % cap, writes)).stats
    assert high.reads + high.writes == 6           # two requests cross a burst boundary
    assert (high.reads, high.writes, high.sim_cycles) == (low.reads, low.writes,
                                                          low.sim_cycles)

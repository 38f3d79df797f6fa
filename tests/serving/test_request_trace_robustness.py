"""Request traces (CSV, plain or gzip) and output-length files against bad input: each
class of damage, then a property suite that mutates a valid trace and requires either the
project's one-line error naming the file (and row) or a valid serving run with finite
metrics."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.serving.traces import MAX_ARRIVAL_S, MAX_TOKENS, load_trace, read_lengths

HEADER = ["arrival_s", "prompt_tokens", "output_tokens", "prompt"]
ROWS = [[f"{0.25 * i:g}", str(20 + 7 * i), str(3 + i % 5), f"question {i}, please"]
        for i in range(10)]
SERVE = ["--system", "mlu370-x4", "--model", "deepseek-r1-distill-qwen-7b", "--allocator",
         "paged", "--evaluator", "analytic", "--history-fraction", "0", "--json"]


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("H2M2SIM_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def _csv(rows, header=HEADER) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _serve(capsys, path) -> tuple[int, str, str]:
    rc = main(["serve", "--trace", str(path), *SERVE])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _assert_outcome(rc: int, out: str, err: str, path) -> None:
    """Either one line ``error: ...`` naming the file, or metrics that are all finite."""
    assert "Traceback" not in err
    if rc != 0:
        assert rc == 2
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert str(path) in lines[0]
        return
    data = json.loads(out)
    assert data["requests_completed"] + data["requests_rejected"] >= 1
    assert _finite(data), data


def _refused(path, needle: str, key: str | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_trace(path)
    assert needle in str(info.value) and "\n" not in str(info.value)
    if key is not None:
        assert info.value.key == key
    return info.value


# ---------------------------------------------------------------- each class
def test_missing_directory_binary_and_broken_gzip(tmp_path):
    _refused(tmp_path / "nope.csv", "no such trace file")
    _refused(tmp_path, "cannot open", str(tmp_path))
    binary = _write(tmp_path / "b.csv", bytes(range(256)) * 4)
    _refused(binary, "cannot read header", str(binary))
    good = gzip.compress(_csv(ROWS).encode())
    for name, data in (("cut.csv.gz", good[:-15]), ("raw.csv.gz", b"\x1f\x8b\x08\x00junk"),
                       ("flip.csv.gz", good[:30] + bytes([good[30] ^ 0x55]) + good[31:])):
        p = tmp_path / name
        p.write_bytes(data)
        err = _refused(p, "cannot read")
        assert err.key.startswith(str(p))


def test_missing_and_duplicate_columns(tmp_path):
    p = _write(tmp_path / "m.csv", _csv([r[:1] + r[2:] for r in ROWS],
                                        ["arrival_s", "output_tokens", "prompt"]).encode())
    _refused(p, "missing column(s) prompt_tokens", str(p))
    p = _write(tmp_path / "d.csv", _csv(ROWS, ["arrival_s", "prompt_tokens", "prompt_tokens",
                                               "prompt"]).encode())
    _refused(p, "prompt_tokens more than once", str(p))
    p = _write(tmp_path / "h.csv", _csv([HEADER] + ROWS).encode())
    _refused(p, "not a number: 'prompt_tokens'", f"{p} row 1")


@pytest.mark.parametrize("column,value,needle", [
    ("prompt_tokens", "nan", "not a finite number"),
    ("prompt_tokens", "inf", "not a finite number"),
    ("output_tokens", "-3", "must be >= 0"),
    ("output_tokens", "2.5", "whole number"),
    ("prompt_tokens", "1e30", f"must be <= {MAX_TOKENS}"),
    ("prompt_tokens", str(2**63), f"must be <= {MAX_TOKENS}"),
    ("output_tokens", "seven", "not a number"),
    ("arrival_s", "-0.5", "must be >= 0"),
    ("arrival_s", "1e30", f"must be <= {MAX_ARRIVAL_S:.0f}"),
    ("arrival_s", "nan", "not a finite number"),
])
def test_bad_values_name_file_row_and_column(tmp_path, column, value, needle):
    rows = [list(r) for r in ROWS]
    rows[6][HEADER.index(column)] = value
    for name in ("t.csv", "t.csv.gz"):
        p = _write(tmp_path / name, _csv(rows).encode())
        err = _refused(p, needle, f"{p} row 7")
        assert f"column '{column}' (line 8)" in err.message


def test_unsorted_arrivals_are_refused_not_sorted(tmp_path):
    rows = [list(r) for r in ROWS]
    rows[3], rows[4] = rows[4], rows[3]
    p = _write(tmp_path / "t.csv", _csv(rows).encode())
    _refused(p, "arrivals must be sorted", f"{p} row 5")


def test_empty_and_header_only(tmp_path):
    _refused(_write(tmp_path / "e.csv", b""), "empty file")
    _refused(_write(tmp_path / "e.csv.gz", b""), "empty file")
    _refused(_write(tmp_path / "h.csv", _csv([]).encode()), "no requests")


def test_bad_trace_through_the_cli_is_one_line(tmp_path, capsys):
    rows = [list(r) for r in ROWS]
    rows[2][1] = "inf"
    p = _write(tmp_path / "t.csv", _csv(rows).encode())
    rc, out, err = _serve(capsys, p)
    _assert_outcome(rc, out, err, p)
    assert rc == 2 and f"{p} row 3" in err


@pytest.mark.parametrize("body,needle,key", [
    ("", "holds no lengths", ""),
    ("5 0 7", "must be >= 1, got 0", " length 2"),
    ("5\n99999999999999999999999", f"must be <= {MAX_TOKENS}", " length 2"),
    ("5,\u00b2", "not a number", " length 2"),
    ("5 1.5", "whole number", " length 2"),
    ("3 nan", "not a finite number", " length 2"),
])
def test_output_length_files(tmp_path, body, needle, key):
    p = tmp_path / "lengths.txt"
    p.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_lengths(p)
    assert needle in str(info.value) and info.value.key == f"{p}{key}"


def test_output_length_files_read_gzip_and_refuse_damage(tmp_path):
    g = tmp_path / "l.txt.gz"
    g.write_bytes(gzip.compress(b"7, 9\n11\n"))
    assert read_lengths(g).tolist() == [7, 9, 11]
    for p, data in ((tmp_path / "b.txt", b"\xff\xfe1 2"), (tmp_path / "c.txt.gz", b"\x1f\x8b")):
        p.write_bytes(data)
        with pytest.raises(ConfigError, match="cannot read"):
            read_lengths(p)
    with pytest.raises(ConfigError, match="cannot read"):
        read_lengths(tmp_path)


# ---------------------------------------------------------------- property suite
_SCRATCH = Path(tempfile.mkdtemp(prefix="request-trace-fuzz-"))
BAD_CELLS = ["nan", "inf", "-inf", "-1", "1e30", str(2**63), "1.5", "abc", "", "0x10",
             "1e400", "  7  ", "9" * 30, "\x00", '"', "2,3"]


def _mutation():
    r, c = st.integers(0, len(ROWS) - 1), st.integers(0, len(HEADER) - 1)
    return st.one_of(
        st.tuples(st.just("cell"), r, c, st.sampled_from(BAD_CELLS)),
        st.tuples(st.just("drop_header_column"), c),
        st.tuples(st.just("drop_column"), c),
        st.tuples(st.just("rename_column"), c, st.sampled_from(HEADER + ["", "x"])),
        st.tuples(st.just("header_row"), r),
        st.tuples(st.just("swap"), r, r),
        st.tuples(st.just("short_row"), r, c),
        st.tuples(st.just("late"), r, st.sampled_from([1e6, 1e9, 1e12, 1e300])),
        st.tuples(st.just("bytes"), st.sampled_from(["truncate", "flip", "insert", "empty"]),
                  st.floats(0, 1), st.binary(min_size=1, max_size=6)),
    )


def _mutate(m) -> tuple[list, list, bytes | None]:
    """(header, rows) after a table mutation, or the damaged bytes of the valid file."""
    header, rows = list(HEADER), [list(r) for r in ROWS]
    kind = m[0]
    if kind == "cell":
        rows[m[1]][m[2]] = m[3]
    elif kind == "drop_header_column":
        del header[m[1]]
    elif kind == "drop_column":
        del header[m[1]]
        for row in rows:
            del row[m[1]]
    elif kind == "rename_column":
        header[m[1]] = m[2]
    elif kind == "header_row":
        rows.insert(m[1], list(HEADER))
    elif kind == "swap":
        rows[m[1]], rows[m[2]] = rows[m[2]], rows[m[1]]
    elif kind == "short_row":
        rows[m[1]] = rows[m[1]][:m[2]]
    elif kind == "late":
        for row in rows[m[1]:]:
            row[0] = repr(float(row[0]) + m[2])
    else:
        data = _csv(rows).encode()
        at = int(m[2] * len(data))
        if m[1] == "truncate":
            data = data[:at]
        elif m[1] == "flip":
            at = min(at, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ (m[3][0] or 1)]) + data[at + 1:]
        elif m[1] == "insert":
            data = data[:at] + m[3] + data[at:]
        else:
            data = b""
        return header, rows, data
    return header, rows, None


def _check_library(path: Path) -> None:
    try:
        t = load_trace(path)
    except ConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        return
    assert len(t) >= 1
    assert np.isfinite(t.arrival_s).all() and (t.arrival_s >= 0).all()
    assert (np.diff(t.arrival_s) >= 0).all() and (t.arrival_s <= MAX_ARRIVAL_S).all()
    for a in (t.prompt_tokens, t.output_tokens):
        assert a.dtype == np.int64 and (a >= 0).all() and (a <= MAX_TOKENS).all()


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=_mutation(), gz=st.booleans())
def test_mutated_request_traces(capsys, m, gz):
    header, rows, data = _mutate(m)
    if data is None:
        data = _csv(rows, header).encode()
    path = Path(tempfile.mkdtemp(dir=_SCRATCH)) / ("t.csv.gz" if gz else "t.csv")
    _write(path, data)
    _check_library(path)
    _assert_outcome(*_serve(capsys, path), path)


def test_the_valid_trace_serves(tmp_path, capsys):
    for name in ("t.csv", "t.csv.gz"):
        p = _write(tmp_path / name, _csv(ROWS).encode())
        rc, out, err = _serve(capsys, p)
        _assert_outcome(rc, out, err, p)
        assert rc == 0 and json.loads(out)["requests_completed"] == len(ROWS)

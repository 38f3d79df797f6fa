"""Trace formats told from the content, and saved traces that replay as their source."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from dram_models import replay
from dram_models.errors import ConfigError
from dram_models.memory import MemorySystem
from dram_models.spec import load_standard
from dram_models.trace import Trace, detect, load, save

STD = ["--standard", "lpddr5-6400", "--channels", "1"]
# (format, file name): every format, and the text ones compressed
FILES = [("npz", "t.npz"), ("ramulator", "t.trace"), ("dramsim3", "t.trace"),
         ("ramulator", "t.trace.gz"), ("dramsim3", "t.trace.gz")]


def _trace(n: int = 600, timed: bool = False, writes: float = 0.25, seed: int = 0) -> Trace:
    """Burst-aligned random addresses; arrival cycles a few CK apart if ``timed``."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, 1 << 22, n).astype(np.uint64) * np.uint64(32)
    w = rng.random(n) < writes
    if not timed:
        return Trace.open_loop(addr, w)
    return Trace(addr, w, np.cumsum(rng.integers(0, 6, n)))


def _replay(capsys, path, *extra) -> tuple[int, str, str]:
    rc = replay.main([str(path), *STD, "--json", *extra])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_line_error(capsys, path, *extra) -> str:
    rc, out, err = _replay(capsys, path, *extra)
    assert rc == 2 and out == "" and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), err
    return lines[0]


# ------------------------------------------------------------------- detection
@pytest.mark.parametrize("fmt, name", FILES)
def test_format_is_told_from_the_content(tmp_path, capsys, fmt, name):
    t = _trace(40, timed=True)
    path = save(t, tmp_path / name, fmt)
    assert detect(path)[0] == fmt
    assert load(path) == load(path, fmt)
    rc, out, err = _replay(capsys, path)
    assert rc == 0 and err == "" and json.loads(out)["requests"] == 40


def test_the_first_request_line_decides_after_comments_and_blanks(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("# LD 0x40\n\n   \n0x40 READ 3\n0x80 WRITE 9\n")
    assert detect(p) == ("dramsim3", 4, "0x40 READ 3")
    assert load(p).arrival.tolist() == [3, 9]


def test_gzip_is_told_by_its_magic_bytes_not_its_name(tmp_path):
    t = _trace(30, timed=True)
    packed = save(t, tmp_path / "t.trace.gz", "dramsim3")
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    hidden = tmp_path / "t.trace"
    hidden.write_bytes(packed.read_bytes())
    assert detect(hidden)[0] == "dramsim3" and load(hidden) == t
    # and plain text named .gz is read as the text it is
    plain = tmp_path / "plain.gz"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    assert load(plain) == t


def test_an_npz_is_told_whatever_its_name(tmp_path):
    t = _trace(30, timed=True)
    p = save(t, tmp_path / "t.npz")
    other = tmp_path / "t.trace"
    other.write_bytes(p.read_bytes())
    assert detect(other)[0] == "npz" and load(other) == t


@pytest.mark.parametrize("given, fmt", [("ramulator", "dramsim3"), ("dramsim3", "ramulator"),
                                        ("npz", "dramsim3"), ("ramulator", "npz")])
def test_a_format_the_content_contradicts_is_one_line(tmp_path, capsys, given, fmt):
    path = save(_trace(10), tmp_path / ("t.npz" if fmt == "npz" else "t.trace"), fmt)
    line = _one_line_error(capsys, path, "--format", given)
    key = str(path) if fmt == "npz" else f"{path}:1"
    assert line.startswith(f"error: {key}: ") and f"format {given} " in line and fmt in line
    with pytest.raises(ConfigError) as info:
        load(path, given)
    assert info.value.key == key


def test_a_mismatch_names_the_first_request_line(tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("# header\nLD 0x40\n0x80 READ 1\n")
    with pytest.raises(ConfigError) as info:
        load(p, "dramsim3")
    assert info.value.key == f"{p}:2" and "'LD 0x40'" in info.value.message


@pytest.mark.parametrize("body, key_line, needle", [
    (b"", 0, "holds no requests"),
    (b"# only a comment\n\n", 0, "holds no requests"),
    (b"foo bar\nLD 0x40\n", 1, "cannot tell the trace format from 'foo bar'"),
    (b"\xff\xfe\x00garbage\n", 1, "from a line that is not ASCII text"),
    (gzip.compress(b"# c\n0x40 0x80\n", mtime=0), 2, "cannot tell the trace format"),
])
def test_empty_or_undetectable_content_is_one_line(tmp_path, capsys, body, key_line, needle):
    p = tmp_path / "t.trace"
    p.write_bytes(body)
    line = _one_line_error(capsys, p)
    key = f"{p}:{key_line}" if key_line else str(p)
    assert line.startswith(f"error: {key}: ") and needle in line


# ------------------------------------------------------------------- round trip
def _equivalent(source: Trace, fmt: str) -> Trace:
    """What ``source`` reads back as from ``fmt``: Ramulator 2 lines carry no arrival
    cycle (-1, open loop); DRAMsim3 writes an open loop at cycle 0."""
    if fmt == "ramulator":
        return Trace.open_loop(source.addr, source.is_write)
    if fmt == "dramsim3" and not source.timed:
        return Trace(source.addr, source.is_write, np.zeros(len(source), np.int64))
    return source


@pytest.mark.parametrize("timed", [False, True], ids=["open", "timed"])
@pytest.mark.parametrize("fmt, name", FILES)
def test_save_then_load_gives_the_documented_arrays(tmp_path, fmt, name, timed):
    t = _trace(200, timed=timed)
    assert load(save(t, tmp_path / name, fmt)) == _equivalent(t, fmt)


def _stats(ms: MemorySystem, t: Trace) -> dict:
    return ms.run_trace(t).stats.as_dict()


@pytest.mark.parametrize("channels, writes", [(1, 0.0), (1, 0.3), (None, 0.3)],
                         ids=["1ch-reads", "1ch-mixed", "device-mixed"])
def test_an_open_loop_replays_the_same_from_every_format(tmp_path, channels, writes):
    """Arrival 0 for every request (the DRAMsim3 encoding of an open loop) gives the
    statistics of arrival -1, on the lean read path and the general engine alike."""
    ms = MemorySystem(load_standard("lpddr5-6400"), channels=channels)
    t = _trace(3000, writes=writes, seed=3)
    want = _stats(ms, t)
    for fmt, name in FILES:
        assert _stats(ms, load(save(t, tmp_path / name, fmt))) == want, (fmt, name)


def test_a_timed_trace_keeps_its_cycles(tmp_path):
    ms = MemorySystem(load_standard("lpddr5-6400"), channels=2)
    t = _trace(2000, timed=True, seed=4)
    want = _stats(ms, t)
    assert want != _stats(ms, Trace.open_loop(t.addr, t.is_write))  # the cycles matter
    for fmt, name in FILES:
        if fmt != "ramulator":
            assert _stats(ms, load(save(t, tmp_path / name, fmt))) == want, (fmt, name)

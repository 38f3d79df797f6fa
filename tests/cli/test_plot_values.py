"""``h2m2sim plot`` on cells that hold no finite number (``nan``, ``inf``, ``-inf``, as a
results CSV may): such rows are left out of the figure and its table, with one warning
line saying how many; a column with no finite value at all is refused in one line
naming the option (exit 2)."""
from __future__ import annotations

from pathlib import Path

import pytest

from h2m2sim.cli import main


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.csv"
    path.write_text(text)
    return path


def _plot(capsys, csv: Path, *extra: str) -> tuple[int, list[str], list[str]]:
    rc = main(["plot", str(csv), "--out", str(csv.with_suffix(".png")), *extra])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err.splitlines()


def test_rows_whose_y_is_not_finite_are_left_out_with_one_note(tmp_path, capsys):
    csv = _csv(tmp_path, "seq,time_ns\n128,100\n256,nan\n512,inf\n768,-inf\n1024,400\n")
    rc, out, err = _plot(capsys, csv, "--x", "seq", "--y", "time_ns")
    assert rc == 0 and csv.with_suffix(".png").exists()
    assert out[1].split() == ["seq", "128", "1024"]
    assert out[2].split() == ["value", "100", "400"]
    assert err == ["warning: 3 rows with no finite time_ns (nan or inf) are left out of "
                   "the plot", f"wrote {csv.with_suffix('.png')}"]


@pytest.mark.parametrize("kind", ["line", "bar"])
def test_rows_whose_x_is_not_finite_are_left_out_with_one_note(tmp_path, capsys, kind):
    csv = _csv(tmp_path, "seq,time_ns\nnan,1\ninf,2\n4,3\n8,5\n")
    rc, out, err = _plot(capsys, csv, "--x", "seq", "--y", "time_ns", "--kind", kind)
    assert rc == 0
    assert out[1].split() == ["seq", "4", "8"]
    assert err[0] == ("warning: 2 rows with no finite seq (nan or inf) are left out of the "
                      "plot")


def test_a_speedup_that_is_not_finite_is_left_out(tmp_path, capsys):
    # b's time 0 at seq 2 would be an infinite speedup over a
    csv = _csv(tmp_path, "system,seq,time_ns\na,1,10\nb,1,5\na,2,10\nb,2,0\n")
    rc, out, err = _plot(capsys, csv, "--x", "seq", "--y", "time_ns", "--hue", "system",
                         "--baseline", "system=a")
    assert rc == 0
    assert [line.split() for line in out[1:]] == [["seq", "1", "2"], ["a", "1", "1"],
                                                  ["b", "2", "-"]]
    assert err[0] == ("warning: 1 rows with no finite speedup (nan or inf) are left out "
                      "of the plot")


@pytest.mark.parametrize("args,message", [
    (["--x", "ok", "--y", "time_ns"], "--y: column 'time_ns'"),
    (["--x", "seq", "--y", "ok"], "--x: column 'seq'"),
])
def test_a_column_with_no_finite_value_is_one_line_exit_2(tmp_path, capsys, args, message):
    csv = _csv(tmp_path, "seq,time_ns,ok\nnan,inf,1\ninf,nan,2\n-inf,-inf,3\n")
    rc, out, err = _plot(capsys, csv, *args)
    assert rc == 2 and out == []
    assert err == [f"error: {message} has no finite value (only nan or inf): nothing to "
                   "plot"]
    assert not csv.with_suffix(".png").exists()

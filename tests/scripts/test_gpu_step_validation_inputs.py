"""scripts/gpu_step_validation.py refuses a malformed measurement file row by row (one line
naming ``steps[i].key`` and the file, exit status 2) and writes its ``--csv`` atomically:
a directory, an unwritable place or a failed run leaves nothing behind, a missing folder is
created."""
from __future__ import annotations

import json
import math

import pytest
from scriptmod import ROOT, load_script

STEPS = ROOT / "workloads" / "hardware" / "h100-steps.json"
#: Row 0 of the shipped file is a decode step, row 9 a prefill step (both Llama 2 7B).
DECODE, PREFILL = 0, 9


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    return load_script("gpu_step_validation")


def _steps_file(tmp_path, edit=None, rows=None) -> str:
    """The shipped H100 steps (only ``rows`` of them, if given) after ``edit``."""
    data = json.loads(STEPS.read_text())
    if rows is not None:
        data["steps"] = data["steps"][:rows]
    if edit is not None:
        edit(data["steps"])
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(data))     # inf is written as Infinity, as json reads it
    return str(path)


def _main(script, capsys, *argv) -> tuple[int, str, str]:
    rc = script.main(["--system", "h100-sxm", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _set(i, key, value):
    return lambda steps: steps[i].__setitem__(key, value)


def _refused(rc, out, err, *words):
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("edit, key", [
    (lambda s: s.__setitem__(DECODE, [1]), f"steps[{DECODE}]"),
    (_set(DECODE, "batch", "abc"), f"steps[{DECODE}].batch"),
    (_set(DECODE, "batch", None), f"steps[{DECODE}].batch"),
    (_set(DECODE, "batch", 0), f"steps[{DECODE}].batch"),
    (_set(DECODE, "batch", 1.7), f"steps[{DECODE}].batch"),
    (_set(DECODE, "batch", True), f"steps[{DECODE}].batch"),
    (_set(DECODE, "batch", 10 ** 400), f"steps[{DECODE}].batch"),
    (_set(DECODE, "seq", None), f"steps[{DECODE}].seq"),
    (_set(DECODE, "seq", -512), f"steps[{DECODE}].seq"),
    (_set(DECODE, "graph_ms", math.inf), f"steps[{DECODE}].graph_ms"),
    (_set(DECODE, "graph_ms", math.nan), f"steps[{DECODE}].graph_ms"),
    (_set(DECODE, "graph_ms", True), f"steps[{DECODE}].graph_ms"),
    (_set(DECODE, "graph_ms", "5"), f"steps[{DECODE}].graph_ms"),
    (_set(PREFILL, "eager_ms", 10 ** 400), f"steps[{PREFILL}].eager_ms"),
    (_set(DECODE, "phase", "bogus"), f"steps[{DECODE}].phase"),
    (_set(DECODE, "phase", ["decode"]), f"steps[{DECODE}].phase"),
    (_set(DECODE, "model", "no-such-model"), f"steps[{DECODE}].model"),
    (_set(DECODE, "model", {"name": "llama2-7b"}), f"steps[{DECODE}].model"),
    # far more weights and KV cache than the H100's 80 GB
    (_set(PREFILL, "seq", 99_999_999), f"steps[{PREFILL}].seq"),
    (_set(DECODE, "batch", 100_000), f"steps[{DECODE}].seq"),
])
def test_a_malformed_row_is_one_line(tmp_path, script, capsys, edit, key):
    path = _steps_file(tmp_path, edit)
    rc, out, err = _main(script, capsys, "--measured", path)
    _refused(rc, out, err, key + ":", path)


def test_rows_are_returned_checked(tmp_path, script):
    """A float batch without a fraction is an integer; only the phase's time is kept (a
    prefill row's graph_ms is null: not measured)."""
    rows = script.load_steps(_steps_file(tmp_path, _set(DECODE, "batch", 2.0)), "h100-sxm")
    assert rows[DECODE]["batch"] == 2 and isinstance(rows[DECODE]["batch"], int)
    assert "graph_ms" not in rows[PREFILL] and rows[PREFILL]["eager_ms"] > 0


def test_csv_onto_a_directory_leaves_nothing(tmp_path, script, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _steps_file(tmp_path, rows=1)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out, err = _main(script, capsys, "--measured", path, "--csv", ".")
    _refused(rc, out, err, "--csv", "directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_csv_under_a_file_is_one_line(tmp_path, script, capsys):
    (tmp_path / "plain").write_text("")
    rc, out, err = _main(script, capsys, "--measured", _steps_file(tmp_path, rows=1),
                         "--csv", str(tmp_path / "plain" / "x.csv"))
    _refused(rc, out, err, "--csv")


def test_a_failed_run_removes_the_folder_it_made(tmp_path, script, capsys):
    path = _steps_file(tmp_path, _set(DECODE, "phase", "bogus"))
    rc, out, err = _main(script, capsys, "--measured", path,
                         "--csv", str(tmp_path / "new" / "deeper" / "x.csv"))
    _refused(rc, out, err, "phase")
    assert not (tmp_path / "new").exists()


def test_csv_into_a_missing_folder(tmp_path, script, capsys):
    csv = tmp_path / "nodir" / "x.csv"
    rc, out, err = _main(script, capsys, "--measured", _steps_file(tmp_path, rows=1),
                         "--csv", str(csv))
    assert rc == 0, err
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("model,phase,batch,seq,") and len(lines) == 2
    assert [p.name for p in csv.parent.iterdir()] == ["x.csv"]     # no temporary left


def test_csv_onto_the_measured_file_is_refused(tmp_path, script, capsys):
    path = _steps_file(tmp_path, rows=1)
    before = (tmp_path / "steps.json").read_text()
    rc, out, err = _main(script, capsys, "--measured", path, "--csv", path)
    _refused(rc, out, err, "--csv", "--measured")
    assert (tmp_path / "steps.json").read_text() == before

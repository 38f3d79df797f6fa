"""docs/examples/first-run.ipynb runs: every code cell, in order, in one fresh namespace,
in a temporary folder (plain execution of the cells' source; no Jupyter needed), writes
nothing where it runs, and prints the numbers its stored outputs show (re-execute it with
``python tools/gen_tutorial.py --notebook`` when the code changes them)."""
from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "examples" / "first-run.ipynb"
sys.path.insert(0, str(ROOT / "tools"))

import gen_tutorial  # noqa: E402

#: what a stored output shows that differs from run to run: a wall time, a temporary path
VARYING = [re.compile(r"^wall time: .*$", re.M), re.compile(r"PosixPath\('[^']*'\)")]


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def run_cells(cells: list[dict], namespace: dict) -> list[tuple[str, object]]:
    """Execute ``cells`` in ``namespace`` as a notebook does: per cell, what it printed
    and the value of its last line when that is an expression (else None)."""
    out = []
    for i, cell in enumerate(cells):
        name = f"{NOTEBOOK.name}[cell {i}]"
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, name, "exec"), namespace)
            value = None if last is None else \
                eval(compile(ast.Expression(last.value), name, "eval"), namespace)
        out.append((printed.getvalue(), value))
    return out


def _text(outputs: list[dict], kind: str) -> str | None:
    """The text of a cell's stored ``stream`` or ``execute_result`` output."""
    for o in outputs:
        if o["output_type"] == kind:
            return "".join(o["text"] if kind == "stream" else o["data"]["text/plain"])
    return None


def _masked(text: str) -> str:
    for v in VARYING:
        text = v.sub("", text)
    return text


def _table(text: str) -> list[list[str]]:
    """The cells of a stored DataFrame's text, without its header line and index."""
    return [line.split()[1:] for line in text.splitlines()[1:]]


def _matches(printed: str, value: float, rel: float = 1e-6) -> bool:
    """``value`` is ``printed`` to its printed decimals (and ``rel``)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed) - value) <= 0.5 * 10.0 ** -decimals + rel * abs(value)


def drift(cells: list[dict], fresh: list[tuple[str, object]]) -> list[str]:
    """Where the stored outputs of ``cells`` differ from ``fresh`` (:func:`run_cells`)."""
    problems = []
    for i, (cell, (printed, value)) in enumerate(zip(cells, fresh)):
        stream, result = _text(cell["outputs"], "stream"), _text(cell["outputs"], "execute_result")
        if stream is not None:
            problems += [f"cell {i}: {p}" for p in
                         gen_tutorial.drift(_masked(stream), _masked(printed))]
        if result is None:
            continue
        if isinstance(value, list) or type(value).__name__ == "DataFrame":  # the table
            rows = value.to_dict("records") if hasattr(value, "to_dict") else value
            stored = _table(result)
            now = [list(r.values()) for r in rows]
            same = len(stored) == len(now) and all(
                len(s) == len(n) and all(map(_matches, s, n)) for s, n in zip(stored, now))
            if not same:
                problems.append(f"cell {i}: stored table\n{result}\nnow {now}")
        else:
            problems += [f"cell {i}: {p}" for p in
                         gen_tutorial.drift(_masked(result), _masked(repr(value)))]
    return problems


def test_notebook_runs_writes_nothing_where_it_runs_and_prints_its_stored_outputs(
        tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    plt.switch_backend("Agg")
    namespace: dict = {"__name__": "__main__"}
    cells = code_cells(NOTEBOOK)
    try:
        fresh = run_cells(cells, namespace)
    finally:
        plt.close("all")
    assert namespace["r"]["speedup"] > 1
    assert len(namespace["results"]) == 4
    assert (Path(namespace["out"]) / "results.csv").exists()
    assert Path(namespace["out"]).parent == tmp
    assert list(cwd.iterdir()) == []
    assert drift(cells, fresh) == []


class _Repr:
    """An object whose repr is the given text."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def test_an_edited_stored_number_is_caught():
    cells = code_cells(NOTEBOOK)
    speedup = re.search(r"speedup over lpddr-only: (\S+)x", _text(cells[0]["outputs"], "stream"))
    result = _text(cells[1]["outputs"], "execute_result")
    table = _table(_text(cells[3]["outputs"], "execute_result"))
    report = _text(cells[2]["outputs"], "execute_result")
    fresh = [(_text(cells[0]["outputs"], "stream"), None), ("", float(result)), ("", _Repr(report)),
             ("", [dict(zip("abcd", map(float, row))) for row in table]), ("", None)]
    assert drift(cells, fresh) == []        # the stored outputs agree with themselves
    edited = [(fresh[0][0].replace(speedup.group(0), "speedup over lpddr-only: 9.99x"), None),
              *fresh[1:]]
    assert drift(cells, edited) != []
    assert drift(cells, [fresh[0], ("", float(result) * (1 + 1e-5)), *fresh[2:]]) != []
    assert drift(cells, [*fresh[:2], ("", _Repr(report.replace("ran=4", "ran=3"))),
                         *fresh[3:]]) != []
    rows = [dict(r) for r in fresh[3][1]]
    rows[2]["d"] += 1e-3
    assert drift(cells, [*fresh[:3], ("", rows), fresh[4]]) != []


def test_notebook_has_its_outputs_stored_and_says_what_made_them():
    nb = json.loads(NOTEBOOK.read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in cells)
    assert any("image/png" in o.get("data", {}) for c in cells for o in c["outputs"])
    made = [c for c in nb["cells"] if c.get("id") == gen_tutorial.MADE_WITH_CELL]
    assert len(made) == 1 and made[0]["cell_type"] == "markdown"
    assert "".join(made[0]["source"]) == gen_tutorial.stamp(nb["metadata"]["h2m2sim"])

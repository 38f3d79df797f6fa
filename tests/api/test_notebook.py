"""docs/examples/first-run.ipynb runs: every code cell, in order, in one fresh namespace,
in a temporary folder (plain execution of the cells' source; no Jupyter needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "examples" / "first-run.ipynb"


def code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def test_notebook_runs(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    monkeypatch.chdir(tmp_path)
    plt.switch_backend("Agg")
    namespace: dict = {"__name__": "__main__"}
    try:
        for i, source in enumerate(code_cells(NOTEBOOK)):
            exec(compile(source, f"{NOTEBOOK.name}[cell {i}]", "exec"), namespace)
    finally:
        plt.close("all")
    assert namespace["r"]["speedup"] > 1
    assert len(namespace["results"]) == 4
    assert (tmp_path / "results" / "batch-scaling" / "results.csv").exists()


def test_notebook_has_its_outputs_stored():
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in cells)
    assert any("image/png" in o.get("data", {}) for c in cells for o in c["outputs"])

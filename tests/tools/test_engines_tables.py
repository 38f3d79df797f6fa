"""The tables of docs/validation/engines.md are those its data prints: each table that
tools/engines_tables.py makes from the shipped engines.csv and grid.csv appears in the
page verbatim, so a rerun of the study cannot leave the page behind."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("engines_tables",
                                                  ROOT / "tools/engines_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_table_of_the_page_is_the_datas():
    tool, data = _tool(), ROOT / "docs/validation/engines"
    page = (ROOT / "docs/validation/engines.md").read_text()
    rows = tool._rows(data / "engines.csv")
    tables = [tool.fp8kv(rows), tool.nim(rows), tool.trtllm(rows),
              tool.grid(tool._rows(data / "grid.csv"))]
    for table in tables:
        assert table.count("\n") >= 3 and table in page, table.splitlines()[0]

"""tools/engine_ab.py exports importable copies of dram_models, from git and from the
working tree, under their own package names (the timing itself is a benchmark, not a
test)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from scriptmod import load_tool


@pytest.mark.parametrize("rev", [None, "HEAD"])
def test_export_makes_an_importable_copy(tmp_path, rev):
    ab = load_tool("engine_ab")
    dest = tmp_path / "ab_copy"
    ab._export(rev, dest)
    assert (dest / "engine" / "general.py").is_file()
    assert not (dest / "__pycache__").exists()
    # the copy imports under its own name, with its own modules (relative imports only)
    out = subprocess.run([sys.executable, "-c",
                          "import ab_copy.spec as s, ab_copy.memory as m; "
                          "print(m.__file__); print(s.load_standard('lpddr5-6400').name)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert str(dest) in out.splitlines()[0]
    assert out.splitlines()[1].lower().startswith("lpddr5")
    ab._export(rev, dest)                   # exporting again replaces the copy
    assert (dest / "engine" / "general.py").is_file()

"""The engine is compiled without Numba's negative-index wrap-around (dram_models._jit),
which is only sound if no array index is ever negative or past the end. This runs the
quick regression corpus (every standard and controller variant, traces and closed-loop
streams with translation) in a fresh process with Numba's bounds checking on, where any
such index raises IndexError, and with a private cache so the checked build is compiled
here; the results must still equal the golden ones.

It compiles the whole engine a second time (about 1.5 minutes), so it is marked slow.
Beside it in the fast suite, the golden-corpus tests (``tests/dram/test_dram_regression.py``)
run the same corpus on the normal build and require identical results, which an index
that wrapped around or ran past an array would almost surely break; this test proves the
absence of such an index on the corpus."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_engine_indexes_in_bounds_on_the_regression_corpus():
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=cache)
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "engine_regression.py"), "--check",
             str(ROOT / "tests" / "data" / "engine_golden.json"), "--quick"],
            env=env, capture_output=True, text=True, timeout=1800)
    assert "IndexError" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "0 differences" in proc.stdout

"""docs/validation.md and docs/performance.md are assembled from docs/validation/*.md and
docs/performance/*.md; they must not drift from their parts."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_validation_and_performance_docs_are_assembled():
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "assemble_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr

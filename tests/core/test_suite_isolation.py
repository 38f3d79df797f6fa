"""The test suite leaves the user's caches alone."""
from __future__ import annotations

from pathlib import Path

from h2m2sim.cache import default_cache_dir


def test_the_suite_never_writes_the_users_result_cache():
    """conftest points the result cache at pytest's temporary folder."""
    assert default_cache_dir() != Path("~/.cache/h2m2sim").expanduser()
    assert "h2m2sim-cache" in str(default_cache_dir())

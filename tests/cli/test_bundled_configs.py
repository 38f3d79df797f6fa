"""Every configuration shipped in workloads/configs loads and validates (run configs
through the run-config loader, sweep files through the sweep loader)."""
from __future__ import annotations

from pathlib import Path

import pytest

from h2m2sim.config.loader import load_file, read_yaml

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "workloads" / "configs").glob("*.yaml"))


def test_the_readme_default_exists():
    assert any(p.name == "default.yaml" for p in CONFIGS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_bundled_config_validates(path):
    raw = read_yaml(path)
    if "grid" in raw or "zip" in raw:
        from h2m2sim.sweeps.spec import read_sweep
        sweep = read_sweep(path)
        assert len(sweep.points) >= 2
    else:
        cfg = load_file(path)
        assert cfg.model is not None and cfg.system is not None

"""docs/configuration.md is generated from the code and must be up to date."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_up_to_date():
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_config_reference.py"),
                        "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_reference_documents_every_field_of_the_owned_sections():
    text = (ROOT / "docs" / "configuration.md").read_text()
    import dataclasses

    from h2m2sim.config import PolicyConfig, SimulationConfig, WorkloadConfig
    for prefix, cls in (("workload", WorkloadConfig), ("policy", PolicyConfig),
                        ("simulation", SimulationConfig)):
        for f in dataclasses.fields(cls):
            assert f"| `{prefix}.{f.name}` |" in text
    for topic in ("## Sweep files", "## Result store", "results.csv", "points/<hash>.json",
                  "## Cache of expensive results", "H2M2SIM_CACHE"):
        assert topic in text


def test_reference_documents_system_model_and_every_preset():
    text = (ROOT / "docs" / "configuration.md").read_text()
    for topic in ("### `system.sides[]`", "### `system.sides[].dram`",
                  "### `system.sides[].chip`", "### `system.mmu`",
                  "### `system.interconnect`", "### `system.sync`", "## `model`",
                  "| `system.sides[].capacity_bytes` | integer |", "| `model.layers` |",
                  "## Built-in presets", "## Plots of results", "| `--yunit UNIT` |",
                  "| `--xlabel TEXT` |", "| `--size WxH` |"):
        assert topic in text, topic
    from h2m2sim.catalog import KINDS
    for name in KINDS.names():
        kind = KINDS[name]()
        for entry in kind.names():
            # the same line as `h2m2sim presets` prints
            assert f"| `{entry}` | {kind.summary(entry).replace('|', chr(92) + '|')} |" \
                in text, (name, entry)

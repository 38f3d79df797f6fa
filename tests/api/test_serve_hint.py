"""Serving a multi-card system from a configuration whose workload is a fixed batch:
``h2m2sim.serve`` takes its ``trace=`` and keywords as part of the configuration, and
``run`` of it alone names the setting that makes it a serving run."""
from __future__ import annotations

import re

import pytest

import h2m2sim
from h2m2sim.errors import ConfigError

FIXED_BATCH = {"system": {"preset": "h2m2", "cards": 2}, "model": "gpt3-175b",
               "workload": {"batch": 8, "seq": 1024},
               "simulation": {"fidelity": "estimate"}}


def test_serve_keywords_make_a_fixed_batch_configuration_a_serving_run():
    r = h2m2sim.serve(FIXED_BATCH, trace="azure2023_conv", max_requests=5)
    assert r.config.workload.serving.trace == "azure2023_conv"
    assert r["requests"] == 5 and r.config.system.cards == 2


def test_the_cards_error_says_what_to_write_instead():
    with pytest.raises(ConfigError) as err:
        h2m2sim.run(FIXED_BATCH)
    msg = str(err.value)
    assert err.value.key == "system.cards" and "\n" not in msg
    fix = re.search(r"workload\.serving=\{[^}]*\}", msg)
    assert fix is not None, msg
    # what the message says to write loads as a serving run on both cards
    cfg = h2m2sim.load(FIXED_BATCH, [fix.group(0)])
    assert cfg.workload.serving.trace == "azure2023_conv" and cfg.system.cards == 2

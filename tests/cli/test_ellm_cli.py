"""`h2m2sim serve --allocator ellm` sizes activations from the served model without extra
options (the allocator manages activations; the serving layer gives it the model)."""
import json

import pytest

from h2m2sim.cli import main


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_serve_ellm_needs_no_activation_model_option(capsys):
    rc = main(["serve", "--trace", "alpaca", "--system", "a100-80gb", "--model", "llama3-8b",
               "--allocator", "ellm", "--max-requests", "40", "--evaluator", "analytic",
               "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    m = json.loads(out)
    assert m["requests_completed"] == 40
    assert m["tokens_per_s"] > 0

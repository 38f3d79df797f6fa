"""Speculative decoding in serving (``serve --speculative``): accepted tokens per step
against the expected-acceptance formula, the time it saves (and costs), the memory the
draft takes, the shared formula and its use by BMC, and one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from h2m2sim import api
from h2m2sim.cli import main
from h2m2sim.compute.bmc import accepted_per_step, schedule
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.compute.speculative import (
    acceptance_for_tokens,
    expected_speedup,
    expected_tokens_per_step,
    take_tokens,
)
from h2m2sim.errors import ConfigError
from h2m2sim.serving.config import ServingConfig, SpeculativeConfig, resolve_serving
from h2m2sim.serving.deployment import model_sizes, resolve_device, resolve_model
from h2m2sim.serving.run import serve
from h2m2sim.serving.traces import RequestTrace

BASE = ["serve", "--system", "mlu370-x4", "--model", "llama2-7b", "--allocator", "paged",
        "--evaluator", "analytic", "--max-batch", "4", "--json"]
SPEC = "draft=opt-350m,k=4,acceptance=0.8"


@pytest.fixture(scope="module")
def _tables_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _cache(_tables_dir, monkeypatch):
    # one cache for the module: its runs share iteration tables
    monkeypatch.setenv("H2M2SIM_CACHE", str(_tables_dir))


def _trace(tmp_path, n=4, prompt=64, output=1200, gap=0.0):
    """A CSV trace of ``n`` equal requests arriving ``gap`` s apart."""
    path = tmp_path / "trace.csv"
    rows = [f"{i * gap},{prompt},{output}" for i in range(n)]
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return str(path)


def _serve(capsys, trace, *extra):
    assert main([*BASE, "--trace", trace, *extra]) == 0
    return json.loads(capsys.readouterr().out)


# ----------------------------------------------------------------- the shared formula
def test_expected_tokens_formula():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(1 + .8 + .64 + .512 + .4096)
    a = np.array([0.1, 0.5, 0.9])
    assert np.allclose(expected_tokens_per_step(a, 3), 1 + a + a**2 + a**3)
    assert expected_tokens_per_step(0.999999, 6) == pytest.approx(7, rel=1e-4)
    assert acceptance_for_tokens(expected_tokens_per_step(0.7, 5), 5) == pytest.approx(0.7)
    # the paper's walltime improvement: E / (k c + 1)
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    for bad in ((1.0, 4), (-0.1, 4), (0.5, 0)):
        with pytest.raises(ConfigError):
            expected_tokens_per_step(*bad)


def test_take_tokens_averages_the_expectation():
    credit, got = 0.0, []
    for _ in range(1000):
        a, credit = take_tokens(credit, 2.37, 5)
        got.append(a)
    assert abs(sum(got) - 2370) < 1 and min(got) >= 1 and max(got) <= 5
    assert take_tokens(0.0, 0.2, 5)[0] == 1       # every step yields a token
    assert take_tokens(0.9, 4.5, 3)[0] == 3       # never more than it may


def test_bmc_uses_the_shared_formula():
    # a chain with i.i.d. acceptance 0.75 yields the BMC paper's m = 4 at k = 26
    assert accepted_per_step(0.75, 26) == pytest.approx(4.0, abs=0.01)
    assert accepted_per_step(0.99, 3) == 3.0      # at most the k candidates
    s = schedule(4096, 512, k=26, m=accepted_per_step(0.75, 26), acceptance_exponent=0)
    assert s.tokens == 4096 and s.steps == pytest.approx(4096 / 4.0, rel=0.01)


# ----------------------------------------------------------------- serving
@pytest.mark.parametrize("a,k", [(0.8, 4), (0.6, 2), (0.9, 7)])
def test_tokens_per_step_follow_the_formula(tmp_path, capsys, a, k):
    m = _serve(capsys, _trace(tmp_path), "--speculative",
               f"draft=opt-350m,k={k},acceptance={a}")
    want = (1 - a ** (k + 1)) / (1 - a)
    assert m["tokens_per_step"] == pytest.approx(want, rel=0.01)
    sp = m["speculative"]
    assert sp["draft"] == "opt-350m" and sp["k"] == k and sp["acceptance"] == a
    assert sp["expected_tokens_per_step"] == pytest.approx(want)
    assert m["requests_completed"] == 4 and m["output_tokens"] == 4 * 1200


def test_batch_one_decodes_faster_with_a_good_draft(tmp_path, capsys):
    trace = _trace(tmp_path, n=2)
    plain = _serve(capsys, trace, "--max-batch", "1")
    spec = _serve(capsys, trace, "--max-batch", "1", "--speculative", SPEC)
    assert plain["tokens_per_step"] is None and plain["speculative"] is None
    assert spec["tokens_per_s"] > 1.5 * plain["tokens_per_s"]
    assert spec["tpot_p50_s"] < plain["tpot_p50_s"] / 1.5
    assert spec["energy_per_output_token_j"] < plain["energy_per_output_token_j"]
    # every token after a request's first is one inter-token gap, with or without
    assert spec["itl_tokens"] == plain["itl_tokens"] == 2 * 1199
    assert spec["energy_j"] == pytest.approx(sum(spec["energy_breakdown_j"].values()))


def test_no_acceptance_gives_one_token_and_costs_the_draft(tmp_path, capsys):
    trace = _trace(tmp_path, n=2)
    plain = _serve(capsys, trace, "--max-batch", "1")
    spec = _serve(capsys, trace, "--max-batch", "1", "--speculative",
                  "draft=opt-350m,k=4,acceptance=0")
    assert spec["tokens_per_step"] == 1.0
    assert spec["tokens_per_s"] < plain["tokens_per_s"]
    assert spec["tpot_p50_s"] > plain["tpot_p50_s"]
    assert spec["speculative"]["draft_time_s"] > 0
    assert spec["energy_per_output_token_j"] > plain["energy_per_output_token_j"]


def test_draft_weights_and_kv_share_the_memory(tmp_path, capsys):
    trace = _trace(tmp_path, n=2)
    plain = _serve(capsys, trace)
    spec = _serve(capsys, trace, "--speculative", SPEC)
    sp = spec["speculative"]
    tgt = model_sizes(resolve_model("llama2-7b"))
    drf = model_sizes(resolve_model("opt-350m"))
    # the draft's weights come off first, then target and draft KV split per token
    assert plain["kv_capacity_bytes"] - (spec["kv_capacity_bytes"]
                                         + sp["draft_kv_capacity_bytes"]) \
        == pytest.approx(drf["weight_bytes"], abs=16 * tgt["kv_bytes_per_token"])
    # (the allocator holds whole blocks of 16 tokens)
    assert sp["draft_kv_capacity_bytes"] / spec["kv_capacity_bytes"] == pytest.approx(
        drf["kv_bytes_per_token"] / tgt["kv_bytes_per_token"], rel=1e-3)


def test_per_request_acceptance_is_seeded(tmp_path, capsys):
    trace = _trace(tmp_path, n=6, output=600)
    args = ("--speculative", "draft=opt-350m,k=4,acceptance=beta:8:2")
    one, two = _serve(capsys, trace, *args), _serve(capsys, trace, *args)
    other = _serve(capsys, trace, *args, "--seed", "1")
    assert one["tokens_per_step"] == two["tokens_per_step"]
    assert one["tokens_per_step"] != other["tokens_per_step"]
    assert 1.0 < one["tokens_per_step"] < 5.0
    assert one["speculative"]["acceptance_beta"] == [8.0, 2.0]


class ConstantEval(PointEvaluator):
    """Constant step times: decode ``dec`` s, verify (a mixed iteration) ``mix`` s,
    prefill ``pre`` s; copies free."""

    label = "test constant evaluator"

    def __init__(self, dec, mix, pre=0.1):
        self.dec, self.mix, self.pre = dec, mix, pre

    def evaluate(self, phase, batch, ctx, layout):
        return {"decode": self.dec, "prefill": self.pre}.get(phase, 0.0)

    def mixed_cost(self, decode_context, chunks, kv_layout):
        return PointCost(self.mix)

    def cache_key(self):
        return {"constant": [self.dec, self.mix, self.pre]}


def test_step_time_is_k_draft_steps_and_a_verify_step():
    """One request of 1 + 40 tokens at acceptance 0.5, k = 3 (1.875 tokens a step): its
    decode takes ceil-ish 40 / 1.875 steps of 3 draft steps and one verify step."""
    def factory(model, device, cfg):
        return ConstantEval(0.001, 0.02) if model.name == "opt-350m" \
            else ConstantEval(0.01, 0.02)
    trace = RequestTrace(np.array([0.0]), np.array([32]), np.array([41]), None, "one")
    cfg = ServingConfig(max_batch=4, max_context_tokens=512,
                        speculative=SpeculativeConfig("opt-350m", 3, 0.5))
    res = serve(trace, cfg, allocator="paged", model=resolve_model("llama2-7b"),
                device=resolve_device("mlu370-x4"), evaluator=factory, cache=False)
    m = res.metrics
    steps = m["decode_steps"]
    assert steps == 22                  # 40 tokens at 1.875 a step, the last one cut
    assert m["time_breakdown_s"]["decode_time_s"] == pytest.approx(steps * (3 * 0.001
                                                                            + 0.02))
    # the draft prefills the prompt after the target
    assert m["time_breakdown_s"]["prefill_time_s"] == pytest.approx(0.2)
    assert m["tokens_per_step"] == pytest.approx(40 / steps)


def test_yaml_config_and_python_api_take_the_same_entry(tmp_path, capsys):
    s = resolve_serving({"speculative": {"draft": "opt-350m", "k": 4, "acceptance": 0.8}},
                        "workload.serving")
    assert s.speculative == SpeculativeConfig("opt-350m", 4, 0.8)
    trace = _trace(tmp_path)
    cli = _serve(capsys, trace, "--speculative", SPEC)
    cfg = {"system": "mlu370-x4", "model": "llama2-7b", "policy": {"allocator": "paged"},
           "workload": {"serving": {"trace": trace, "max_batch": 4}},
           "simulation": {"fidelity": "estimate"}}
    res = api.serve(cfg, speculative={"draft": "opt-350m", "k": 4, "acceptance": 0.8})
    assert res.metrics["tokens_per_step"] == cli["tokens_per_step"]
    assert res.metrics["tpot_p50_s"] == cli["tpot_p50_s"]
    with pytest.raises(ConfigError, match="chunked_prefill"):
        resolve_serving({"chunked_prefill": True, "speculative": {
            "draft": "opt-350m", "k": 4, "acceptance": 0.8}}, "workload.serving")


@pytest.mark.parametrize("value,says", [
    ("draft=opt-350m,k=0,acceptance=0.8", "speculative.k"),
    ("draft=opt-350m,k=4,acceptance=1.5", "speculative.acceptance"),
    ("draft=no-such-model,k=4,acceptance=0.8", "speculative.draft"),
    ("draft=opt-350m;k=4;acceptance=0.8", "--speculative"),
    ("draft=opt-350m,k=4", "--speculative"),
    ("draft=opt-350m,k=4,acceptance=beta:2", "--speculative"),
    ("draft=opt-350m,k=4,acceptance=high", "--speculative"),
    ("draft=opt-350m,k=4,acceptance=0.5,depth=2", "--speculative"),
])
def test_bad_values_give_one_line_and_status_2(tmp_path, capsys, value, says):
    rc = main([*BASE, "--trace", _trace(tmp_path, n=1, output=5), "--speculative", value])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and says in err
    assert "Traceback" not in err

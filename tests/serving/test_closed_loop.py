"""The benchmark users run: vLLM's random dataset (``random:IN:OUT``) and closed-loop
clients (``max_concurrency``), checked against what must hold whatever the timing: at
most C requests in flight, each client's next request sent when its last one finished,
C >= requests the same as every request at t = 0, one client the same as requests
served one at a time."""
from __future__ import annotations

import json

import numpy as np
import pytest

from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.serving.config import DeploymentConfig, ServingConfig
from h2m2sim.serving.deployment import resolve_device, resolve_model
from h2m2sim.serving.random_dataset import DEFAULT_RANDOM_REQUESTS
from h2m2sim.serving.run import serve
from h2m2sim.serving.traces import load_trace, poisson_arrivals

MODEL = "deepseek-r1-distill-qwen-7b"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _serve(trace, system: str = "mlu370-x4", **settings):
    settings.setdefault("max_batch", 64)
    settings.setdefault("max_context_tokens", 8192)
    cfg = ServingConfig(**settings)
    if isinstance(trace, str):
        trace = load_trace(trace, settings.get("max_requests"))
    return serve(trace, cfg, allocator="paged", model=resolve_model(MODEL),
                 device=resolve_device(system), cache=False)


def _in_flight(res) -> int:
    """The most requests sent and not finished at any moment."""
    ok = ~res.rejected
    send, fin = res.arrival_s[ok], res.finish_s[ok]
    times = np.concatenate([send, fin])
    step = np.concatenate([np.ones(send.size), -np.ones(fin.size)])
    order = np.lexsort((step, times))         # a finish before a send at the same time
    return int(np.cumsum(step[order]).max())


def test_random_dataset_lengths_count_and_seed():
    t = load_trace("random:1024:128", 5)
    assert t.name == "random-1024-128" and len(t) == 5 and not t.has_arrivals
    assert (t.prompt_tokens == 1024).all() and (t.output_tokens == 128).all()
    assert (t.arrival_s == 0).all() and not t.has_prefix_hashes and not t.has_text
    assert len(load_trace("random:8:8")) == DEFAULT_RANDOM_REQUESTS
    a = load_trace("random:1000:100:0.5", 400, seed=3)
    b = load_trace("random:1000:100:0.5", 400, seed=3)
    c = load_trace("random:1000:100:0.5", 400, seed=4)
    assert (a.prompt_tokens == b.prompt_tokens).all()
    assert not (a.prompt_tokens == c.prompt_tokens).all()
    assert a.prompt_tokens.min() >= 500 and a.prompt_tokens.max() <= 1500
    assert a.output_tokens.min() >= 50 and a.output_tokens.max() <= 150
    # uniform draws: the mean is the length asked for
    assert abs(a.prompt_tokens.mean() - 1000) < 40


@pytest.mark.parametrize("name", ["random:", "random:10", "random:0:5", "random:a:5",
                                  "random:5:5:1", "random:5:5:nan", "random:5:5:-0.1",
                                  "random:5:5:0.1:2", "random:99999999999:5",
                                  "random:1_0:5", "random:+10:5", "random: 10:5"])
def test_a_bad_random_dataset_is_named(name):
    with pytest.raises(ConfigError) as err:
        load_trace(name, 3)
    assert name in str(err.value)


def test_a_random_dataset_of_more_requests_than_memory_holds_is_refused():
    """10^9 requests would be built in memory before the run (it ran out of memory)."""
    with pytest.raises(ConfigError, match="max_requests: a random dataset makes at most"):
        load_trace("random:8:4", 10**9)


def test_one_client_serves_one_request_at_a_time():
    res = _serve("random:512:32", max_requests=6, max_concurrency=1)
    m = res.metrics
    assert m["max_concurrency"] == 1 and m["arrivals"].startswith("closed loop: 1 client")
    assert m["mean_decode_batch"] == 1 and _in_flight(res) == 1
    # each request is sent when the one before finished
    assert np.array_equal(res.arrival_s[1:], res.finish_s[:-1])
    ttft = res.first_token_s - res.arrival_s
    assert np.allclose(ttft, ttft[0], rtol=1e-12) and ttft[0] > 0
    assert m["ttft_mean_s"] == pytest.approx(ttft[0], rel=1e-12)


def test_enough_clients_for_every_request_is_an_offline_run():
    closed = _serve("random:512:32", max_requests=10, max_concurrency=10)
    open_ = _serve("random:512:32", max_requests=10)
    for key in ("ttft_mean_s", "tpot_mean_s", "duration_s", "output_tokens"):
        assert closed.metrics[key] == open_.metrics[key], key


@pytest.mark.parametrize("deployment", [DeploymentConfig(), DeploymentConfig(replicas=2)],
                         ids=["one-engine", "two-replicas"])
def test_never_more_requests_in_flight_than_clients(deployment):
    trace = load_trace("azure2023_conv", 60)
    res = _serve(trace, max_concurrency=5, deployment=deployment)
    assert res.metrics["requests_completed"] == 60
    assert _in_flight(res) == 5
    # a client's next request is sent at a finish, never before its own arrival
    sent = res.arrival_s
    assert (sent >= trace.arrival_s - 1e-12).all()
    finishes = set(res.finish_s.tolist())
    late = sent > trace.arrival_s
    assert all(s in finishes for s in sent[late])


def test_a_rate_with_a_concurrency_limit_sends_at_the_later_of_the_two():
    n = 40
    res = _serve("random:256:64", max_requests=n, max_concurrency=4, arrival_rate=50.0)
    sched = poisson_arrivals(n, 50.0, 0)
    assert (res.arrival_s >= sched - 1e-12).all()
    assert (res.arrival_s > sched).any() and (res.arrival_s == sched).any()
    assert _in_flight(res) <= 4


def test_closed_loop_across_disaggregated_pools():
    res = _serve("random:512:64", system="mlu370-x4", max_requests=24, max_concurrency=6,
                 disaggregate=(2, 2))
    assert res.metrics["requests_completed"] == 24
    assert _in_flight(res) == 6


def test_rejected_requests_free_their_client_at_once():
    trace = load_trace("random:512:16", 8)
    prompts = trace.prompt_tokens.copy()
    prompts[[1, 2]] = 9000                    # longer than the context
    trace = type(trace)(trace.arrival_s, prompts, trace.output_tokens, name="mixed")
    res = _serve(trace, max_concurrency=1)
    m = res.metrics
    assert m["requests_rejected"] == 2 and m["requests_completed"] == 6
    assert res.arrival_s[3] == res.finish_s[0]


def test_the_cli_runs_the_benchmark(capsys):
    rc = main(["serve", "--trace", "random:256:16", "--max-requests", "8",
               "--max-concurrency", "2", "--system", "mlu370-x4", "--model", MODEL,
               "--allocator", "paged", "--evaluator", "analytic", "--json", "-q"])
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    assert m["max_concurrency"] == 2 and m["trace"] == "random-256-16"
    assert m["requests_completed"] == 8 and m["ttft_mean_s"] > 0 and m["tpot_mean_s"] > 0


@pytest.mark.parametrize("argv, needle", [
    (["--trace", "random:256"], "random:256"),
    (["--trace", "random:256:16", "--max-concurrency", "0"], "max_concurrency"),
    (["--trace", "random:256:16", "--max-requests", "1000000000"], "max_requests"),
    (["--trace", "random:256:16", "--replicas", "8"], "got 8 replicas"),
])
def test_the_cli_names_a_bad_benchmark_setting(argv, needle, capsys):
    rc = main(["serve", *argv, "--system", "mlu370-x4", "--model", MODEL,
               "--allocator", "paged", "--evaluator", "analytic", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_cards_of_pools_on_two_systems_are_not_silently_ignored(capsys):
    """The pools run on all the cards of their own systems: --cards (or a changed
    system.cards) used to run as if it were not given."""
    rc = main(["serve", "--trace", "random:256:16", "--prefill-system", "h200",
               "--decode-system", "h200", "--cards", "2", "--model", MODEL, "--allocator",
               "paged", "--evaluator", "analytic", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --cards: is not used")
    from h2m2sim.config import load_config
    with pytest.raises(ConfigError, match="system.cards: is not used"):
        load_config({"system": {"preset": "h200", "cards": 2}, "model": MODEL,
                     "policy": {"allocator": "paged"},
                     "workload": {"serving": {"trace": "random:8:4",
                                              "prefill_system": "h200",
                                              "decode_system": "h200"}}})


def test_api_serve_names_a_trace_or_setting_of_the_wrong_type(tmp_path):
    import h2m2sim
    cfg = {"system": "mlu370-x4", "model": MODEL, "policy": {"allocator": "paged"},
           "simulation": {"fidelity": "estimate"},
           "workload": {"serving": {"trace": "random:8:4", "max_requests": 2}}}
    with pytest.raises(ConfigError, match="^trace: must be a path"):
        h2m2sim.serve(cfg, trace=5)
    with pytest.raises(ConfigError, match="^workload.serving.max_concurrency: must be"):
        h2m2sim.serve(cfg, max_concurrency=object())
    # a NumPy number is the number it holds
    res = h2m2sim.serve(cfg, max_concurrency=np.int64(1))
    assert res.metrics["max_concurrency"] == 1

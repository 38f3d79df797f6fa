"""ODMA with its defaults on traces it was not tuned on: buckets and the large bucket
come from the data, the context from the model, and nothing that fits is rejected."""
import numpy as np
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.serving.config import resolve_serving
from h2m2sim.serving.deployment import resolve_device, resolve_model
from h2m2sim.serving.run import serve
from h2m2sim.serving.traces import RequestTrace

MODEL = resolve_model("deepseek-r1-distill-qwen-7b")
DEVICE = resolve_device("mlu370-x4")


def _trace(n, seed, prompt_mean, out_mean, sigma=0.5):
    """Log-normal prompts and outputs around the given means (tokens), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    p = np.maximum(rng.lognormal(np.log(prompt_mean), sigma, n).astype(np.int64), 1)
    o = np.maximum(rng.lognormal(np.log(out_mean), sigma, n).astype(np.int64), 1)
    return RequestTrace(np.zeros(n), p, o, None, f"synthetic-{prompt_mean}", False, "")


def _serve(trace, allocator, predictor="learned", **cfg):
    cfg = {"arrival_rate": cfg.pop("rate", 2.0), "predictor": predictor, **cfg}
    c = resolve_serving(cfg, "workload.serving")
    return serve(trace, c, allocator=allocator, model=MODEL, device=DEVICE,
                 cache=False).metrics


@pytest.mark.parametrize("prompt_mean, out_mean", [(3000, 300), (60, 400)])
def test_odma_defaults_hold_on_a_new_trace(prompt_mean, out_mean):
    tr = _trace(800, 3, prompt_mean, out_mean)
    # static holds out the same history, so that both replay the same 400 requests
    odma, static = _serve(tr, "odma"), _serve(tr, "static", predictor=None,
                                              history_fraction=0.5)
    totals = tr.prompt_tokens + tr.output_tokens
    b = odma["bucket_boundaries"]
    assert len(b) == 4 and totals.min() <= b[0] and b[-1] <= totals.max() + 16
    assert odma["kv_utilization"] >= static["kv_utilization"] + 0.15
    assert odma["requests_completed"] >= static["requests_completed"] == 400
    assert odma["large_bucket_fraction"] < 0.05
    assert odma["requests_rejected"] == 0 and odma["history_requests"] == 400


def test_oracle_odma_is_near_the_best_any_bucket_set_gives():
    tr = _trace(1200, 5, 800, 200, sigma=0.8)
    m = _serve(tr, "odma", predictor="oracle")
    assert m["utilization_bound"] - 0.10 <= m["kv_utilization"] <= \
        m["utilization_bound"] + 0.10
    assert m["predictor_accuracy"] == 1.0 and "coverage" in m["predictor_accuracy_definition"]


def test_context_defaults_to_the_models_and_long_prompts_are_served():
    tr = _trace(40, 7, 60_000, 200, sigma=0.4)
    assert tr.prompt_tokens.max() > 64_000
    m = _serve(tr, "paged", predictor=None, rate=0.05, history_fraction=0.0)
    assert m["max_context_tokens"] == MODEL.max_context == 131072
    assert m["requests_rejected"] == 0 and m["requests_completed"] == 40
    lowered = _serve(tr, "paged", predictor=None, rate=0.05, history_fraction=0.0,
                     max_context_tokens=32768)
    too_long = int((tr.prompt_tokens >= 32768).sum())
    assert 0 < too_long == lowered["requests_rejected"]
    assert lowered["rejected_reasons"] == {"prompt_does_not_fit_the_context": too_long}
    with pytest.raises(ConfigError, match="max_context_tokens"):
        _serve(tr, "paged", predictor=None, max_context_tokens=200_000)


def test_output_lengths_scaled_and_sampled(tmp_path):
    tr = _trace(200, 9, 100, 50)
    base = _serve(tr, "paged", predictor=None)
    scaled = _serve(tr, "paged", predictor=None, output_lengths="scaled", output_scale=3.0)
    assert scaled["output_tokens"] == pytest.approx(3 * base["output_tokens"], rel=0.02)
    f = tmp_path / "lengths.txt"
    f.write_text("7, 7\n7")
    sampled = _serve(tr, "paged", predictor=None, output_lengths="sampled",
                     output_length_file=str(f))
    assert sampled["output_tokens"] == 7 * sampled["requests"]
    with pytest.raises(ConfigError, match="workload.serving.output_length_file"):
        resolve_serving({"output_lengths": "sampled"}, "workload.serving")


@pytest.mark.parametrize("router", ["round-robin", "least-kv"])
def test_replicas_behind_a_router_serve_every_request_once(router):
    tr = _trace(300, 11, 400, 150)
    # a card holds 111K tokens of KV beside the weights: less than the model's context
    one = _serve(tr, "odma", rate=4.0, max_context_tokens=32768)
    four = _serve(tr, "odma", rate=4.0, max_context_tokens=32768,
                  deployment={"replicas": 4, "tensor_parallel": 1, "router": router})
    assert one["replicas"] == 1 and one["tensor_parallel"] == 4
    assert four["replicas"] == 4 and four["tensor_parallel"] == 1
    assert sum(four["replica_requests"]) == four["requests"] == 150
    assert four["requests_completed"] == one["requests_completed"] == 150
    assert four["output_tokens"] == one["output_tokens"]
    if router == "round-robin":
        assert four["replica_requests"] == [38, 38, 37, 37]
    # a replica of one card holds a quarter of the node's memory minus a whole model
    assert four["kv_capacity_bytes"] < one["kv_capacity_bytes"]
    assert 0 < four["kv_utilization"] <= 1


def test_deployment_must_use_the_cards():
    with pytest.raises(ConfigError, match="serving.deployment"):
        _serve(_trace(20, 1, 50, 50), "paged", predictor=None,
               deployment={"replicas": 3, "tensor_parallel": 1})


@pytest.mark.parametrize("allocator, predictor, held", [
    ("paged", None, 0), ("static", None, 0),      # learn nothing: the whole trace plays
    ("odma", "oracle", 20),                       # ODMA seeds its buckets from history
    ("paged", "learned", 20)])                    # the learned predictor trains on it
def test_history_is_held_out_only_for_what_learns_from_it(allocator, predictor, held):
    m = _serve(_trace(40, 3, 600, 200), allocator, predictor=predictor, rate=1.0)
    assert m["history_requests"] == held and m["requests"] == 40 - held
    assert m["history_fraction"] == (0.5 if held else 0.0)
    set_ = _serve(_trace(40, 3, 600, 200), "paged", predictor=None, rate=1.0,
                  history_fraction=0.25)
    assert set_["history_requests"] == 10 and set_["requests"] == 30


def test_allocators_that_learn_lengths_say_so():
    from h2m2sim.allocators import ALLOCATORS
    from h2m2sim.allocators.base import KVAllocator
    for name in ALLOCATORS.names():
        cls = ALLOCATORS.get(name)
        overrides = cls.learn_lengths is not KVAllocator.learn_lengths
        assert cls.learns_lengths == overrides, name

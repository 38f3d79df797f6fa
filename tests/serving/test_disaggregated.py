"""Disaggregated prefill and decode: the KV link's arithmetic, the transfers' queue, and
a 2:2 split of four cards against colocated serving on the same cards."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dram_models.spec import load_standard
from h2m2sim.cli import main
from h2m2sim.npu.energy import stream_energy
from h2m2sim.serving.disaggregated import link_queue
from h2m2sim.serving.links import LINKS, kv_link, transfer_energy_j

SERVE = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4", "--model",
         "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator", "analytic",
         "--max-requests", "300", "--rate", "6", "--json"]


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    for name in LINKS.names():
        link = kv_link(name)
        assert link.transfer_s(0) == link.latency_us * 1e-6
        assert link.transfer_s(4e9) == pytest.approx(link.latency_us * 1e-6
                                                     + 4e9 / (link.GBps * 1e9))
        assert link.energy_j(1e6) == pytest.approx(8e6 * link.pj_per_bit * 1e-12)
    nv = kv_link("nvlink4")
    assert nv.GBps == 450.0 and kv_link("pcie5-x16").GBps == 63.0


def test_transfer_energy_is_the_links_and_both_memories():
    link = kv_link("pcie5-x16")
    lp = load_standard("lpddr5-6400")
    nbytes, s = 50e6, link.transfer_s(50e6)
    dram = (stream_energy(lp, nbytes, s * 1e9, 0.0).dram.total_nj
            + stream_energy(lp, nbytes, s * 1e9, 1.0).dram.total_nj) * 1e-9
    assert transfer_energy_j(nbytes, s, link, lp, lp) == pytest.approx(
        link.energy_j(nbytes) + dram)
    assert dram > 0


def test_streamed_layers_leave_with_the_prefill():
    """Streamed over 10 layers, a transfer starts with its prefill: 5 GB at 50 GB/s (0.1
    s) begun at 0 with the prefill ending at 1 s arrives 0.01 s after it (its last
    layer); one whose prefill took 0.05 s is bound by the link."""
    link = kv_link("rdma-400g")
    ready, begin = np.array([1.0, 3.05]), np.array([0.0, 3.0])
    arrive = link_queue(ready, np.array([5e9, 5e9]), link, begin, 10)
    assert arrive[0] == pytest.approx(1.0 + 0.01 + 1e-5)
    assert arrive[1] == pytest.approx(3.0 + 0.1 + 1e-5)
    after = link_queue(ready, np.array([5e9, 5e9]), link)
    assert np.all(arrive < after)


def test_transfers_queue_on_the_link_in_the_order_they_are_ready():
    link = kv_link("rdma-400g")                 # 50 GB/s, 10 us
    ready = np.array([1.0, 0.0, 0.0, np.nan])
    arrive = link_queue(ready, np.array([5e9, 5e9, 5e9, 1.0]), link)
    assert arrive[1] == pytest.approx(0.1 + 1e-5)            # first on the link
    assert arrive[2] == pytest.approx(0.2 + 1e-5)            # waits for it
    assert arrive[0] == pytest.approx(1.1 + 1e-5)            # the link was free again
    assert np.isnan(arrive[3])


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


@pytest.mark.usefixtures("_cache")
def test_a_decode_pool_without_prefills_has_a_shorter_itl_tail(capsys):
    """At a load where prefills interrupt decodes (no chunked prefill), decoding on two
    cards of their own beats four cards that also prefill at the 99th percentile of the
    inter-token latency (the median is slower: half the cards)."""
    assert main(SERVE) == 0
    colocated = json.loads(capsys.readouterr().out)
    assert main([*SERVE, "--disaggregate", "2:2", "--kv-link", "pcie5-x16"]) == 0
    split = json.loads(capsys.readouterr().out)
    assert split["requests_completed"] == colocated["requests_completed"] == 300
    assert split["itl_p99_s"] < colocated["itl_p99_s"]
    assert split["itl_p50_s"] > colocated["itl_p50_s"]
    assert split["kv_transfer_bytes"] > 0 and split["kv_link"] == "pcie5-x16"
    assert 0 < split["kv_transfer_s_p50"] <= split["kv_transfer_s_p99"]
    assert split["kv_transfer_energy_j"] > 0
    assert split["prefill_pool"]["tensor_parallel"] == split["decode_pool"][
        "tensor_parallel"] == 2
    # every prompt's KV crossed the link once: whole tokens of 57,344 bytes
    assert split["kv_transfer_bytes"] % 57_344 == 0


@pytest.mark.usefixtures("_cache")
@pytest.mark.parametrize("flag, words", [("3:3", "must add up to the system's 4"),
                                         ("2:2 --pool-replicas 3:1",
                                          "the prefill pool's 2 cards do not split into 3"),
                                         ("2-2", "expected A:B (cards of the prefill")])
def test_bad_pools_are_refused(capsys, flag, words):
    assert main([*SERVE, "--disaggregate", *flag.split()]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.usefixtures("_cache")
def test_pools_on_two_systems(capsys):
    """Prefill on the four MLU370 cards, decode on them again or on one card of HBM2E
    (the a100-80gb stand-in): the faster memory makes each decode step shorter; the
    first tokens are the same."""
    base = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4", "--model",
            "llama3-8b", "--allocator", "paged", "--evaluator", "analytic",
            "--max-requests", "100", "--rate", "2", "--json", "--prefill-system",
            "mlu370-x4", "--kv-link", "rdma-400g"]
    runs = {}
    for decode in ("mlu370-x4", "a100-80gb"):
        assert main([*base, "--decode-system", decode]) == 0
        runs[decode] = json.loads(capsys.readouterr().out)
    fast, slow = runs["a100-80gb"], runs["mlu370-x4"]
    assert fast["tpot_p50_s"] < slow["tpot_p50_s"]
    assert fast["ttft_p50_s"] == slow["ttft_p50_s"]
    assert fast["decode_system"] == "a100-80gb" and fast["disaggregate"] == [4, 1]
    assert main([*base]) == 2
    assert "prefill_system and decode_system come together" in capsys.readouterr().err
    assert main([*base, "--decode-system", "a100-80gb", "--disaggregate", "1:1"]) == 2
    assert "leave disaggregate unset" in capsys.readouterr().err


@pytest.mark.usefixtures("_cache")
def test_replicas_in_the_decode_pool_share_its_requests(capsys):
    """Two decode replicas of one card each behind the least-loaded router: every
    request completes; a replica on one card decodes slower than the pool's two cards
    together."""
    one = [*SERVE, "--disaggregate", "2:2", "--max-context", "16384"]   # one card's KV
    assert main(one) == 0
    single = json.loads(capsys.readouterr().out)
    assert main([*one, "--pool-replicas", "1:2", "--router", "least-kv"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two["requests_completed"] == single["requests_completed"] == 300
    assert two["decode_pool"]["tensor_parallel"] == 1
    assert two["tpot_p50_s"] > single["tpot_p50_s"]
    assert main([*SERVE, "--pool-replicas", "1:2"]) == 2
    assert "pool_replicas: needs serving.disaggregate" in capsys.readouterr().err

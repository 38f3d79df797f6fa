"""The content-hash cache: hits, misses, salts, formats, corruption, concurrency."""
from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass

import numpy as np
import pytest

from h2m2sim import cache
from h2m2sim.cache import (
    cache_path,
    cached,
    canonical_json,
    code_digest,
    code_salt,
    default_cache_dir,
    hash_key,
)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


class Counter:
    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


@dataclass(frozen=True)
class Key:
    name: str
    sizes: tuple


def test_json_hit_after_miss(tmp_path):
    compute = Counter({"t": [1.5, 2.5], "n": 3})
    key = {"model": "gpt3", "batch": 32}
    assert cached("tables", key, compute) == {"t": [1.5, 2.5], "n": 3}
    assert cached("tables", dict(reversed(list(key.items()))), compute) == compute.value
    assert compute.calls == 1  # key order does not matter
    path = cache_path("tables", key)
    assert path.is_file() and path.parent.parent.parent == tmp_path / "cache"
    assert cached("tables", {"model": "gpt3", "batch": 64}, compute) and compute.calls == 2


def test_hit_and_miss_return_the_same_shape():
    compute = Counter({"t": (1, 2)})
    first = cached("ns", "k", compute)
    second = cached("ns", "k", compute)
    assert first == second == {"t": [1, 2]}


def test_npz_round_trip_and_array_keys():
    arr = np.arange(12, dtype=np.int64).reshape(3, 4)
    compute = Counter({"cycles": arr * 2, "hits": np.array([0.5, 0.25])})
    key = {"trace": arr}
    a = cached("kern", key, compute, fmt="npz")
    b = cached("kern", {"trace": arr.copy()}, compute, fmt="npz")
    assert compute.calls == 1
    np.testing.assert_array_equal(a["cycles"], arr * 2)
    np.testing.assert_array_equal(b["hits"], [0.5, 0.25])
    cached("kern", {"trace": arr.astype(np.int32)}, compute, fmt="npz")
    assert compute.calls == 2  # dtype is part of the key


def test_salt_namespace_and_dataclass_keys_separate_entries():
    compute = Counter([1])
    k = Key("a", (1, 2))
    cached("n1", k, compute, salt="v1")
    cached("n1", k, compute, salt="v2")
    cached("n2", k, compute, salt="v1")
    cached("n1", Key("a", (1, 3)), compute, salt="v1")
    cached("n1", Key("a", (1, 2)), compute, salt="v1")
    assert compute.calls == 4


def test_disabled_cache_neither_reads_nor_writes(tmp_path):
    compute = Counter(1)
    cached("ns", "k", compute, enabled=False)
    cached("ns", "k", compute, enabled=False)
    assert compute.calls == 2 and not (tmp_path / "cache").exists()


def test_corrupt_entry_is_recomputed_and_replaced():
    compute = Counter({"x": 1})
    cached("ns", "k", compute)
    path = cache_path("ns", "k")
    path.write_text('{"x": ')  # truncated
    assert cached("ns", "k", compute) == {"x": 1} and compute.calls == 2
    assert cached("ns", "k", compute) == {"x": 1} and compute.calls == 2
    npz = cache_path("ns", "k", fmt="npz")
    cached("ns", "k", lambda: {"a": np.ones(3)}, fmt="npz")
    npz.write_bytes(npz.read_bytes()[:40])
    out = cached("ns", "k", lambda: {"a": np.zeros(2)}, fmt="npz")
    np.testing.assert_array_equal(out["a"], np.zeros(2))


def test_explicit_dir_and_default_dir(tmp_path, monkeypatch):
    compute = Counter(7)
    cached("ns", "k", compute, cache_dir=tmp_path / "elsewhere")
    assert list((tmp_path / "elsewhere" / "ns").rglob("*.json"))
    monkeypatch.delenv("H2M2SIM_CACHE")
    assert str(default_cache_dir()) == os.path.expanduser("~/.cache/h2m2sim")


def test_canonical_json_is_deterministic_and_rejects_unhashable():
    assert canonical_json({"b": 1, "a": [1.0, None]}) == '{"a":[1.0,null],"b":1}'
    assert canonical_json(float("nan")) == '"nan"'
    assert hash_key(np.float64(0.5)) == hash_key(0.5)
    with pytest.raises(TypeError):
        hash_key(object())


def test_code_salt_tracks_sources():
    assert code_salt().startswith("0.")
    assert code_digest("h2m2sim", "dram_models") == code_digest("h2m2sim", "dram_models")
    assert code_digest("dram_models") != code_digest("h2m2sim.cache")
    assert code_digest("no_such_package_xyz")  # tolerated


def _compute_in_worker(args):
    cache_dir, i = args
    return cached("race", {"k": 1}, lambda: {"value": list(range(2000))},
                  cache_dir=cache_dir)["value"][-1]


def test_concurrent_writers_of_one_entry(tmp_path):
    d = tmp_path / "race-cache"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        got = pool.map(_compute_in_worker, [(str(d), i) for i in range(16)])
    assert got == [1999] * 16
    files = [f for f in d.rglob("*") if f.is_file()]
    assert len(files) == 1 and files[0].suffix == ".json"
    assert cache.cached("race", {"k": 1}, lambda: None, cache_dir=d)["value"][-1] == 1999


def test_options_from_run_config(tmp_path):
    import fakes

    from h2m2sim.config import load_config
    with pytest.MonkeyPatch.context() as mp:
        fakes.install(mp.setitem)
        cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                           "simulation": {"cache_dir": str(tmp_path / "c"), "cache": False}})
    assert cache.options_from(cfg) == {"cache_dir": str(tmp_path / "c"), "enabled": False}
    compute = Counter(1)
    cached("ns", "k", compute, **cache.options_from(cfg))
    assert compute.calls == 1 and not (tmp_path / "c").exists()

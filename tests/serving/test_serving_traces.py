"""Request trace loading: schema, gzip, bundled traces, Poisson arrivals, and errors that
name the file and the row."""
import gzip
import hashlib
import json

import numpy as np
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.serving.traces import (BUNDLED_TRACES, bundled_trace_path, load_trace,
                                    poisson_arrivals)


def _write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(p, "wt", encoding="utf-8", newline="") as fh:
            fh.write(text)
    else:
        p.write_text(text)
    return p


def test_reads_schema_in_any_column_order_and_gzip(tmp_path):
    p = _write(tmp_path, "output_tokens,extra,arrival_s,prompt_tokens\n5,x,0.0,10\n7,y,0.5,3\n")
    t = load_trace(p)
    assert t.prompt_tokens.tolist() == [10, 3] and t.output_tokens.tolist() == [5, 7]
    assert t.arrival_s.tolist() == [0.0, 0.5] and t.has_arrivals and not t.has_text
    g = _write(tmp_path, 'prompt,prompt_tokens,output_tokens\n"a\nb, c",2,9\nhi,1,0\n',
               "d.csv.gz")
    d = load_trace(g)
    assert d.prompt_text == ("a\nb, c", "hi") and not d.has_arrivals
    assert np.all(d.arrival_s == 0) and "t = 0" in d.arrival_note
    d2 = load_trace(g, arrival_rate=2.0, seed=1)
    assert d2.has_arrivals and d2.arrival_s[0] == 0 and d2.arrival_s[1] > 0


def test_max_requests_and_bundled_names():
    assert set(BUNDLED_TRACES) == {"azure2023_conv", "azure2023_code", "alpaca",
                                   "mooncake2025_conv"}
    t = load_trace("azure2023_conv", max_requests=100)
    assert len(t) == 100 and t.prompt_tokens[:2].tolist() == [374, 396]
    a = load_trace("alpaca", max_requests=10)
    assert a.has_text and len(a.prompt_text) == 10


@pytest.mark.parametrize("body,row,what", [
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\n1,-4,2\n", 2, "must be >= 0"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\n1,4,2\n2,x,1\n", 3, "not a number"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\n1,4,2.5\n", 2, "whole number"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\n2,4,2\n1,1,1\n", 3, "sorted"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\n1,4\n", 2, "field"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,2\nnan,4,2\n", 2, "finite"),
])
def test_bad_rows_are_named(tmp_path, body, row, what):
    p = _write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_trace(p)
    assert info.value.key == f"{p} row {row}"
    assert what in info.value.message


def test_bad_files(tmp_path):
    p = _write(tmp_path, "arrival_s,prompt,output_tokens\n0,a,1\n")
    with pytest.raises(ConfigError, match="missing column.*prompt_tokens"):
        load_trace(p)
    with pytest.raises(ConfigError, match="empty file"):
        load_trace(_write(tmp_path, "", "e.csv"))
    with pytest.raises(ConfigError, match="no requests"):
        load_trace(_write(tmp_path, "prompt_tokens,output_tokens\n", "h.csv"))
    with pytest.raises(ConfigError, match="no such trace"):
        load_trace(tmp_path / "nope.csv")
    bad_gz = tmp_path / "n.csv.gz"
    bad_gz.write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError, match="cannot read"):
        load_trace(bad_gz)


def test_line_number_counts_quoted_newlines(tmp_path):
    p = _write(tmp_path, 'prompt,prompt_tokens,output_tokens\n"x\ny\nz",1,2\nok,-1,2\n')
    with pytest.raises(ConfigError) as info:
        load_trace(p)
    assert info.value.key.endswith("row 2") and "line 5" in info.value.message


def test_poisson_arrivals_rate_and_seed():
    a = poisson_arrivals(20000, 5.0, seed=3)
    assert np.all(np.diff(a) >= 0) and a[0] == 0
    assert abs(np.mean(np.diff(a)) - 0.2) < 0.01
    assert np.array_equal(a, poisson_arrivals(20000, 5.0, seed=3))
    assert not np.array_equal(a, poisson_arrivals(20000, 5.0, seed=4))
    with pytest.raises(ConfigError, match="arrival_rate"):
        poisson_arrivals(3, 0.0)


MOONCAKE = [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 27482, "input_length": 600, "output_length": 7, "hash_ids": [0, 3]},
            {"timestamp": 30535, "input_length": 10, "output_length": 1, "hash_ids": []}]


def _jsonl(tmp_path, rows, name="m.jsonl"):
    return _write(tmp_path, "".join(r if isinstance(r, str) else json.dumps(r) + "\n"
                                    for r in rows), name)


@pytest.mark.parametrize("name", ["m.jsonl", "m.jsonl.gz"])
def test_mooncake_jsonl_reads_as_its_csv_twin(tmp_path, name):
    t = load_trace(_jsonl(tmp_path, MOONCAKE + ["\n"], name))
    rows = [f"{r['timestamp'] / 1000},{r['input_length']},{r['output_length']},"
            + " ".join(map(str, r["hash_ids"])) for r in MOONCAKE]
    c = load_trace(_write(tmp_path, "arrival_s,prompt_tokens,output_tokens,"
                                    "prefix_block_hashes\n" + "\n".join(rows) + "\n"))
    assert t.arrival_s.tolist() == c.arrival_s.tolist() == [0.0, 27.482, 30.535]
    assert t.prompt_tokens.tolist() == [1100, 600, 10] and t.output_tokens.tolist() == [5, 7, 1]
    assert t.prefix_hashes.tolist() == c.prefix_hashes.tolist() == [0, 1, 2, 0, 3]
    assert t.prefix_offsets.tolist() == [0, 3, 5, 5] and t.has_arrivals and t.name == "m"
    assert len(load_trace(_jsonl(tmp_path, MOONCAKE, name), max_requests=2)) == 2
    bare = [{"input_length": 3, "output_length": 4, "other": "x"}]
    b = load_trace(_jsonl(tmp_path, bare, "b.jsonl"))
    assert not b.has_arrivals and not b.has_prefix_hashes and b.prompt_tokens.tolist() == [3]


def _row(**change):
    rec = {"timestamp": 40000, "input_length": 700, "output_length": 3, "hash_ids": [0, 9]}
    rec.update(change)
    return {k: v for k, v in rec.items() if v is not None}


@pytest.mark.parametrize("bad,what", [
    (_row(input_length=-4), "input_length' (line 3): must be >= 0"),
    (_row(output_length=2.5), "whole number"),
    (_row(output_length="7"), "not a number"),
    (_row(output_length=True), "not a number"),
    (_row(timestamp=100), "sorted"),
    (_row(timestamp=float("nan")), "finite"),
    ({"timestamp": 40000, "output_length": 3, "hash_ids": [0]}, "no 'input_length' field"),
    ({"input_length": 7, "output_length": 3, "hash_ids": [0]}, "'timestamp' is missing"),
    (_row(hash_ids="0 9"), "list of whole numbers"),
    (_row(hash_ids=[0, 1.5]), "list of whole numbers"),
    (_row(hash_ids=[0, -1]), "not a whole number"),
    (_row(hash_ids=[3, 9]), "follows another prefix"),
    ("{not json\n", "not JSON"),
    ("[1, 2]\n", "expected a JSON object"),
])
def test_bad_mooncake_rows_are_named(tmp_path, bad, what):
    p = _jsonl(tmp_path, MOONCAKE[:2] + [bad])
    with pytest.raises(ConfigError) as info:
        load_trace(p)
    assert info.value.key == f"{p} row 3"
    assert what in info.value.message and "line 3" in info.value.message


def test_bundled_mooncake_trace_is_the_published_file():
    """The shipped file decompresses to the published conversation trace (its sha256 in
    workloads/traces/README.md) and loads with its hashes."""
    path = bundled_trace_path("mooncake2025_conv")
    digest = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert digest in (path.parent / "README.md").read_text()
    t = load_trace("mooncake2025_conv", max_requests=3)
    assert t.prompt_tokens.tolist() == [6758, 7322, 7236]
    assert t.block_hashes(1).tolist() == [0] + list(range(14, 28))


def test_a_jsonl_field_nested_thousands_deep_is_one_error(tmp_path):
    deep = '{"input_length": 3, "output_length": 4, "x": ' + "[" * 100_000 + \
        "]" * 100_000 + "}\n"
    with pytest.raises(ConfigError, match="line 1: a value nested too deep"):
        load_trace(_jsonl(tmp_path, [deep]))

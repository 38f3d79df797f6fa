"""Request trace loading: schema, gzip, bundled traces, Poisson arrivals, and errors that
name the file and the row."""
import gzip

import numpy as np
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.serving.traces import BUNDLED_TRACES, load_trace, poisson_arrivals


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
    assert set(BUNDLED_TRACES) == {"azure2023_conv", "azure2023_code", "alpaca"}
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

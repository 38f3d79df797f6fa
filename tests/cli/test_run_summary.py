"""The text summary of `h2m2sim run`: at most 100 characters a line, numbers in units
people read (never in exponent notation), one unit per dimension in each table."""
from __future__ import annotations

import re

import pytest

from h2m2sim.cli import main
from h2m2sim.cli.cmd_run import WIDTH, summary, table
from h2m2sim.config import load_config

pytestmark = pytest.mark.usefixtures("fake_layers")

FIELDS = ("time_ns", "compute_ns", "memory_stall_ns", "tlb_stall_ns", "barrier_wait_ns",
          "bytes")
#: sublayer -> side -> the FIELDS of a decode layer, as the iteration job reports them
BREAKDOWN = {
    "qkv": {"hbm": (0, 0, 0, 0, 911138.0, 0),
            "lpddr": (911138.0, 890854.0, 20284.7, 9744.83, 0.0, 456659000)},
    "attention": {"hbm": (516686.0, 110846.0, 405370.0, 57600.0, 853022.0, 1006780000),
                  "lpddr": (1369710.0, 74014.7, 1295690.0, 38400.0, 0.0, 631374000)},
    "fc": {"hbm": (0, 0, 0, 0, 2748270.0, 0),
           "lpddr": (2748270.0, 2677040.0, 71233.0, 49895.5, 0.0, 1396090000)},
}
ENERGY = {
    "hbm": {"dram_act_j": 0.17615, "dram_rdwr_j": 2.02691, "dram_refresh_j": 0.402203,
            "dram_background_j": 4.80076, "dram_io_j": 1.25663, "compute_j": 0.0257981,
            "scratchpad_j": 0.483255, "translation_j": 0.00292857},
    "lpddr": {"dram_act_j": 0.169984, "dram_rdwr_j": 9.57529, "dram_refresh_j": 0.0870356,
              "dram_background_j": 0.548775, "dram_io_j": 1.25606, "compute_j": 1.40987,
              "scratchpad_j": 1.19238, "translation_j": 0.00569778},
    "interconnect": {"link_j": 0.000868598, "migration_j": 0.0},
}


def metrics() -> dict:
    """Metrics shaped like those of the iteration job on H2M2 with a baseline."""
    return {
        "mapper": "greedy", "layers": 96,
        "scaling": "one decoder layer simulated, times the layer count (identical layers; "
                   "checked against a run of every layer)",
        "iteration_time_ns": 483132000.0, "iteration_ms": 483.132,
        "tokens_per_s": 66.2345, "energy_per_token_j": 0.731893,
        "kv_capacity_bytes": 372594180096, "mean_reserved_bytes": 7.42611e10,
        "hbm_occupancy_bytes": {"qkv": 0.0, "attention": 95743377408.0, "fc": 0.0},
        "breakdown": {sl: {s: dict(zip(FIELDS, v)) for s, v in d.items()}
                      for sl, d in BREAKDOWN.items()},
        "boundary_ns": {"qkv": 500.0, "attention": 1755.2, "fc": 1251.73},
        "energy_breakdown": ENERGY,
        "baseline_iteration_time_ns": 670587000.0, "speedup": 1.388,
    }


@pytest.fixture
def text() -> str:
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                       "policy": {"baseline": "lpddr-only"}})
    return summary(cfg, metrics(), "0" * 64, {"wall_s": 2.95766, "decision_s": 0.00191391})


def _block(text: str, title: str) -> list[str]:
    """The lines of the table under ``title:``, up to the next title."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].endswith(":")
                and not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def _exponent(text: str):
    """A number in exponent notation in ``text``, past its first line (the version and
    config hash: hexadecimal digits such as ``409970e59`` are not numbers)."""
    return re.search(r"\de[+-]?\d", text.split("\n", 1)[-1])


def test_every_line_fits_and_no_number_is_in_exponent_notation(text):
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert not _exponent(text), text
    assert _exponent("h2m2sim 1.0+g409970e59\n  x  1.5e+3")     # the check works


def test_breakdown_is_one_block_per_side_with_units_in_the_header(text):
    lines = _block(text, "breakdown")
    hbm = lines.index(next(x for x in lines if x.split()[:1] == ["hbm"]))
    lpddr = lines.index(next(x for x in lines if x.split()[:1] == ["lpddr"]))
    names = ["time", "compute", "memory_stall", "tlb_stall", "barrier_wait", "bytes"]
    for head in (hbm, lpddr):
        assert lines[head].split()[1:] == names
        assert lines[head + 1].split() == ["us"] * 5 + ["MB"]    # one unit per dimension
    rows = {x.split()[0]: x.split()[1:] for x in lines[hbm + 2:hbm + 5]}
    assert rows["attention"] == ["516.7", "110.8", "405.4", "57.60", "853", "1,007"]
    rows = {x.split()[0]: x.split()[1:] for x in lines[lpddr + 2:lpddr + 5]}
    assert rows["fc"] == ["2,748", "2,677", "71", "49.90", "0", "1,396"]


def test_wide_energy_breakdown_is_cut_into_blocks_in_one_unit(text):
    lines = _block(text, "energy_breakdown")
    heads = [x.split() for x in lines if "dram_act" in x or "translation" in x]
    assert len(heads) == 2 and heads[0][0] == "dram_act" and heads[1][0] == "translation"
    units = {u for i, x in enumerate(lines) if x.split() in heads
             for u in lines[i + 1].split()}
    assert units == {"mJ"}
    assert ["lpddr", "170.0", "9,575", "87.0", "549", "1,256", "1,410", "1,192"] \
        in [x.split() for x in lines]


def test_scalars_carry_their_units_and_long_text_is_wrapped(text):
    lines = text.splitlines()
    assert "iteration time: 483.1 ms" in lines
    assert "speedup: 1.388x over lpddr-only (670.6 ms)" in lines
    value = {x.split()[0]: " ".join(x.split()[1:]) for x in lines
             if x and not x.startswith(" ") and not x.endswith(":") and ": " not in x}
    assert value["iteration_ms"] == "483.1 ms" and value["energy_per_token_j"] == "731.9 mJ"
    assert value["kv_capacity_bytes"] == "372.6 GB" and value["tokens_per_s"] == "66.23"
    assert value["mean_reserved_bytes"] == "74.26 GB" and value["layers"] == "96"
    scaling = lines.index(next(x for x in lines if x.startswith("scaling")))
    assert lines[scaling + 1].strip() and lines[scaling + 1].startswith(" " * 10)


def test_single_column_tables_take_their_unit_from_the_metric_name(text):
    assert _block(text, "hbm_occupancy_bytes")[:3] == ["             value",
                                                      "                GB",
                                                      "  qkv            0"]
    assert _block(text, "boundary_ns")[1].split() == ["ns"]


def test_a_narrow_table_stays_one_table_with_dotted_names():
    lines = table({"a": {"hbm": {"t_ns": 2e6}, "lpddr": {"t_ns": 5e5}}}, "x")
    assert lines[0].split() == ["hbm.t", "lpddr.t"] and lines[1].split() == ["us", "us"]
    assert lines[2].split() == ["a", "2,000", "500.0"]


def test_a_cheap_run_prints_a_summary_that_fits(cfg_path, capsys):
    assert main(["run", str(cfg_path), "--set", "policy.baseline=lpddr-only"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert not _exponent(out), out
    assert "kv_bytes      154.6 GB" in out.splitlines()

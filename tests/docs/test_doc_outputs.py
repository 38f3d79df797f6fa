"""The outputs stored in the tutorial are what the commands print today: the quickest
commands run here and their numbers are compared with the stored ones (the simulations
are deterministic, so they must agree to float printing; wall-clock times and the version
string are left out). The whole tutorial is compared in a slow test. When one fails, the
code changed what the tutorial shows: regenerate it (``python tools/gen_tutorial.py``)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_tutorial  # noqa: E402

TEXT = gen_tutorial.TEMPLATE.read_text()
COMMANDS = gen_tutorial.commands(TEXT)
#: commands that take a few seconds (presets, a mistake, an analytic serving run)
QUICK = ("h2m2sim presets", "h2m2sim validate", "h2m2sim serve")
QUICK_COMMANDS = [c for c in COMMANDS if c.startswith(QUICK)]


def _drift(chosen) -> dict[str, list[str]]:
    """What differs, per command, between the stored outputs and a fresh run of the
    commands ``chosen`` picks."""
    import tempfile
    stored = json.loads(gen_tutorial.OUTPUTS.read_text())
    with tempfile.TemporaryDirectory(prefix="h2m2sim-tutorial-test-") as work:
        fresh = gen_tutorial.run_all(TEXT, Path(work), only=chosen, copy=False)
    ran = [i for i, out in enumerate(fresh["outputs"]) if out is not None]
    assert ran, "no command ran"
    problems = {COMMANDS[i]: gen_tutorial.drift(stored["outputs"][i], fresh["outputs"][i])
                for i in ran}
    return {cmd: p for cmd, p in problems.items() if p}


def test_the_quick_commands_include_a_serving_run():
    assert sum(c.startswith("h2m2sim serve") for c in QUICK_COMMANDS) >= 2
    assert any("--evaluator analytic" in c for c in QUICK_COMMANDS)


def _marks(command: str) -> list:
    """The serving commands after the first take seconds each: the slow tests rerun
    them (the first keeps the serving path checked in every run)."""
    serves = [c for c in QUICK_COMMANDS if c.startswith("h2m2sim serve")]
    return [pytest.mark.slow] if command in serves[1:] else []


@pytest.mark.parametrize("command", [pytest.param(c, marks=_marks(c)) for c in QUICK_COMMANDS],
                         ids=[f"{COMMANDS.index(c)}-{c.split()[1]}" for c in QUICK_COMMANDS])
def test_a_quick_tutorial_command_prints_its_stored_output(command):
    assert _drift(lambda c: c == command) == {}


@pytest.mark.slow
def test_every_tutorial_command_prints_its_stored_output():
    assert _drift(lambda c: True) == {}


SERVE_OUTPUT = """\
requests completed               500 of 500 replayed (0 rejected, 0 cut; 0 held out as history)
TTFT p50 / p90 / p99             661.4 ms / 4.858 s / 11.95 s
energy total / per output token  159.1 kJ / 879.5 mJ
prefill tokens computed / total  6822832 / 7124855 (prefix hit rate 0.04239)"""

RUN_OUTPUT = """\
h2m2sim 0.1.1.dev404+g30ba50f08  config ab922a9773f3
iteration time: 477.5 ms
transfer_bytes_per_layer     966,656

wall-clock times (vary from run to run):
                       value
                          ms
  wall                 7,455"""


def test_drift_is_empty_when_only_the_float_printing_differs():
    # the same values printed another way: more digits, no exponent, an exponent
    reprinted = (SERVE_OUTPUT.replace("661.4 ms", "661.40000004 ms")
                 .replace("879.5", "8.795e+02").replace("0.04239", "4.239e-02"))
    assert reprinted != SERVE_OUTPUT
    assert gen_tutorial.drift(SERVE_OUTPUT, reprinted) == []
    # past the relative tolerance the same edit is a drift
    assert gen_tutorial.drift(SERVE_OUTPUT, SERVE_OUTPUT.replace("661.4 ms", "661.402 ms"))


@pytest.mark.parametrize("edit", [("661.4", "661.5"), ("11.95", "11.9"), ("879.5", "880"),
                                  ("159.1", "159.2"), ("6822832", "6822833"),
                                  ("0 held out", "250 held out"), ("replayed", "served")])
def test_drift_catches_an_edited_number_or_word(edit):
    old, new = edit
    assert gen_tutorial.drift(SERVE_OUTPUT, SERVE_OUTPUT.replace(old, new, 1)) != []


def test_drift_catches_a_line_more_or_less():
    assert gen_tutorial.drift(SERVE_OUTPUT, SERVE_OUTPUT + "\nmigrations  0") != []


def test_drift_ignores_wall_clock_times_and_the_version_only():
    other = RUN_OUTPUT.replace("7,455", "9,120").replace("dev404+g30ba50f08", "dev405+gabc")
    assert gen_tutorial.drift(RUN_OUTPUT, other) == []
    for old, new in [("ab922a9773f3", "ab922a9773f4"), ("477.5", "477.6"), ("966,656", "966,657")]:
        assert gen_tutorial.drift(RUN_OUTPUT, RUN_OUTPUT.replace(old, new)) != []


def test_the_stored_outputs_say_what_made_them():
    made = json.loads(gen_tutorial.OUTPUTS.read_text())["made"]
    assert set(made) == {"h2m2sim_version", "git_revision", "date"}
    assert gen_tutorial.stamp(made) in gen_tutorial.PAGE.read_text()

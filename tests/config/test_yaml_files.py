"""YAML files that are not what they claim are refused with one line naming them.

Every file a user hands the simulator (run and sweep configurations, system presets,
DRAM standards, model files) is read by :mod:`dram_models.yamlio`: a key given twice,
alias expansion without bound ("billion laughs"), nesting thousands deep, text that is
not UTF-8, and things that are not regular files (/dev/zero, a FIFO) end in ``error:
...`` and exit status 2, quickly, never in a traceback, a hang or a silent last value.
"""
from __future__ import annotations

import os
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dram_models import yamlio
from dram_models.errors import ConfigError
from h2m2sim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _error(capsys, argv) -> str:
    t0 = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("system: h2m2\nmodel: gpt3-175b\nworkload:\n  batch: 2\n  batch: 64\n")
    err = _error(capsys, ["run", str(cfg)])
    assert f"{cfg}:5" in err and "duplicate key 'batch'" in err and "line 4" in err


def test_merge_keys_still_override():
    data = yamlio.parse("base: &b {batch: 2, seq: 8}\nw:\n  <<: *b\n  batch: 4\n", "x")
    assert data["w"] == {"batch": 4, "seq": 8}


LAUGHS = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] +
                   [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9)
                    + "]" for i in range(8)]) + "\n"


@pytest.mark.parametrize("text,fragment", [
    (LAUGHS, "expands to more than"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
    ("x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "v\n",
     "nested more than"),
])
def test_alias_bombs_and_deep_nesting_are_refused_quickly(tmp_path, capsys, text, fragment):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert fragment in _error(capsys, ["run", str(cfg)])


def test_text_that_is_not_utf8_is_named(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes("model: gpt3-175b\n# caf\u00e9\n".encode("latin-1"))
    err = _error(capsys, ["run", str(cfg)])
    assert str(cfg) in err and "not UTF-8" in err and "0xe9" in err


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("command", [["run"], ["validate"], ["sweep"]])
def test_endless_streams_are_refused_by_their_size(capsys, command):
    for path in ("/dev/zero", "/dev/urandom"):
        err = _error(capsys, [*command, path])
        assert path in err and "is larger than 16 MiB" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_configuration_is_read_from_a_pipe(tmp_path, capsys):
    # what a shell's process substitution, <(...), hands over: a FIFO fed by a writer
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    text = (ROOT / "workloads/configs/default.yaml").read_bytes()
    writer = threading.Thread(target=fifo.write_bytes, args=(text,))
    writer.start()
    try:
        assert main(["validate", str(fifo)]) == 0, capsys.readouterr().err
    finally:
        writer.join(timeout=10)
    # a FIFO nobody writes to ends at once, and is an empty file, not a hang
    err = _error(capsys, ["validate", str(fifo)])
    assert str(fifo) in err


def test_a_fifo_whose_writer_opens_it_late_is_read_whole(tmp_path, capsys):
    """The writer of a named FIFO may open it after the command has (both started at
    once by a shell): its text is read, not an empty file."""
    import time
    fifo = tmp_path / "late.yaml"
    os.mkfifo(fifo)
    text = (ROOT / "workloads/configs/default.yaml").read_bytes()

    def late() -> None:
        time.sleep(0.5)
        fifo.write_bytes(text)
    writer = threading.Thread(target=late)
    writer.start()
    try:
        assert main(["validate", str(fifo)]) == 0, capsys.readouterr().err
    finally:
        writer.join(timeout=10)


def test_a_system_preset_file_naming_itself_or_a_loop_is_refused(tmp_path, capsys):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"preset: {a}\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"system: {a}\nmodel: gpt3-175b\n")
    assert "loop" in _error(capsys, ["run", str(cfg)])
    a.write_text(f"preset: {b}\n")
    b.write_text(f"preset: {a}\n")
    err = _error(capsys, ["run", str(cfg)])
    assert "loop" in err and "a.yaml -> " in err and "b.yaml" in err


@pytest.mark.parametrize("reader", ["standard", "model"])
def test_every_yaml_reader_refuses_a_key_given_twice(tmp_path, reader):
    f = tmp_path / "x.yaml"
    f.write_text("name: x\nname: y\n")
    if reader == "standard":
        from dram_models.spec import load_standard
        call = lambda: load_standard(str(f))  # noqa: E731
    else:
        from h2m2sim.model import load_model
        call = lambda: load_model(str(f))  # noqa: E731
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        call()


def test_a_file_larger_than_the_limit_is_refused(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text(textwrap.dedent("a: 1\n") * 10)
    with pytest.raises(ConfigError, match="larger than"):
        yamlio.read_text(f, limit=8)


@pytest.mark.parametrize("command", [["run"], ["validate"], ["sweep"]])
def test_a_directory_is_named_as_one(tmp_path, capsys, command):
    err = _error(capsys, [*command, str(tmp_path)])
    assert str(tmp_path) in err and "is a directory" in err

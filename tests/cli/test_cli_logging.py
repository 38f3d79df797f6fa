"""What commands show on stderr besides errors: -v/-q on every command, information and
warnings through logging, progress bars only on a terminal and never with -q, results
alone on stdout."""
from __future__ import annotations

import io
import json
import logging

import fakes
import pytest

from dram_models import _jit, bench, console, replay
from h2m2sim.cli import build_parser, main
from h2m2sim.config import EXAMPLE_YAML
from h2m2sim.errors import OutOfMemoryError, format_bytes
from h2m2sim.parallel import map_ordered
from h2m2sim.plotting import add_speedup


@pytest.fixture(autouse=True)
def restore_logging():
    """Each command configures logging for the process: put it back after each test."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers),
             {n: logging.getLogger(n).level for n in console.PACKAGES}, console._progress,
             console._verbose)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)
    console._progress, console._verbose = saved[3], saved[4]
    logging.captureWarnings(False)


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _subcommands():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_takes_verbose_and_quiet_after_its_name(name):
    options = _subcommands()[name]._option_string_actions
    for flag in ("-v", "--verbose", "-q", "--quiet"):
        assert flag in options, (name, flag)


def test_verbose_and_quiet_before_or_after_the_subcommand():
    parser = build_parser()
    args = parser.parse_args(["-q", "validate", "x.yaml"])
    assert (args.verbose, args.quiet) == (0, 1)
    args = parser.parse_args(["validate", "x.yaml", "-vv"])
    assert (args.verbose, args.quiet) == (2, 0)
    args = parser.parse_args(["presets"])
    assert (args.verbose, args.quiet) == (0, 0)


@pytest.mark.parametrize("tool", [bench, replay])
def test_bench_and_replay_take_verbose_and_quiet(tool):
    required = {bench: ["--pattern", "seq"], replay: ["t.csv"]}[tool]
    args = tool.parser().parse_args(["--standard", "lpddr5-6400", *required, "-q", "-v",
                                     "-v"])
    assert (args.verbose, args.quiet) == (2, 1)


def _write_config(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    return str(cfg)


def test_run_says_what_it_runs_on_a_terminal_and_quiet_silences_it(tmp_path, capsys,
                                                                     monkeypatch):
    fakes.install(monkeypatch.setitem)
    cfg = _write_config(tmp_path)
    assert main(["run", cfg, "--json"]) == 0            # stderr not a terminal: quiet
    cap = capsys.readouterr()
    json.loads(cap.out)                                  # stdout: the JSON alone
    assert cap.err == ""
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["run", cfg, "--json"]) == 0
    json.loads(capsys.readouterr().out)
    assert tty.getvalue().startswith(f"reading {cfg}\nconfig "), tty.getvalue()
    tty.seek(0)
    tty.truncate()
    assert main(["run", cfg, "--json", "-q"]) == 0
    json.loads(capsys.readouterr().out)
    assert tty.getvalue() == ""


def test_verbose_shows_information_anywhere(tmp_path, capsys, monkeypatch):
    fakes.install(monkeypatch.setitem)
    cfg = _write_config(tmp_path)
    assert main(["run", cfg, "-v"]) == 0
    assert capsys.readouterr().err.startswith(f"reading {cfg}\nconfig ")
    assert logging.getLogger("h2m2sim").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("numba").getEffectiveLevel() == logging.WARNING


def test_bench_json_is_pure_json_with_its_messages_on_stderr(capsys):
    argv = ["--standard", "lpddr5-6400", "--channels", "1", "--pattern", "seq",
            "--requests", "2000", "--json"]
    assert bench.main([*argv, "-v"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["requests"] == 2000
    assert "simulating 2,000 requests on 1 channel(s)" in cap.err
    assert bench.main([*argv, "-q"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["requests"] == 2000 and cap.err == ""


def test_progress_is_off_when_stderr_is_not_a_terminal(capsys):
    console.configure()
    assert map_ordered(lambda x: 2 * x, [1, 2, 3], desc="kernels") == [2, 4, 6]
    with console.progress(3, "requests") as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""


def test_progress_shows_on_a_terminal_and_quiet_turns_it_off(monkeypatch):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    console.configure()
    assert map_ordered(lambda x: 2 * x, [1, 2, 3], desc="kernels") == [2, 4, 6]
    assert "kernels:" in tty.getvalue() and "0/3" in tty.getvalue()
    tty.seek(0)
    tty.truncate()
    console.configure(quiet=1)
    map_ordered(lambda x: x, [1, 2], desc="kernels")
    with console.progress(2, "requests") as bar:
        bar.update(2)
    assert tty.getvalue() == ""


def test_inner_bars_are_off_inside_a_bar(monkeypatch):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    console.configure()
    map_ordered(lambda x: map_ordered(lambda y: y, [x], desc="inner"), [1, 2], desc="outer")
    assert "outer" in tty.getvalue() and "inner" not in tty.getvalue()


def test_quiet_keeps_warnings_and_drops_information(monkeypatch):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    log = logging.getLogger("h2m2sim.some_module")
    console.configure()
    log.info("an information")
    assert tty.getvalue() == "an information\n"
    tty.seek(0)
    tty.truncate()
    console.configure(quiet=1)
    log.info("an information")
    log.warning("a warning")
    assert tty.getvalue() == "warning: a warning\n"


def test_warnings_but_no_information_when_stderr_is_not_a_terminal(capsys):
    console.configure()
    log = logging.getLogger("h2m2sim.some_module")
    log.info("an information")
    log.warning("a warning")
    assert capsys.readouterr().err == "warning: a warning\n"
    console.configure(quiet=2)
    log.warning("a warning")
    assert capsys.readouterr().err == ""


def test_a_library_warning_goes_through_logging(caplog):
    rows = [{"sys": "base", "x": 1, "t": 2.0}, {"sys": "new", "x": 1, "t": 1.0},
            {"sys": "new", "x": 2, "t": 1.0}]
    with caplog.at_level(logging.WARNING, logger="h2m2sim"):
        out = add_speedup(rows, "t", "sys", "base", ["x"], "lower")
    assert len(out) == 2
    [rec] = [r for r in caplog.records if r.name == "h2m2sim.plotting"]
    assert rec.levelno == logging.WARNING
    assert rec.getMessage() == ("1 rows have no sys=base row to compare with (or no value); "
                                "left out")


def test_a_first_compile_is_announced_once(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "_announced", False)

    class Dispatcher:                 # no Numba cache: whether it compiles is unknown
        __name__ = "engine_entry"

    with caplog.at_level(logging.INFO, logger="dram_models"):
        _jit._announce(Dispatcher(), ())
        _jit._announce(Dispatcher(), ())
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["loading the DRAM engine (the first run compiles it: about 1-2 "
                     "minutes)"]


@pytest.mark.parametrize("n, text", [(0, "0 B"), (512, "512 B"), (1000, "1 kB"),
                                     (1_234_567, "1.23 MB"), (329_223_081_984, "329 GB"),
                                     (20_081_129_029_632, "20.1 TB"),
                                     (5e18, "5,000 PB")])
def test_sizes_are_decimal_with_three_significant_figures(n, text):
    assert format_bytes(n) == text


def test_out_of_memory_names_what_and_the_sizes():
    err = OutOfMemoryError("hbm", 20_081_129_029_632, 80_000_000_000, "the KV cache")
    assert str(err) == ("out of memory on side 'hbm' for the KV cache: needs 20.1 TB, "
                        "80 GB free")
    assert (err.requested, err.free) == (20_081_129_029_632, 80_000_000_000)

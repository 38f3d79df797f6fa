"""Where results are written: an output location that cannot be written is one line
naming it (exit 2, nothing run, nothing left behind); a run never replaces an earlier
result unless told to; a run's result file is byte-identical for the same config, its
wall times kept apart in timing.json."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from h2m2sim.cli import main
from h2m2sim.config import EXAMPLE_YAML

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses
NOBODY = 65534
SWEEP = {"base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
         "grid": {"workload.seq": [64, 128]}}
# fakes installed, then the CLI; `__main__` guard for the sweep's spawned workers
CLI = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
       "from h2m2sim.cli import main\n"
       "if __name__ == '__main__':\n    raise SystemExit(main(sys.argv[1:]))\n")


def one_error(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


# -- output locations that cannot be written ----------------------------------------------
@pytest.fixture
def readonly():
    """(work folder, read-only folder in it, how to run the CLI there). Root ignores
    permission bits, so as root the CLI runs as user nobody (through setpriv)."""
    base = Path(tempfile.mkdtemp(prefix="h2m2sim-ro-"))
    base.chmod(0o777)  # the CLI may run as another user and write beside ro/
    ro = base / "ro"
    ro.mkdir()
    (base / "numba").mkdir()
    (base / "numba").chmod(0o777)
    (base / "run.yaml").write_text(EXAMPLE_YAML)
    (base / "s.yaml").write_text(yaml.safe_dump(SWEEP))
    ro.chmod(0o555)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(base / "numba"), HOME=str(base),
               H2M2SIM_CACHE=str(base / "numba"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        try:
            probe = subprocess.run([*prefix, sys.executable, "-c", "import h2m2sim"],
                                   env=env, capture_output=True, cwd=base).returncode
        except OSError:
            probe = -1
        if probe != 0:
            shutil.rmtree(base, ignore_errors=True)
            pytest.skip("running as root, and cannot run Python as an unprivileged user")

    def cli(*argv):
        return subprocess.run([*prefix, sys.executable, "-c", CLI, *map(str, argv)],
                              cwd=base, env=env, capture_output=True, text=True,
                              timeout=120)
    yield base, ro, cli
    ro.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("argv, key", [
    (["sweep", "s.yaml", "--workers", "1", "--out", "ro"], "--out"),
    (["sweep", "s.yaml", "--workers", "1", "--out", "ro/new/deeper"], "--out"),
    (["run", "run.yaml", "--out", "ro"], "--out"),
    (["model", "gpt3-175b", "--export-trace", "ro/layer.npz"], "--export-trace"),
    (["model", "gpt3-175b", "--export-trace", "ro/layer.trace", "--format", "ramulator"],
     "--export-trace"),
], ids=["sweep", "sweep-subfolder", "run", "trace-npz", "trace-text"])
def test_read_only_output_is_one_line_naming_it(readonly, argv, key):
    base, ro, cli = readonly
    p = cli(*argv)
    where = argv[argv.index(key) + 1]
    where = where if key == "--out" else "ro"
    # the folder that refused is named too when it is not the output itself
    refused = " (ro/new)" if where == "ro/new/deeper" else ""
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"error: {key}: cannot write to {where}: Permission denied{refused}\n"
    assert p.stdout == "" and os.listdir(ro) == []


def test_plot_to_read_only_folder_is_one_line(readonly):
    base, ro, cli = readonly
    assert cli("sweep", "s.yaml", "--workers", "1", "--out", "res").returncode == 0
    p = cli("plot", "res", "--x", "workload.seq", "--y", "iteration_time_ns",
            "--out", "ro/fig.png")
    assert (p.returncode, p.stderr) == (2, "error: --out: cannot write to ro: "
                                           "Permission denied\n")


@pytest.mark.parametrize("command", ["sweep", "run", "model"])
def test_output_that_is_a_file_is_one_line(tmp_path, capsys, fake_layers, command):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SWEEP))
    (tmp_path / "run.yaml").write_text(EXAMPLE_YAML)
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    argv = {"sweep": ["sweep", tmp_path / "s.yaml", "--workers", "1", "--out", afile],
            "run": ["run", tmp_path / "run.yaml", "--out", afile],
            "model": ["model", "gpt3-175b", "--export-trace", afile / "t.npz"]}[command]
    key = "--export-trace" if command == "model" else "--out"
    assert one_error(capsys, argv) == f"error: {key}: cannot write to {afile}: Not a directory"
    assert afile.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["afile", "run.yaml", "s.yaml"]


# -- output names the system refuses, an empty --out, a full disk -------------------------
LONG_NAME = "n" * 300                     # over the 255 bytes a name may have
LONG_PATH = "/".join(["p" * 200] * 25)    # 5,024 characters: over the 4,096 of a path


@pytest.fixture
def work(tmp_path, monkeypatch, fake_layers):
    """A working folder holding run.yaml and s.yaml, and nothing else."""
    (tmp_path / "run.yaml").write_text(EXAMPLE_YAML)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SWEEP))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(command: str, out: str) -> list[str]:
    return {"run": ["run", "run.yaml", "--out", out],
            "sweep": ["sweep", "s.yaml", "--workers", "1", "--out", out],
            "plot": ["plot", "res", "--x", "workload.seq", "--y", "iteration_time_ns",
                     "--out", out + ".png"]}[command]


@pytest.mark.parametrize("command", ["run", "sweep", "plot"])
@pytest.mark.parametrize("out", [LONG_NAME, LONG_PATH, f"a/{LONG_NAME}/b"],
                         ids=["long-name", "long-path", "long-name-inside"])
def test_output_name_too_long_is_one_line_with_the_limit(work, capsys, command, out):
    """The path is named, shortened to its start and end, with the limit it exceeds;
    nothing is created (not even the folders above the name that is too long)."""
    if command == "plot":
        _stdout(capsys, _argv("sweep", "res"))
    before = sorted(os.listdir(work))
    name_max, path_max = os.pathconf(work, "PC_NAME_MAX"), os.pathconf(work, "PC_PATH_MAX")
    line = one_error(capsys, _argv(command, out))
    shown = out
    if command == "plot":   # the file, or the folder that cannot be made for it
        shown = f"a/{LONG_NAME}" if out.endswith("/b") else out + ".png"
    assert line.startswith(f"error: --out: cannot write to {shown[:40]}...{shown[-40:]} "
                           f"({len(shown)} characters): File name too long: "), line
    size = len(LONG_NAME) + (4 if command == "plot" and out == LONG_NAME else 0)
    assert (f"at most {path_max} allowed" if out == LONG_PATH else
            f"a name of {size} bytes") in line
    assert out == LONG_PATH or line.endswith(f", at most {name_max} allowed")
    assert len(line) < 300
    assert sorted(os.listdir(work)) == before


def test_empty_output_is_refused(work, capsys):
    """An unset shell variable (``--out "$DIR"``) would otherwise mean no output, or
    the working folder."""
    import h2m2sim
    from h2m2sim.errors import ConfigError
    assert one_error(capsys, ["run", "run.yaml", "--out", ""]) == \
        "error: --out: is empty: name the folder to write to"
    assert one_error(capsys, ["sweep", "s.yaml", "--out", ""]) == \
        "error: --out: is empty: name the folder to write to"
    with pytest.raises(ConfigError, match="^--out: is empty"):
        h2m2sim.run("run.yaml", out="")
    with pytest.raises(ConfigError, match="^--out: is empty"):
        h2m2sim.sweep("s.yaml", "")
    assert sorted(os.listdir(work)) == ["run.yaml", "s.yaml"]


def test_an_empty_output_file_is_refused(work, capsys):
    """Output files too: an empty name was ignored (``model --export-trace``), fell back
    to the default (``plot --out``) or failed late."""
    file_error = "is empty: name the file to write"
    assert one_error(capsys, ["model", "opt-350m", "--export-trace", ""]) == \
        f"error: --export-trace: {file_error}"
    assert one_error(capsys, ["plot", "res", "--x", "workload.seq", "--y",
                              "iteration_time_ns", "--out", ""]) == f"error: --out: {file_error}"
    assert one_error(capsys, ["run", "run.yaml", "--timeline", ""]) == \
        f"error: --timeline: {file_error}"
    assert sorted(os.listdir(work)) == ["run.yaml", "s.yaml"]


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT", "EIO"])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_failing_disk_is_one_line_and_leaves_nothing(work, capsys, monkeypatch, command,
                                                       code):
    """A write that fails after the checks (a full disk, a quota, an I/O error) is one
    line naming the folder and the system's reason; the new folder is removed."""
    import errno
    reason = os.strerror(getattr(errno, code))

    def fail(fd):
        raise OSError(getattr(errno, code), reason)
    monkeypatch.setattr(os, "fsync", fail)
    line = one_error(capsys, _argv(command, "new/out"))
    assert line == f"error: --out: cannot write to new/out: {reason}"
    assert sorted(os.listdir(work)) == ["run.yaml", "s.yaml"]


def test_trace_export_is_written_whole_under_its_name(tmp_path, capsys):
    """Written to a temporary beside it and renamed: the suffixes that pick the format
    (numpy's .npz, gzip's .gz) are kept, and nothing else is left in the folder."""
    from dram_models.trace import load
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("layers: 2\nhidden: 128\nheads: 4\nffn_dim: 512\nvocab: 100\n"
                    "max_context: 64\n")
    new = tmp_path / "new" / "deeper"
    out = json.loads(_stdout(capsys, ["model", tiny, "--batch", "2", "--seq", "12",
                                      "--export-trace", new / "t", "--json"]))
    assert out["trace"]["file"] == str(new / "t.npz")
    text = json.loads(_stdout(capsys, ["model", tiny, "--batch", "2", "--seq", "12",
                                       "--export-trace", new / "t.txt.gz", "--format",
                                       "ramulator", "--json"]))
    assert sorted(os.listdir(new)) == ["t.npz", "t.txt.gz"]
    assert (new / "t.txt.gz").read_bytes()[:2] == b"\x1f\x8b"  # gzip magic
    assert len(load(new / "t.npz")) == out["trace"]["requests"] > 0
    assert len(load(new / "t.txt.gz", "ramulator")) == text["trace"]["requests"]


def _stdout(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


# -- a run's folder is not reused silently ------------------------------------------------
def test_run_refuses_a_folder_holding_a_result_unless_overwrite(tmp_path, capsys,
                                                                fake_layers):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    out = tmp_path / "res"
    _stdout(capsys, ["run", cfg, "--out", out])
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(first) == ["config.yaml", "result.json", "timing.json"]

    line = one_error(capsys, ["run", cfg, "--out", out, "--set", "workload.batch=4"])
    assert line == (f"error: --out: {out} already holds a run result (result.json); "
                    "choose another --out or pass --overwrite to replace it")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first  # untouched

    _stdout(capsys, ["run", cfg, "--out", out, "--set", "workload.batch=4", "--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == sorted(first)  # no temporaries
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["workload"]["batch"] == 4
    assert json.loads((out / "result.json").read_text())["config_hash"] == \
        json.loads((out / "timing.json").read_text())["config_hash"] != \
        json.loads(first["result.json"])["config_hash"]
    assert one_error(capsys, ["run", cfg, "--overwrite"]) == \
        "error: --overwrite: only meaningful with --out"


def test_run_and_sweep_do_not_write_into_each_others_folders(tmp_path, capsys,
                                                             fake_layers):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    _stdout(capsys, ["run", cfg, "--out", tmp_path / "r"])
    _stdout(capsys, ["sweep", sweep, "--out", tmp_path / "s", "--workers", "1"])
    assert one_error(capsys, ["sweep", sweep, "--out", tmp_path / "r", "--resume"]) == \
        f"error: --out: {tmp_path / 'r'} holds a run result (result.json); choose " \
        "another --out"
    assert one_error(capsys, ["run", cfg, "--out", tmp_path / "s", "--overwrite"]) == \
        f"error: --out: {tmp_path / 's'} holds a sweep; choose another --out"
    assert sorted(os.listdir(tmp_path / "r")) == ["config.yaml", "result.json",
                                                  "timing.json"]
    assert not (tmp_path / "s" / "result.json").exists()


def test_failed_run_leaves_no_folder(tmp_path, capsys, fake_layers):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    out = tmp_path / "a" / "b"
    line = one_error(capsys, ["run", cfg, "--out", out, "--set", "workload.seq=1000000"])
    assert line.startswith("error: out of memory")
    assert not (tmp_path / "a").exists()


# -- same config, same bytes ----------------------------------------------------------------
def _two_runs(tmp_path, capsys, cfg, *sets):
    files = []
    for name in ("one", "two"):
        _stdout(capsys, ["run", cfg, "--out", tmp_path / name, *sets])
        files.append({p.name: p.read_bytes() for p in (tmp_path / name).iterdir()})
    return files


def test_two_runs_give_byte_identical_results(tmp_path, capsys, fake_layers):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    one, two = _two_runs(tmp_path, capsys, cfg, "--set", "policy.baseline=lpddr-only")
    assert one["result.json"] == two["result.json"]
    assert one["config.yaml"] == two["config.yaml"]
    for files in (one, two):
        timing = json.loads(files["timing.json"])
        assert {"wall_s", "decision_s", "baseline_decision_s", "finished_at"} <= set(timing)
        assert b"decision" not in files["result.json"] and b"wall" not in files["result.json"]


def test_two_real_runs_give_byte_identical_results(tmp_path, capsys, monkeypatch):
    """The real decode job with the greedy mapper, whose decision time is a wall time
    (roofline fidelity: no cycle-level simulation, a few seconds)."""
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "run.yaml"
    cfg.write_text("system: {preset: h2m2}\nmodel: gpt3-175b\n"
                   "workload: {batch: 2, seq: 64}\n"
                   "policy: {mapper: greedy, baseline: lpddr-only}\n"
                   "simulation: {fidelity: estimate}\n")
    one, two = _two_runs(tmp_path, capsys, cfg)
    assert one["result.json"] == two["result.json"]
    assert json.loads(one["result.json"])["metrics"]["speedup"] > 1
    assert "decision_s" in json.loads(one["timing.json"])
    assert b"decision_s" not in one["result.json"]


# -- an output never replaces an input, a device or a FIFO --------------------------------
def _serve_argv(trace: Path) -> list:
    return ["serve", "--trace", trace, "--model", "opt-1.3b", "--allocator", "paged",
            "--system", "h2m2", "--max-requests", "4"]


@pytest.mark.parametrize("what", ["run-config", "serve-trace", "run-out"])
def test_output_onto_an_input_is_refused(tmp_path, capsys, what):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,16,4\n0.1,32,4\n")
    argv, target = {
        "run-config": (["run", cfg, "--timeline", cfg], cfg),
        "serve-trace": (_serve_argv(trace) + ["--timeline", trace], trace),
        # a stored run's config.yaml given back as the run's input, into the same folder
        "run-out": (["run", tmp_path / "config.yaml", "--out", tmp_path, "--overwrite"],
                    tmp_path / "config.yaml"),
    }[what]
    if what == "run-out":
        target.write_text(EXAMPLE_YAML)
    before = target.read_bytes()
    line = one_error(capsys, argv)
    assert "is also the input" in line and line.startswith("error: --")
    assert target.read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_timeline_onto_a_fifo_or_device_is_refused_and_left_alone(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, Path(os.devnull)):
        line = one_error(capsys, ["run", cfg, "--timeline", target])
        assert line == (f"error: --timeline: cannot write to {target}: not a regular file "
                        "(a device, FIFO or socket); name a regular file or a new one")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_atomic_writers_never_replace_a_fifo(tmp_path):
    from h2m2sim.store import atomic_output_path, atomic_write_text
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write_text(fifo, "x")
    with pytest.raises(OSError, match="not a regular file"):
        with atomic_output_path(fifo):
            pass
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe"]

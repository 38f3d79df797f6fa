"""A sweep's folder is never mixed or left half-made: a scheduler out of reach or a
first point that fails leaves the folder reusable, --resume refuses a different sweep,
and the pool's workers die with the sweep process even when it is SIGKILLed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from h2m2sim.cli import main
from h2m2sim.store import ResultStore

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses
SPEC = {"name": "safety",
        "base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
        "grid": {"workload.seq": [64, 128, 256, 512]}}


@pytest.fixture(autouse=True)
def _fakes(fake_layers, monkeypatch):
    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ", raising=False)
    monkeypatch.delenv("H2M2SIM_FAKE_SLEEP", raising=False)


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def sweep(capsys, *argv) -> tuple[int, list[str]]:
    """Exit status and stderr lines of ``h2m2sim sweep ARGV`` (stdout in LAST_OUT)."""
    rc = main(["sweep", *map(str, argv), "--no-progress", "--workers", "1"])
    out, err = capsys.readouterr()
    LAST_OUT[:] = [out]
    return rc, err.strip().splitlines()


LAST_OUT: list[str] = [""]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("existed", [False, True], ids=["new-folder", "empty-folder"])
def test_unreachable_scheduler_leaves_the_folder_reusable(tmp_path, capsys, monkeypatch,
                                                          existed):
    from h2m2sim.sweeps import execute
    monkeypatch.setattr(execute, "CONNECT_TIMEOUT", "1s")
    spec = write_spec(tmp_path / "s.yaml", SPEC)
    out = tmp_path / "results" / "o"
    if existed:
        out.mkdir(parents=True)
    rc, err = sweep(capsys, spec, "--out", out, "--scheduler", "tcp://127.0.0.1:1")
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("error: --scheduler: cannot connect to tcp://127.0.0.1:1")
    if existed:
        assert out.is_dir() and os.listdir(out) == []
    else:
        assert not (tmp_path / "results").exists()
    rc, err = sweep(capsys, spec, "--out", out)     # the same --out, no --resume
    assert rc == 0 and err == [] and len(ResultStore(out).finished()) == 4


@pytest.mark.parametrize("address, reason", [
    ("foo", "missing port number in address 'foo'"),
    ("nonsense://host:1", "unknown address scheme 'nonsense'"),
    ("tls://127.0.0.1:1", "TLS expects a `ssl_context` argument"),  # no TLS settings
])
def test_bad_scheduler_address_is_one_line_and_quick(tmp_path, address, reason):
    """In a fresh process: a Dask Client that failed to start would print a traceback
    from its finalizer at exit, after waiting twice the connect timeout."""
    spec = write_spec(tmp_path / "s.yaml", SPEC)
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
            "from h2m2sim.cli import main\nraise SystemExit(main(sys.argv[1:]))\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code, "sweep", str(spec), "--out",
                        str(tmp_path / "o"), "--scheduler", address, "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: --scheduler: cannot connect to {address}: {reason}")
    assert time.monotonic() - t0 < 15 and not (tmp_path / "o").exists()


def test_new_sweep_failing_at_its_first_point_leaves_nothing(tmp_path, capsys,
                                                             monkeypatch):
    from h2m2sim.sweeps import build_sweep, run_sweep
    out = tmp_path / "o"
    monkeypatch.setenv("H2M2SIM_FAKE_FAIL_SEQ", "64")
    with pytest.raises(RuntimeError, match="fail at seq=64"):
        run_sweep(build_sweep(SPEC), out, workers=1, progress=False)
    assert not out.exists()
    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ")
    rc, err = sweep(capsys, write_spec(tmp_path / "s.yaml", SPEC), "--out", out)
    assert rc == 0 and err == [] and len(ResultStore(out).finished()) == 4


def test_resume_refuses_a_different_sweep(tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    first = write_spec(tmp_path / "first.yaml", SPEC)
    monkeypatch.setenv("H2M2SIM_FAKE_FAIL_SEQ", "256")  # stop half-way
    assert main(["sweep", str(first), "--out", str(out), "--workers", "1",
                 "--no-progress"]) == 70                  # the fake job's "bug"
    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ")
    capsys.readouterr()
    before = snapshot(out)
    assert len(ResultStore(out).finished()) == 2

    plan = json.loads((out / "plan.json").read_text())
    meta = json.loads((out / "meta.json").read_text())
    others = {
        "other values": {**SPEC, "grid": {"workload.seq": [64, 128, 1024, 512]}},
        "fewer points": {**SPEC, "grid": {"workload.seq": [64, 128]}},
        "other axis": {**SPEC, "grid": {"workload.batch": [2, 4]}},
        "other base": {**SPEC, "base": {**SPEC["base"], "model": "llama2-70b"}},
    }
    for what, spec in others.items():
        rc, err = sweep(capsys, write_spec(tmp_path / "other.yaml", spec), "--out", out,
                        "--resume")
        assert rc == 2 and len(err) == 1, what
        assert err[0].startswith(f"error: --out: {out} holds a different sweep (plan "
                                 f"sha256 {meta['plan_sha256'][:12]}, this sweep "), what
        assert err[0].endswith(f"h2m2sim sweep {out / 'sweep.yaml'} --out {out} --resume")
        assert snapshot(out) == before, what                 # nothing touched
    rc, err = sweep(capsys, first, "--out", out, "--resume", "--set", "model=llama2-70b")
    assert rc == 2 and "holds a different sweep" in err[0]

    # the same plan resumes, whatever the file is called; so does the folder's own copy
    renamed = write_spec(tmp_path / "renamed.yaml", {**SPEC, "name": "renamed"})
    rc, err = sweep(capsys, renamed, "--out", out, "--resume")
    assert rc == 0 and err == [] and len(ResultStore(out).finished()) == 4
    assert json.loads((out / "plan.json").read_text()) == plan
    rc, err = sweep(capsys, out / "sweep.yaml", "--out", out, "--resume")
    assert rc == 0 and err == [] and "0 run, 4 already finished" in LAST_OUT[0]


# -- pool workers die with the sweep ---------------------------------------------------------
def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent_of[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent_of.items() if pp == p}
        todo += kids - found
        found |= kids
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigkilled_sweep_leaves_no_worker_processes(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {**SPEC, "grid": {"workload.seq": list(
        range(64, 64 + 40))}})
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
            "from h2m2sim.cli import main\n"
            "if __name__ == '__main__':\n    raise SystemExit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "sweep", str(spec), "--out",
                             str(tmp_path / "o"), "--workers", "2", "--no-progress"],
                            env=dict(os.environ, H2M2SIM_FAKE_SLEEP="0.3"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = ResultStore(tmp_path / "o")
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not store.finished():  # both workers are up once points come back
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) >= 2   # two pool workers (and the resource tracker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in workers if _alive(p)], "orphaned sweep workers"
    finally:
        for p in [proc.pid, *workers]:  # our own processes only, should the test fail
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        proc.wait()


def _default_sigint() -> None:
    """In the child before it starts: Ctrl-C's default action, as in a terminal. (A
    test run started in the background by a shell inherits SIGINT ignored, and Python
    installs no KeyboardInterrupt handler for an ignored signal.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sweep_process(tmp_path, out, *extra, sleep="0.5"):
    """``h2m2sim sweep`` of 40 fake points on 2 workers, in its own process group (as
    a command started from a terminal), with the command's own entry point."""
    spec = write_spec(tmp_path / "s.yaml", {**SPEC, "grid": {"workload.seq": list(
        range(64, 64 + 40))}})
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
            "from h2m2sim.cli import entry\n"
            "if __name__ == '__main__':\n    sys.argv[0] = 'h2m2sim'\n    entry()\n")
    return subprocess.Popen([sys.executable, "-c", code, "sweep", str(spec), "--out",
                             str(out), "--workers", "2", "--no-progress", *extra],
                            env=dict(os.environ, H2M2SIM_FAKE_SLEEP=sleep),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ctrl_c_ends_a_pool_sweep_at_once_quietly_and_resumably(tmp_path):
    """Ctrl-C in a terminal signals the sweep and its workers (one process group): the
    sweep ends with 130 within 2 s, prints no traceback and no leaked-resource warning,
    leaves no worker behind, and --resume finishes the sweep."""
    out = tmp_path / "o"
    proc = _sweep_process(tmp_path, out)
    store = ResultStore(out)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not store.finished():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        workers = _children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
        assert proc.returncode == 130
        assert took < 2.0, f"took {took:.1f} s to end after Ctrl-C"
        assert "Traceback" not in err and "leaked" not in err and "Exception" not in err, err
        time.sleep(0.5)
        assert not [p for p in workers if _alive(p)], "sweep workers left running"
    finally:
        for p in [proc.pid, *workers]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    done = len(store.finished())
    assert 0 < done < 40
    again = _sweep_process(tmp_path, out, "--resume", sleep="0")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert len(store.finished()) == 40


def test_ctrl_c_ends_a_run_at_once_while_simulations_are_in_flight(tmp_path):
    """``h2m2sim run`` interrupted while its threads run work that cannot be interrupted
    (the DRAM engine; here 30 s sleeps on two threads) ends with 130 within 2 s, with no
    traceback, and writes no result."""
    cfg = write_spec(tmp_path / "c.yaml", SPEC["base"])
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
            "from h2m2sim.cli import entry\n"
            "if __name__ == '__main__':\n    sys.argv[0] = 'h2m2sim'\n    entry()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "run", str(cfg), "--out",
                             str(tmp_path / "r")],
                            env=dict(os.environ, H2M2SIM_FAKE_THREAD_SLEEP="30"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        time.sleep(3)                   # started, and in the sleeping threads
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and took < 2.0, (proc.returncode, took)
    assert "Traceback" not in err, err
    assert not (tmp_path / "r" / "result.json").exists()


def test_a_sweep_pool_stopped_by_ctrl_c_leaves_no_semaphore(tmp_path):
    """The sweep's own pool, interrupted (as Ctrl-C interrupts a sweep) while its worker
    has drawn a progress bar and is computing a point: its worker is stopped, and the
    process exits with no semaphore left for the resource tracker to report (a bar's
    default lock would hold one that a stopped worker never releases)."""
    (tmp_path / "drawing.py").write_text(
        "import os, time\n"
        "from dram_models.console import progress\n"
        "def draw_then_wait(cfg, job):\n"
        "    with progress(3, 'points', enabled=False):\n"
        "        open(os.environ['DRAWN'], 'w').close()\n"
        "        time.sleep(60)\n")
    code = (
        "import os, signal, threading, time\n"
        "from h2m2sim.sweeps.execute import ProcessPool\n"
        "from drawing import draw_then_wait\n"
        "def ctrl_c():\n"
        "    while not os.path.exists(os.environ['DRAWN']):\n"
        "        time.sleep(0.05)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "if __name__ == '__main__':\n"
        "    threading.Thread(target=ctrl_c, daemon=True).start()\n"
        "    try:\n"
        "        ProcessPool(1).run([('h', None, None)], print, call=draw_then_wait)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted')\n")
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60,
                       env=dict(os.environ, DRAWN=str(tmp_path / "drawn"),
                                PYTHONPATH=f"{root}{os.pathsep}{tmp_path}"))
    assert p.returncode == 0 and p.stdout == "interrupted\n", (p.stdout, p.stderr)
    assert "leaked semaphore" not in p.stderr, p.stderr

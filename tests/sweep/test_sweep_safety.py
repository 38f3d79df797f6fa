"""A sweep's pool workers die with the sweep process, even when it is SIGKILLed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from h2m2sim.store import ResultStore

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses
SPEC = {"name": "safety",
        "base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
        "grid": {"workload.seq": [64, 128, 256, 512]}}


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


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

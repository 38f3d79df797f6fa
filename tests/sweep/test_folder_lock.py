"""One writer per output folder: a run or a sweep locks its folder while it writes; a
second process (run, sweep, sweep --resume) is refused at once with one line naming the
holder's pid, and the lock file a killed process leaves behind blocks nothing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import h2m2sim
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.store import LOCK_NAME, FolderLock, ResultStore

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses
BASE = {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}}
SPEC = {"name": "lock", "base": BASE, "grid": {"workload.seq": [64, 128, 256, 512]}}
# fakes installed, then the CLI; `__main__` guard for the sweep's spawned workers
CLI = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
       "from h2m2sim.cli import main\n"
       "if __name__ == '__main__':\n    raise SystemExit(main(sys.argv[1:]))\n")


@pytest.fixture
def work(tmp_path, monkeypatch, fake_layers):
    """A folder holding the sweep file s.yaml and the run config c.yaml."""
    monkeypatch.delenv("H2M2SIM_FAKE_SLEEP", raising=False)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(BASE))
    return tmp_path


def cli(cwd: Path, *argv: str, sleep: str = "0", wait: bool = True):
    """``h2m2sim ARGV`` in a process of its own (fake physics; each point sleeping
    ``sleep`` seconds): its CompletedProcess, or its Popen when not ``wait``."""
    cmd = [sys.executable, "-c", CLI, *argv]
    env = dict(os.environ, H2M2SIM_FAKE_SLEEP=sleep)
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


WRITERS = {"run": ["run", "c.yaml", "--out", "o"],
           "sweep": ["sweep", "s.yaml", "--workers", "1", "--out", "o"],
           "resume": ["sweep", "s.yaml", "--workers", "1", "--out", "o", "--resume"]}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_folder_another_process_writes_is_refused(work, capsys, writer):
    """The lock taken here (as a writing h2m2sim would), the command in another
    process: one line naming this process, exit 2, the folder untouched; once the
    lock is let go the same command runs."""
    out = work / "o"
    if writer == "resume":    # a sweep to resume, half finished
        assert main(["sweep", str(work / "s.yaml"), "--workers", "1", "--no-progress",
                     "--out", str(out)]) == 0
        for path in sorted((out / "points").iterdir())[:2]:
            path.unlink()
    capsys.readouterr()
    out.mkdir(exist_ok=True)
    lock = FolderLock(out)
    lock.acquire()
    try:
        before = snapshot(out)
        p = cli(work, *WRITERS[writer])
        assert (p.returncode, p.stdout) == (2, ""), p.stderr
        assert p.stderr == (f"error: --out: another h2m2sim process (pid {os.getpid()}) "
                            "is writing o; wait for it to end or choose another folder\n")
        assert snapshot(out) == before
    finally:
        lock.release()
    assert not (out / LOCK_NAME).exists()
    p = cli(work, *WRITERS[writer])
    assert p.returncode == 0, p.stderr
    assert not (out / LOCK_NAME).exists()     # removed when the writer ends


def _wait_for_lock(proc: subprocess.Popen, folder: Path) -> None:
    """Until ``proc`` holds the lock of ``folder`` (its pid is in the lock file)."""
    deadline = time.monotonic() + 60
    lock_file = folder / LOCK_NAME
    while not (lock_file.exists() and lock_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)


def test_two_real_writers_and_the_lock_of_a_killed_one(work):
    """A sweep and a run each running in a process of its own: a second sweep --resume
    and a second run into their folders are refused naming their pids. SIGKILLed, the
    sweep leaves its lock file, which blocks nothing: --resume finishes the sweep and
    removes the file."""
    sweep = cli(work, *WRITERS["sweep"], "--no-progress", sleep="30", wait=False)
    run = cli(work, "run", "c.yaml", "--out", "r", sleep="30", wait=False)
    try:
        for first, out, second in ((sweep, "o", WRITERS["resume"]),
                                   (run, "r", ["run", "c.yaml", "--out", "r"])):
            _wait_for_lock(first, work / out)
            p = cli(work, *second)
            assert (p.returncode, p.stderr.count("\n")) == (2, 1), p.stderr
            assert f"another h2m2sim process (pid {first.pid}) is writing {out};" \
                in p.stderr
            assert first.poll() is None
    finally:
        for proc in (sweep, run):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    lock_file = work / "o" / LOCK_NAME
    assert lock_file.read_text() == f"{sweep.pid}\n"    # left behind by the killed one
    p = cli(work, *WRITERS["resume"])
    assert p.returncode == 0, p.stderr
    assert "4 points; 4 run, 0 already finished" in p.stdout
    assert len(ResultStore(work / "o").finished()) == 4 and not lock_file.exists()


def test_a_failed_run_or_sweep_lets_go_of_the_folder(work, monkeypatch):
    """In one Python process: a run or sweep that fails lets go of its folder, so the
    next call may write it (a lock kept would refuse it as another writer's)."""
    monkeypatch.chdir(work)
    for _ in range(2):
        with pytest.raises(h2m2sim.errors.OutOfMemoryError):
            h2m2sim.run("c.yaml", ["workload.seq=1000000"], out="r")
    assert h2m2sim.run("c.yaml", out="r")["iteration_time_ns"] > 0
    monkeypatch.setenv("H2M2SIM_FAKE_FAIL_SEQ", "128")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            h2m2sim.sweep("s.yaml", "s", resume=True)
    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ")
    assert len(h2m2sim.sweep("s.yaml", "s", resume=True)) == 4
    assert not (work / "r" / LOCK_NAME).exists() and not (work / "s" / LOCK_NAME).exists()


def test_a_sweep_written_between_the_checks_and_the_lock_is_refused(work, capsys):
    """The checks are repeated under the lock: a sweep another process wrote (and
    finished) after this one's checks is not overwritten."""
    from h2m2sim.sweeps import build_sweep
    sweep = build_sweep(SPEC)
    plan = [{"index": p.index, "config_hash": p.config_hash, "params": p.params}
            for p in sweep.points]
    store = ResultStore(work / "o")
    assert store.check(sweep.axis_paths, plan, resume=False) is True
    assert main(["sweep", str(work / "s.yaml"), "--workers", "1", "--no-progress",
                 "--out", str(work / "o")]) == 0
    before = snapshot(work / "o")
    with pytest.raises(ConfigError, match="already holds a sweep"):
        store.prepare()
    assert snapshot(work / "o") == before


def test_folder_lock_names_its_holder_and_ignores_a_stale_file(tmp_path):
    stale = tmp_path / LOCK_NAME
    stale.write_text("999999999\n")         # a killed holder's file: no lock on it
    one, two = FolderLock(tmp_path), FolderLock(tmp_path)
    one.acquire()
    assert stale.read_text() == f"{os.getpid()}\n"
    with pytest.raises(ConfigError, match=rf"^--out: another h2m2sim process \(pid "
                                          rf"{os.getpid()}\) is writing "):
        two.acquire()
    one.release()
    assert not stale.exists()
    two.acquire()                           # the file was replaced: locked anew
    assert stale.read_text() == f"{os.getpid()}\n"
    two.release()

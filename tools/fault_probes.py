#!/usr/bin/env python
"""Fault-injection probes: malformed configurations, traces, command-line values and
output paths, signals during ``run --out`` and ``sweep --out``, and concurrent writers to
one ``--out``, each against the rule the project promises.

* ``refused``: exit status 2 and exactly one line on stderr, ``error: ...`` (never
  ``internal error``, never a traceback);
* ``ok``: exit status 0, no traceback;
* ``interrupted``: a SIGINT ends the command with status 130 within 2 s, without a
  traceback, leaving no result and a folder the command can resume;
* ``one writer``: of two commands writing one folder at once, one is refused naming the
  other's pid and the other finishes.

Every probe has a time limit: one that runs past it is a hang, and fails.

    python tools/fault_probes.py            # every probe (a few minutes)
    python tools/fault_probes.py --fast     # the in-process probes only (seconds; CI)

One line per probe (``ok``/``BAD``, group, name, what happened), then a summary line;
the exit status is 1 if any probe is bad. The fast probes run the commands in this
process, with a private result cache; the others start ``python -m h2m2sim``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "workloads" / "configs" / "default.yaml"
SWEEP = ROOT / "workloads" / "configs" / "seq-sweep.yaml"
#: A serving command on the analytic placeholder: cheap, so a probe times the input's
#: handling, not a simulation.
SERVE = ("serve", "--system", "mlu370-x4", "--model", "deepseek-r1-distill-qwen-7b",
         "--allocator", "paged", "--evaluator", "analytic", "--max-requests", "20")
ESTIMATE = ("--set", "simulation.fidelity=estimate")
LIMIT_S = 60.0          # a probe running longer hangs


@dataclasses.dataclass(frozen=True)
class Probe:
    """One fault: ``argv`` of ``program`` (``h2m2sim``, ``replay`` or ``bench``) with
    ``{d}`` standing for the probe's scratch folder, files that ``setup(d)`` makes
    first, and the rule the outcome must follow (``expect``)."""

    group: str
    name: str
    argv: tuple[str, ...]
    expect: str = "refused"
    setup: Callable[[Path], None] | None = None
    program: str = "h2m2sim"


@dataclasses.dataclass(frozen=True)
class Outcome:
    rc: int | None          # None: it ran past the limit
    err: str
    seconds: float


# ------------------------------------------------------------------ files the probes use
def _write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return make


def _config(text: str) -> Callable[[Path], None]:
    return _write("c.yaml", f"system: {{preset: h2m2}}\nmodel: gpt3-175b\n{text}")


def _fifo(d: Path) -> None:
    os.mkfifo(d / "fifo.yaml")


def _preset_loop(d: Path) -> None:
    (d / "a.yaml").write_text(f"preset: {d / 'b.yaml'}\n")
    (d / "b.yaml").write_text(f"preset: {d / 'a.yaml'}\n")
    (d / "c.yaml").write_text(f"system: {d / 'a.yaml'}\nmodel: gpt3-175b\n")


def _laughs() -> str:
    """Nine levels of ten aliases each: 10^9 values once expanded."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def _trace(rows: str, name: str = "t.csv") -> Callable[[Path], None]:
    return _write(name, "arrival_s,prompt_tokens,output_tokens\n" + rows)


def _deep_jsonl(d: Path) -> None:
    field = "[" * 100_000 + "]" * 100_000
    (d / "t.jsonl").write_text('{"timestamp": 0, "input_length": ' + field
                               + ', "output_length": 5, "hash_ids": [1]}\n')


def _config_and_result(d: Path) -> None:
    """A configuration, and a folder that already holds a run's result."""
    _config("")(d)
    (d / "out").mkdir()
    (d / "out" / "result.json").write_text("{}")


def _npz_truncated(d: Path) -> None:
    import numpy as np
    np.savez(d / "t.npz", addr=np.arange(64, dtype=np.uint64) * 64,
             is_write=np.zeros(64, dtype=bool), arrival=np.full(64, -1))
    data = (d / "t.npz").read_bytes()
    (d / "t.npz").write_bytes(data[: len(data) // 2])


def _top_addresses(d: Path) -> None:
    (d / "top.trace").write_text("LD 0xffffffffffffffc0\nST 0xfffffffffffffff0\nLD 0x40\n")


# ------------------------------------------------------------------ the probes
def fast_probes() -> list[Probe]:
    c = ("run", "{d}/c.yaml", *ESTIMATE)
    serve_t = (*SERVE, "--trace", "{d}/t.csv")
    return [
        # configuration files that are not what they claim
        Probe("config", "Latin-1 text", c,
              setup=_write("c.yaml", "model: caf\xe9\n".encode("latin-1"))),
        Probe("config", "a key given twice", c,
              setup=_config("workload: {batch: 2, batch: 64}\n")),
        Probe("config", "billion laughs", c, setup=_write("c.yaml", _laughs())),
        Probe("config", "nested 5,000 deep", c,
              setup=_write("c.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n")),
        Probe("config", "/dev/zero", ("run", "/dev/zero")),
        Probe("config", "/dev/urandom", ("run", "/dev/urandom")),
        Probe("config", "a FIFO", ("run", "{d}/fifo.yaml"), setup=_fifo),
        Probe("config", "a directory", ("run", "{d}")),
        Probe("config", "an empty file", c, setup=_write("c.yaml", "")),
        Probe("config", "a missing file", ("run", "{d}/none.yaml")),
        Probe("config", "two presets naming each other", c, setup=_preset_loop),
        Probe("config", "an unknown key", c, setup=_config("workload: {bacth: 2}\n")),
        # numbers that mean nothing
        Probe("value", "batch NaN", (*c, "--set", "workload.batch=.nan"),
              setup=_config("")),
        Probe("value", "seq inf", (*c, "--set", "workload.seq=.inf"), setup=_config("")),
        Probe("value", "seq 1e30", (*c, "--set", "workload.seq=1e30"), setup=_config("")),
        Probe("value", "batch -4", (*c, "--set", "workload.batch=-4"), setup=_config("")),
        Probe("value", "batch 10^9", (*c, "--set", "workload.batch=1000000000"),
              setup=_config("")),
        Probe("value", "batch a string", (*c, "--set", "workload.batch=abc"),
              setup=_config("")),
        Probe("value", "threads 0", (*c, "--set", "simulation.threads=0"),
              setup=_config("")),
        Probe("value", "serve --rate 1e-300", (*SERVE, "--trace", "alpaca",
                                               "--rate", "1e-300")),
        Probe("value", "serve --seed -1", (*SERVE, "--trace", "alpaca", "--seed", "-1")),
        Probe("value", "serve --max-batch 10^9", (*SERVE, "--trace", "alpaca",
                                                  "--max-batch", "1000000000")),
        Probe("value", "--allocator-param block_tokens=abc",
              (*SERVE, "--trace", "alpaca", "--allocator-param", "block_tokens=abc")),
        Probe("value", "--allocator-param block_tokens=1.5",
              (*SERVE, "--trace", "alpaca", "--allocator-param", "block_tokens=1.5")),
        Probe("value", "--allocator-param watermark=1e309",
              (*SERVE, "--trace", "alpaca", "--allocator-param", "watermark=1e309")),
        Probe("value", "model --request-bytes 3",
              ("model", "opt-350m", "--batch", "1", "--seq", "8", "--export-trace",
               "{d}/x.npz", "--request-bytes", "3")),
        Probe("value", "bench --requests 0",
              ("--standard", "ddr4-3200", "--pattern", "seq", "--requests", "0"),
              program="bench"),
        # request traces
        Probe("trace", "NaN tokens", serve_t, setup=_trace("0,nan,5\n")),
        Probe("trace", "negative tokens", serve_t, setup=_trace("0,-3,5\n")),
        Probe("trace", "arrivals out of order", serve_t, setup=_trace("2,10,5\n1,10,5\n")),
        Probe("trace", "no rows", serve_t, setup=_trace("")),
        Probe("trace", "a missing column", serve_t,
              setup=_write("t.csv", "arrival_s,prompt_tokens\n0,10\n")),
        Probe("trace", "Latin-1 text", serve_t,
              setup=_write("t.csv", "arrival_s,prompt_tokens,output_tokens,prompt\n"
                           "0,3,5,caf\xe9\n".encode("latin-1"))),
        Probe("trace", "JSONL nested 100,000 deep", (*SERVE, "--trace", "{d}/t.jsonl"),
              setup=_deep_jsonl),
        Probe("trace", "prefix caching without hashes",
              (*SERVE, "--trace", "alpaca", "--prefix-caching")),
        Probe("trace", "every prompt beyond the context",
              (*serve_t, "--max-context", "4096"), setup=_trace("0,5000,5\n1,6000,5\n")),
        # DRAM traces
        Probe("dram", "a truncated npz", ("{d}/t.npz", "--standard", "ddr4-3200"),
              setup=_npz_truncated, program="replay"),
        Probe("dram", "addresses near 2^64", ("{d}/top.trace", "--standard", "ddr4-3200"),
              expect="ok", setup=_top_addresses, program="replay"),
        # output paths
        Probe("output", "--out ''", (*c, "--out", ""), setup=_config("")),
        Probe("output", "sweep --out ''", ("sweep", str(SWEEP), *ESTIMATE, "--out", "")),
        Probe("output", "a 300-character name", (*c, "--out", "{d}/" + "n" * 300),
              setup=_config("")),
        Probe("output", "a 5,000-character path",
              (*c, "--out", "{d}/" + "/".join(["p" * 200] * 25)), setup=_config("")),
        Probe("output", "a file where the folder goes", (*c, "--out", "{d}/c.yaml"),
              setup=_config("")),
        Probe("output", "a folder holding a result", (*c, "--out", "{d}/out"),
              setup=_config_and_result),
        # a valid run, so that the probes cannot pass by refusing everything
        Probe("control", "the default run", ("run", str(DEFAULT), *ESTIMATE),
              expect="ok"),
        Probe("control", "a small serve", (*SERVE, "--trace", "alpaca"), expect="ok"),
    ]


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise TimeoutError in this (main) thread after ``seconds``."""
    def alarm(signum, frame):
        raise TimeoutError
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _entry(program: str):
    if program == "replay":
        from dram_models.replay import main
    elif program == "bench":
        from dram_models.bench import main
    else:
        from h2m2sim.cli import main
    return main


def run_in_process(probe: Probe, d: Path) -> Outcome:
    """``probe`` through its command's ``main`` in this process."""
    argv = [a.replace("{d}", str(d)) for a in probe.argv]
    err, out = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        with _time_limit(LIMIT_S), contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(out):
            rc = _entry(probe.program)(argv)
    except TimeoutError:
        rc = None
    except SystemExit as e:         # argparse refusing a flag
        rc = e.code if isinstance(e.code, int) else 2
    return Outcome(rc, err.getvalue(), time.perf_counter() - t0)


def judge(expect: str, o: Outcome) -> str | None:
    """What is wrong with outcome ``o`` under rule ``expect`` (None: nothing)."""
    if o.rc is None:
        return f"still running after {LIMIT_S:g} s"
    if "Traceback" in o.err or "internal error" in o.err:
        return "a traceback or internal error: " + o.err.strip().splitlines()[-1][:120]
    lines = [x for x in o.err.splitlines() if x.strip()]
    if expect == "ok":
        return None if o.rc == 0 else f"exit {o.rc}: {' | '.join(lines)[:120]}"
    if o.rc != 2:
        return f"exit {o.rc}, not 2"
    if lines and lines[0].startswith("usage:"):     # argparse: its usage, then the error
        lines = lines[-1:]
    if len(lines) != 1 or "error: " not in lines[0]:
        return f"{len(lines)} stderr lines, not one 'error:' line"
    return None


# ------------------------------------------------------------------ process probes
def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "H2M2SIM_CACHE": str(cwd / "cache")}
    # the child gets SIGINT as a terminal's Ctrl-C would deliver it
    return subprocess.Popen([sys.executable, "-m", "h2m2sim", *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _interrupt(argv: list[str], d: Path, after_s: float) -> tuple[Outcome, float]:
    """Run ``argv``, SIGINT it after ``after_s``: its outcome and seconds to exit."""
    p = _start(argv, d)
    time.sleep(after_s)
    t0 = time.perf_counter()
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        return Outcome(None, "", LIMIT_S), LIMIT_S
    return Outcome(p.returncode, err, after_s), time.perf_counter() - t0


def probe_interrupted_run(d: Path) -> str | None:
    out = d / "run-out"
    o, took = _interrupt(["run", str(DEFAULT), "--out", str(out)], d, 4.0)
    if o.rc == 0:
        return "finished before the signal (raise the delay)"
    bad = _interrupted(o, took)
    return bad or ("left a result" if (out / "result.json").exists() else None)


def probe_interrupted_sweep(d: Path) -> str | None:
    out = d / "sweep-out"
    argv = ["sweep", str(SWEEP), "--out", str(out), "--workers", "2"]
    o, took = _interrupt(argv, d, 6.0)
    bad = _interrupted(o, took)
    if bad:
        return bad
    p = _start([*argv, "--resume"], d)
    _, err = p.communicate(timeout=600)
    return None if p.returncode == 0 else f"--resume exit {p.returncode}: {err[-120:]}"


def _interrupted(o: Outcome, took: float) -> str | None:
    if o.rc is None:
        return "still running after SIGINT"
    if o.rc != 130:
        return f"exit {o.rc} after SIGINT, not 130"
    if took > 2.0:
        return f"took {took:.1f} s to stop, more than 2"
    if "Traceback" in o.err or "leaked" in o.err:
        return "a traceback or leaked resources on stderr"
    return None


def probe_two_writers(d: Path) -> str | None:
    """A sweep, and its ``--resume`` started while it runs (a second sweep without
    ``--resume`` is refused by the plan already there): the second is refused by the
    first's lock, and the first finishes."""
    out = d / "two"
    argv = ["sweep", str(SWEEP), "--out", str(out), *ESTIMATE]
    a = _start(argv, d)
    deadline = time.monotonic() + LIMIT_S
    while not (out / "plan.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    b = _start([*argv, "--resume"], d)
    _, err_b = b.communicate(timeout=LIMIT_S)
    _, err_a = a.communicate(timeout=600)
    if (a.returncode, b.returncode) != (0, 2) or "another h2m2sim process" not in err_b:
        return f"exits {a.returncode}, {b.returncode}: {(err_b or err_a).strip()[-120:]}"
    return None


PROCESS_PROBES = [("signal", "SIGINT during run --out", probe_interrupted_run),
                  ("signal", "SIGINT during a 2-worker sweep --out, then --resume",
                   probe_interrupted_sweep),
                  ("concurrency", "a sweep and its --resume at once", probe_two_writers)]


# ------------------------------------------------------------------ driver
def run_fast(report: Callable[[str, str, str | None, float], None]) -> list[str | None]:
    """Every fast probe in this process, with a private result cache."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("H2M2SIM_CACHE", str(Path(tmp) / "cache"))
        for i, probe in enumerate(fast_probes()):
            d = Path(tmp) / f"p{i}"
            d.mkdir()
            if probe.setup:
                probe.setup(d)
            o = run_in_process(probe, d)
            bad = judge(probe.expect, o)
            report(probe.group, probe.name, bad, o.seconds)
            results.append(bad)
    return results


def run_processes(report) -> list[str | None]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for group, name, fn in PROCESS_PROBES:
            d = Path(tmp) / name.split()[0]
            d.mkdir(exist_ok=True)
            t0 = time.perf_counter()
            bad = fn(d)
            report(group, name, bad, time.perf_counter() - t0)
            results.append(bad)
    return results


def _print(group: str, name: str, bad: str | None, seconds: float) -> None:
    print(f"{'ok ' if bad is None else 'BAD'}  {group:<11} {name:<48} {seconds:6.1f} s"
          + (f"  {bad}" if bad else ""), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="the in-process probes only")
    args = ap.parse_args(argv)
    results = run_fast(_print)
    if not args.fast:
        results += run_processes(_print)
    bad = sum(r is not None for r in results)
    print(f"{len(results)} probes: {len(results) - bad} ok, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

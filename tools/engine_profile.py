"""Line-level CPU profile of the DRAM engine's Numba-compiled event loop.

    python tools/engine_profile.py --standard lpddr5-6400 --pattern random
        [--requests 500000] [--channels 1] [--seconds 10] [--top 25]
        [--workdir .prof] [--json]

runs ``MemorySystem.run_trace`` on a synthetic trace (``dram_models.patterns``) on the
general controller (``lean=False``, whatever the pattern) over and over for ``--seconds``
of CPU time under ``perf record`` and reports where the samples fall: inside the
engine's compiled code (by Python function, ``_loop`` by its numbered section comments,
and by source line) or outside it (Python, NumPy, the kernel, ...).
``--channels 0`` simulates the whole device, as in ``tools/engine_ab.py``.

Why it is built this way:

* This VM has no hardware performance counters, so perf samples the software event
  ``cpu-clock`` (a timer on the CPU time of the process) at 2000 Hz: every sample stands
  for 0.5 ms of CPU time, kernel time included.
* Numba's JIT code has no symbols perf can see (no perf map), so the profiled process
  reports the load address of ``engine.run._channels``; a sampled instruction pointer minus
  that address, plus the symbol's address in the engine's object code (``engine.o``),
  is an address in engine.o's code section (``.ltext``: Numba uses LLVM's large code
  model), which ``objdump -d -l`` maps to source lines. Numba hands out the object code
  only right after compiling, not when it loads a function from its cache, so engine.o
  is written by a process that compiles the engine and reused as long as the cache is;
  without it the cache is wiped and the engine compiled again (about 1.5 min).
* The compiling process is not the profiled one: there ``_channels`` calls the copy of
  ``_loop`` compiled on its own (the JIT links the weak symbol to the first definition
  it loaded), not the copy inside engine.o. A process that loads ``_channels`` from the
  cache runs the copy inside it; the script checks that by reading, in the loaded code,
  the addresses the JIT filled into its references to functions of engine.o.
* Line numbers need ``NUMBA_DEBUGINFO=1``. That changes the compiled code (and would
  turn Numba's bounds checking on, so ``NUMBA_BOUNDSCHECK=0`` keeps it off as in normal
  runs), so these builds live in their own cache, ``<workdir>/cache``, and never mix
  with the normal one.
* About 30% of ``_loop``'s instructions have no line entry of their own (addr2line
  says "?"); objdump prints a line only where it changes, so each instruction is
  attributed to the last line printed before it. Numba's debug info has no inlined-at chains: an
  inlined helper's instructions carry the helper's own lines, so lines are grouped by
  the function that contains them in the engine's modules (found with ``ast``), and lines of
  ``_loop`` by its section comments (``# ---- 1. data returns ----``; lines before the
  first section are "loop setup", which includes the loop head that picks the next
  event time).
* Only the samples taken while the timed loop runs count (perf records CLOCK_MONOTONIC
  time stamps, the profiled process reports its loop's start and end), so compiling
  or loading the engine does not show up as time spent outside it.

Shares are fractions of the samples: of all samples in the timed loop (``%all``) or of
those inside the engine's code (``%engine``). "stack operands" is the share of engine
samples whose instruction has a memory operand based on ``%rsp`` (register spills and
reloads, and locals kept on the stack). Speed is in millions of requests per CPU
second. The work directory keeps ``engine.o``, the matching engine sources
(``engine_source.json``),
``perf.data`` and ``perf.log`` for a closer look (``perf report`` cannot name the JIT
code; ``objdump -d -l`` on ``engine.o`` can)."""
from __future__ import annotations

import argparse
import ast
import bisect
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINE_DIR = REPO / "dram_models" / "engine"
LOOP_FILE = ENGINE_DIR / "general.py"           # the module of _loop
LOOP = "_loop"
SETUP = "loop setup"
FREQ = 2000                                     # samples per CPU second
BUILD = {"NUMBA_DEBUGINFO": "1", "NUMBA_BOUNDSCHECK": "0"}
STALE = 3           # the child's exit codes: the cache holds code engine.o does not match,
RELOAD = 4          # or it compiled the engine and wrote engine.o (profile in a new process)
ABS64 = "R_X86_64_64"   # how Numba's large code model refers to functions and constants
KERNEL = 1 << 63    # instruction pointers at or above: kernel code

_INSN = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
_LINE = re.compile(r"^(\S.*):(\d+)(?: \(discriminator \d+\))?$")
_SYMBOL = re.compile(r"^[0-9a-f]+ <.*>:$")
_SECTION = re.compile(r"^\s*#\s*-{3,}\s*(.*?)\s*-*\s*$")


class ProfileError(Exception):
    """A failure reported as one line, without a traceback."""


# ---------------------------------------------------------------- parsing (pure)
def parse_objdump(text: str) -> list[tuple[int, str | None, int | None, str]]:
    """``objdump -d -l`` output -> [(address, file, line, instruction)] by address.
    Each instruction gets the last ``file:line`` printed before it in its symbol (None
    before the first one)."""
    out = []
    file = line = None
    for row in text.splitlines():
        m = _INSN.match(row)
        if m:
            out.append((int(m.group(1), 16), file, line, m.group(2).strip()))
            continue
        if _SYMBOL.match(row):
            file = line = None              # a new function: nothing carries over
            continue
        m = _LINE.match(row)
        if m:
            file, line = m.group(1), int(m.group(2))
    out.sort(key=lambda r: r[0])
    return out


def parse_symbols(text: str) -> dict[str, tuple[str, int, int]]:
    """``objdump -t`` output -> {name: (section, address, size)} of the defined
    symbols."""
    out = {}
    for row in text.splitlines():
        left, tab, right = row.partition("\t")
        parts = left.split()
        if not tab or len(parts) < 2 or not re.fullmatch(r"[0-9a-f]+", parts[0]):
            continue
        size_name = right.split(None, 1)
        if len(size_name) != 2 or parts[-1] == "*UND*":
            continue
        name = size_name[1].strip().removeprefix(".hidden ")
        out[name] = (parts[-1], int(parts[0], 16), int(size_name[0], 16))
    return out


def parse_section_sizes(text: str) -> dict[str, int]:
    """``objdump -h`` output -> {section name: size}."""
    out = {}
    for row in text.splitlines():
        parts = row.split()
        if len(parts) >= 3 and parts[0].isdigit():
            out[parts[1]] = int(parts[2], 16)
    return out


def parse_perf_script(text: str) -> list[tuple[float, int]]:
    """``perf script -F time,ip`` output -> [(time in s, instruction pointer)]."""
    out = []
    for row in text.splitlines():
        t, sep, ip = row.partition(":")
        if not sep:
            continue
        try:
            out.append((float(t), int(ip.strip(), 16)))
        except ValueError:
            continue
    return out


def parse_relocations(text: str) -> list[tuple[int, str, str, int]]:
    """``objdump -r`` output -> [(offset, type, symbol, addend)]."""
    out = []
    for row in text.splitlines():
        parts = row.split(None, 2)
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]+", parts[0]):
            continue
        m = re.fullmatch(r"(.*?)(?:([+-])0x([0-9a-f]+))?", parts[2].strip())
        addend = int(m.group(3), 16) * (-1 if m.group(2) == "-" else 1) if m.group(3) else 0
        out.append((int(parts[0], 16), parts[1], m.group(1), addend))
    return out


def misresolved(relocs: list, symbols: dict, section: str, base: int,
                words: dict[int, int]) -> dict[str, int]:
    """Symbols of ``section`` whose absolute references (``words``: the loaded 64-bit
    values at the relocated offsets) do not point into the copy loaded at ``base``, with
    the address they point to instead."""
    bad = {}
    for off, kind, name, addend in relocs:
        if kind != ABS64 or name not in symbols:
            continue
        sec, addr, _ = symbols[name]
        if sec == section and words.get(off) != base + addr + addend:
            bad[name] = words.get(off, 0) - addend
    return dict(sorted(bad.items()))


def code_regions(base: int, size: int, symbols: dict, bad: dict[str, int]) -> list:
    """Where the object's code runs, as [(address, length, address in the object)]:
    its section, loaded at ``base``, and the other copies the JIT linked it to (``bad``,
    see :func:`misresolved`), which are taken to be the same code as the object's."""
    regions = [(base, size, 0)]
    for name, where in bad.items():
        _, addr, length = symbols[name]
        regions.append((where, length, addr))
    return regions


def short_name(symbol: str) -> str:
    """``_ZN11dram_models6engine5_loopB3v27...`` -> ``dram_models.engine._loop``."""
    if not symbol.startswith("_ZN"):
        return symbol
    parts, i = [], 3
    while True:
        m = re.match(r"(\d+)", symbol[i:])
        if not m:
            break
        n = int(m.group(1))
        i += len(m.group(1))
        parts.append(symbol[i:i + n])
        i += n
    return ".".join(parts).replace("_3clocals_3e", "<locals>") or symbol


def function_ranges(source: str) -> list[tuple[str, int, int]]:
    """The functions of a Python source (nested ones too) as (name, first line, last
    line); the first line is that of the first decorator."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((node.name, first, node.end_lineno))
    return sorted(out, key=lambda r: r[1])


def loop_sections(source: str, first: int, last: int) -> list[tuple[int, str]]:
    """Section comments (``# ---- 1. data returns ----``) on lines first..last, as
    (line, label), in order."""
    lines = source.splitlines()
    out = []
    for no in range(first, min(last, len(lines)) + 1):
        m = _SECTION.match(lines[no - 1])
        if m and m.group(1):
            out.append((no, m.group(1)))
    return out


def line_labeler(source: str, loop: str = LOOP):
    """A function: line of ``source`` -> its group, the innermost function containing it,
    and for ``loop`` its section ("loop: 1. data returns", "loop: loop setup")."""
    ranges = function_ranges(source)
    sections = []
    for name, first, last in ranges:
        if name == loop:
            sections = loop_sections(source, first, last)

    def label(line: int) -> str:
        inside = [r for r in ranges if r[1] <= line <= r[2]]
        if not inside:
            return "(module level)"
        name = max(inside, key=lambda r: r[1])[0]
        if name != loop:
            return name
        starts = [s[0] for s in sections]
        k = bisect.bisect_right(starts, line)
        return f"{loop}: {sections[k - 1][1] if k else SETUP}"
    return label


# ---------------------------------------------------------------- attribution (pure)
def attribute(ips: list[int], regions: list, insns: list, sources: dict[str, str],
              top: int = 25) -> dict:
    """Where the samples ``ips`` fall. ``regions``: where the object's code runs
    (:func:`code_regions`), ``insns``: its instructions (:func:`parse_objdump`);
    ``sources`` maps the engine's files, as the debug info names them, to their text.
    Returns counts and shares by group and by line."""
    lines, kernel, user, stack = _tally(ips, regions, insns)
    engine, total = sum(lines.values()), len(ips)
    labels = {f: line_labeler(src) for f, src in sources.items()}
    src_lines = {f: src.splitlines() for f, src in sources.items()}
    groups: dict[str, int] = {}
    rows = []
    for (file, line), n in lines.items():
        g = _group(file, line, labels)
        groups[g] = groups.get(g, 0) + n
        own = src_lines.get(file, [])
        text = own[line - 1].strip() if line and 0 < line <= len(own) else ""
        rows.append({"file": file, "line": line, "group": g, "samples": n, "text": text,
                     **_shares(n, total, engine)})
    rows.sort(key=lambda r: (-r["samples"], r["file"] or "", r["line"] or 0))
    by_group = [{"group": g, "samples": n, **_shares(n, total, engine)}
                for g, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"samples": total, "engine_samples": engine, "outside_samples": kernel + user,
            "kernel_samples": kernel, "other_user_samples": user,
            "engine_share": _frac(engine, total), "outside_share": _frac(kernel + user, total),
            "kernel_share": _frac(kernel, total), "other_user_share": _frac(user, total),
            "stack_samples": stack, "stack_share_of_engine": _frac(stack, engine),
            "by_group": by_group, "top_lines": rows[:top]}


def _tally(ips: list[int], regions: list, insns: list) -> tuple[dict, int, int, int]:
    """Samples per (file, line) of the object's code; samples in the kernel and in other
    user code; samples of instructions with a stack operand."""
    addrs = [i[0] for i in insns]
    lines: dict[tuple, int] = {}
    kernel = user = stack = 0
    for ip in ips:
        off = _object_address(ip, regions)
        k = -1 if off is None else bisect.bisect_right(addrs, off) - 1
        if k < 0:
            kernel += ip >= KERNEL
            user += ip < KERNEL
            continue
        _, file, line, asm = insns[k]
        stack += "(%rsp" in asm
        lines[(file, line)] = lines.get((file, line), 0) + 1
    return lines, kernel, user, stack


def _object_address(ip: int, regions: list) -> int | None:
    for start, length, at in regions:
        if start <= ip < start + length:
            return at + ip - start
    return None


def _group(file, line, labels) -> str:
    if file is None or not line:        # line 0: code the compiler made up
        return "(no line info)"
    if file not in labels:
        return f"{Path(file).name} (not the engine)"
    return labels[file](line)


def _frac(n: int, d: int) -> float:
    return n / d if d else 0.0


def _shares(n: int, total: int, engine: int) -> dict:
    return {"share": _frac(n, total), "share_of_engine": _frac(n, engine)}


def format_report(prof: dict) -> str:
    """The plain-text report of :func:`main`'s result dict."""
    r = prof["run"]
    a = prof["attribution"]
    ch = f"{r['channels']} channel" + ("s" if r["channels"] != 1 else "")
    out = [f"engine profile: {r['standard']} {r['pattern']}, {r['requests']} requests, {ch}",
           (f"  {r['runs']} runs in {r['cpu_s']:.2f} s CPU: {r['mreq_per_cpu_s']:.3f} M "
            "requests per CPU second (debug-info build)"),
           (f"  samples (cpu-clock, {FREQ} Hz, timed loop only): {a['samples']}; "
            f"engine {100 * a['engine_share']:.1f}%, outside "
            f"{100 * a['outside_share']:.1f}% (kernel {100 * a['kernel_share']:.1f}%, "
            f"other user code {100 * a['other_user_share']:.1f}%)"),
           (f"  stack operands ((%rsp) memory operand): "
            f"{100 * a['stack_share_of_engine']:.1f}% of engine samples")]
    if r.get("linked_elsewhere"):
        out.append("  helpers run from other copies (counted as engine.o's): "
                   + ", ".join(r["linked_elsewhere"]))
    out += ["", "by function (_loop by section)",
            f"  {'samples':>7} {'%all':>6} {'%engine':>7}  function / section"]
    for g in a["by_group"]:
        out.append(f"  {g['samples']:7d} {100 * g['share']:6.1f} "
                   f"{100 * g['share_of_engine']:7.1f}  {g['group']}")
    w = max([len(t["group"]) for t in a["top_lines"]] + [18])
    out += ["", f"top {len(a['top_lines'])} lines",
            (f"  {'samples':>7} {'%all':>6} {'%engine':>7} {'line':>12}  "
             f"{'function / section':{w}s}  source")]
    for t in a["top_lines"]:
        where = f"{Path(t['file']).stem}:{t['line']}" if t["file"] else "?"
        out.append(f"  {t['samples']:7d} {100 * t['share']:6.1f} "
                   f"{100 * t['share_of_engine']:7.1f} {where!s:>12}  "
                   f"{t['group']:{w}s}  {t['text']}")
    return "\n".join(out)


# ---------------------------------------------------------------- the profiled process
def _child(a) -> int:
    """Compile or load the engine (debug-info build). After a compile, write engine.o and
    stop (exit RELOAD): in the compiling process ``_channels`` calls the separately
    compiled ``_loop`` (the JIT links a symbol to its first definition), whose code
    engine.o does not hold. After a cache load, check that engine.o is that code and
    that its calls stay inside it, then run the trace for ``a.seconds`` of CPU time and
    write run.json."""
    work = Path(a.workdir)
    before = _read_sources()
    sys.path.insert(0, str(REPO))
    import numpy as np

    from dram_models.engine import general
    from dram_models.engine import run as engine
    from dram_models.memory import MemorySystem
    from dram_models.patterns import make
    from dram_models.spec import load_standard
    from dram_models.trace import Trace
    ms = MemorySystem(load_standard(a.standard), None, channels=a.channels or None)
    tr = make(a.pattern, a.requests, ms.spec.burst_bytes, 0)
    ms.run_trace(Trace.open_loop(np.arange(64 * ms.channels, dtype=np.uint64)
                                 * np.uint64(ms.spec.burst_bytes)), lean=False)   # compile
    if Path(general.__file__).resolve() != LOOP_FILE:
        raise ProfileError(f"imported {general.__file__}, not {LOOP_FILE}")
    if _read_sources() != before:
        raise ProfileError("the engine changed while it was compiled; run again")
    here = Path(general.__file__).parent        # as the debug info names the files
    sources = {str(here / name): text.decode() for name, text in before.items()}
    if len(engine._channels.overloads) != 1:
        raise ProfileError(f"{len(engine._channels.overloads)} compiled versions of "
                           "_channels, expected one")
    (cres,) = engine._channels.overloads.values()
    symbol = cres.fndesc.llvm_func_name
    state = _object_state(work, cres.library, symbol, sources)
    if state != 0:
        return state
    ptr = cres.library.get_pointer_to_function(symbol)
    section, regions, elsewhere = _check_links(work, ptr, symbol)
    t0, c0, runs = time.clock_gettime(time.CLOCK_MONOTONIC), time.process_time(), 0
    while True:
        ms.run_trace(tr, lean=False)
        runs += 1
        cpu = time.process_time() - c0
        if cpu >= a.seconds:
            break
    t1 = time.clock_gettime(time.CLOCK_MONOTONIC)
    run = {"standard": ms.spec.name, "pattern": a.pattern, "requests": a.requests,
           "channels": ms.channels, "runs": runs, "cpu_s": cpu,
           "mreq_per_cpu_s": runs * a.requests / cpu / 1e6, "t_start": t0, "t_end": t1,
           "symbol": symbol, "ptr": ptr, "section": section, "regions": regions,
           "linked_elsewhere": elsewhere, "engine_files": sorted(sources)}
    (work / "run.json").write_text(json.dumps(run))
    return 0


def _read_sources() -> dict[str, bytes]:
    """The engine package's modules: file name -> contents."""
    return {p.name: p.read_bytes() for p in sorted(ENGINE_DIR.glob("*.py"))}


def _object_state(work: Path, lib, symbol: str, sources: dict[str, str]) -> int:
    """After a fresh compile: write engine.o, its sources (file -> text) and engine.json,
    return RELOAD. After a cache load: 0 if the saved ones are those of the loaded code
    (same symbol and sources), else STALE."""
    source = json.dumps(sources, sort_keys=True).encode()
    sha = hashlib.sha256(source).hexdigest()
    try:
        obj = lib._get_compiled_object()
    except (RuntimeError, ValueError):      # loaded from the cache: no object code
        obj = None
    if obj is not None:
        for name, data in (("engine.o", obj), ("engine_source.json", source)):
            (work / (name + ".tmp")).write_bytes(data)
            (work / (name + ".tmp")).replace(work / name)
        (work / "engine.json").write_text(json.dumps(
            {"symbol": symbol, "source_sha256": sha, "build": BUILD}))
        return RELOAD
    meta = _read_meta(work)
    ok = (work / "engine.o").is_file() and meta.get("symbol") == symbol \
        and meta.get("source_sha256") == sha
    return 0 if ok else STALE


def _check_links(work: Path, ptr: int, symbol: str) -> tuple[str, list, list[str]]:
    """The code section of engine.o, where its code runs (:func:`code_regions`) and the
    functions that run from other copies.
    Fails if the loaded code refers to another copy of an engine function (which could
    be other code); copies of library helpers (Numba's ``max``, NRT_incref) are fine."""
    import ctypes
    import struct
    objdump = _tool("objdump", "binutils")
    obj = str(work / "engine.o")
    symbols = parse_symbols(_run([objdump, "-t", obj]))
    section, addr, _ = symbols[symbol]
    size = parse_section_sizes(_run([objdump, "-h", obj]))[section]
    relocs = parse_relocations(_run([objdump, "-r", "-j", section, obj]))
    base = ptr - addr
    words = {off: struct.unpack("<Q", ctypes.string_at(base + off, 8))[0]
             for off, kind, _, _ in relocs if kind == ABS64}
    bad = misresolved(relocs, symbols, section, base, words)
    engine = [short_name(b) for b in bad if short_name(b).startswith("dram_models.")]
    if engine:
        raise ProfileError("the loaded engine calls another copy of "
                           + ", ".join(engine) + "; cannot map it to engine.o")
    return section, code_regions(base, size, symbols, bad), [short_name(b) for b in bad]


def _read_meta(work: Path) -> dict:
    try:
        return json.loads((work / "engine.json").read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------- the parent
def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ProfileError(f"{name} not found on PATH (install {package})")
    return path


def _run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
        raise ProfileError(f"{' '.join(cmd[:2])} failed (exit {p.returncode}): {last}")
    return p.stdout


def _prepare(work: Path) -> None:
    """Wipe the work cache unless engine.o was written from it with this build's
    settings: the cached code could not be mapped to source lines."""
    cache = work / "cache"
    if (work / "engine.o").is_file() and _read_meta(work).get("build") == BUILD:
        return
    if cache.exists():
        print(f"engine_profile: no object code for the cached engine in {cache}; wiping it "
              "and compiling the engine with debug info (about 1.5 min)", file=sys.stderr)
        shutil.rmtree(cache)
    else:
        print("engine_profile: compiling the engine with debug info (about 1.5 min)",
              file=sys.stderr)


def _record(perf: str, a, work: Path) -> int:
    """Run the child under perf record; its output goes to perf.log."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(work / "cache"), **BUILD)
    cmd = [perf, "record", "-e", "cpu-clock", "-F", str(FREQ), "-k", "mono",
           "-o", str(work / "perf.data"), "--",
           sys.executable, str(Path(__file__).resolve()), "--child",
           "--standard", a.standard, "--pattern", a.pattern, "--requests", str(a.requests),
           "--channels", str(a.channels), "--seconds", str(a.seconds),
           "--workdir", str(work)]
    (work / "run.json").unlink(missing_ok=True)
    with open(work / "perf.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, check=False).returncode
    return rc


def _record_failure(rc: int, work: Path) -> ProfileError:
    text = (work / "perf.log").read_text(errors="replace")
    rows = [r for r in text.splitlines() if r.strip()]
    if "perf_event_paranoid" in text or "Permission" in text or "not permitted" in text:
        try:
            level = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
        except OSError:
            level = "?"
        return ProfileError(f"perf record was not allowed to sample (kernel."
                            f"perf_event_paranoid={level}): run as root or lower it; "
                            f"see {work / 'perf.log'}")
    own = [r for r in rows if not r.startswith("[ perf record")]
    last = (own or rows or ["no output"])[-1].strip().removeprefix("engine_profile: ")
    return ProfileError(f"perf record / profiled run failed (exit {rc}): {last} "
                        f"(full output in {work / 'perf.log'})")


def _samples(perf: str, work: Path, run: dict) -> list[int]:
    """Instruction pointers of the samples taken while the timed loop ran."""
    text = _run([perf, "script", "-i", str(work / "perf.data"), "-F", "time,ip"])
    return [ip for t, ip in parse_perf_script(text) if run["t_start"] <= t <= run["t_end"]]


def _analyse(objdump: str, work: Path, run: dict, ips: list[int], top: int) -> dict:
    insns = parse_objdump(_run([objdump, "-d", "-l", "--no-show-raw-insn",
                                "-j", run["section"], str(work / "engine.o")]))
    sources = json.loads((work / "engine_source.json").read_text())
    return {"run": run, "engine_files": run["engine_files"],
            "attribution": attribute(ips, run["regions"], insns, sources, top)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--standard", required=True, help="DRAM standard preset or YAML file")
    ap.add_argument("--pattern", required=True, help="seq, random, stride:BYTES, ...")
    ap.add_argument("--requests", type=int, default=500_000, help="requests per run")
    ap.add_argument("--channels", type=int, default=1, help="0 = the whole device")
    ap.add_argument("--seconds", type=float, default=10.0, help="CPU seconds to sample")
    ap.add_argument("--top", type=int, default=25, help="source lines to list")
    ap.add_argument("--workdir", default=str(REPO / ".prof"),
                    help="engine.o, the debug-info Numba cache, perf.data (reused)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        if a.child:
            return _child(a)
        return _profile(a)
    except ProfileError as e:
        print(f"engine_profile: {e}", file=sys.stderr)
        return 2


def _profile(a) -> int:
    perf = _tool("perf", "linux-perf")
    objdump = _tool("objdump", "binutils")
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    _prepare(work)
    for _ in range(3):
        rc = _record(perf, a, work)
        if rc == STALE:
            print("engine_profile: the cached engine does not match engine.o; wiping the "
                  "cache and compiling again (about 1.5 min)", file=sys.stderr)
            shutil.rmtree(work / "cache", ignore_errors=True)
        elif rc != RELOAD:          # RELOAD: compiled, profile in a process that loads it
            break
    if rc != 0 or not (work / "run.json").is_file():
        raise _record_failure(rc, work)
    run = json.loads((work / "run.json").read_text())
    prof = _analyse(objdump, work, run, _samples(perf, work, run), a.top)
    print(json.dumps(prof) if a.json else format_report(prof))
    return 0


if __name__ == "__main__":
    sys.exit(main())

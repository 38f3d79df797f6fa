#!/usr/bin/env python
"""Regenerate docs/tutorial.md by running it.

The tutorial's source is ``tools/tutorial/tutorial.md.in``: Markdown whose

* ``<!-- file: NAME -->`` before a fenced block writes that block to NAME in a scratch
  folder (the tutorial's ``run.yaml`` and ``seq-sweep.yaml``);
* ```` ```console ```` blocks hold ``$ COMMAND`` lines, each followed by an
  ``@@output [head=N] [tail=N]@@`` line that is replaced by what the command printed
  (stdout and stderr, as a user sees them; longer output is cut with ``...``);
* ``<!-- copy: SRC -> DEST -->`` copies a file the commands made into docs/;
* ``{{ EXPRESSION }}`` is replaced by a Python expression over the helpers below
  (``wall('sweep')`` the seconds a command took, ``speedup(system, seq)`` read from the
  sweep's plotted numbers, ...).

Commands run in the scratch folder with this checkout's ``h2m2sim`` and a fresh result
cache (``scripts/`` is linked there, so ``python scripts/NAME.py`` runs as from the
repository root), so every number in the tutorial is what a new user gets today. The measured
values are kept in ``tools/tutorial/outputs.json``; ``--render`` rebuilds the page from
them without running anything, and the test suite checks that the page, the template
and the stored outputs agree (``--check``) and that every command still parses.

    python tools/gen_tutorial.py            # run everything (tens of minutes)
    python tools/gen_tutorial.py --render   # rebuild docs/tutorial.md from outputs.json
    python tools/gen_tutorial.py --check    # exit 1 if docs/tutorial.md is stale
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tools" / "tutorial" / "tutorial.md.in"
OUTPUTS = ROOT / "tools" / "tutorial" / "outputs.json"
PAGE = ROOT / "docs" / "tutorial.md"

FILE = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)
COPY = re.compile(r"<!-- copy: (\S+) -> (\S+) -->\n")
COMMAND = re.compile(r"^\$ (.+)\n@@output(.*?)@@$", re.M)
EXPR = re.compile(r"\{\{(.+?)\}\}")


def commands(text: str) -> list[str]:
    """The ``$`` commands of the console blocks, in order."""
    return [m.group(1) for m in COMMAND.finditer(text)]


def run_all(text: str, work: Path) -> dict:
    """Run every command of ``text`` in ``work``; their outputs and wall times."""
    for m in FILE.finditer(text):
        (work / m.group(1)).write_text(m.group(2))
    env = {**os.environ, "H2M2SIM_CACHE": str(work / ".cache"), "COLUMNS": "100"}
    bindir = Path(sys.executable).parent
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    # scripts run as from the repository root (``python scripts/NAME.py``)
    (work / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
    out = {"outputs": [], "walls": []}
    for cmd in commands(text):
        print(f"$ {cmd}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, shell=True, cwd=work, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out["walls"].append(time.perf_counter() - t0)
        out["outputs"].append(proc.stdout.rstrip("\n"))
        print(f"  {out['walls'][-1]:.1f} s, exit {proc.returncode}", file=sys.stderr)
    for src, dest in COPY.findall(text):
        shutil.copyfile(work / src, ROOT / "docs" / dest)
    return out


def _cut(output: str, opts: str) -> str:
    """``output`` cut to its first ``head`` and last ``tail`` lines."""
    o = dict(kv.split("=") for kv in opts.split())
    lines = output.splitlines()
    head, tail = int(o.get("head", len(lines))), int(o.get("tail", 0))
    if head + tail >= len(lines):
        return output
    return "\n".join(lines[:head] + ["..."] + (lines[-tail:] if tail else []))


class Helpers:
    """What ``{{ }}`` expressions may call, over one run's stored outputs."""

    def __init__(self, text: str, stored: dict):
        self.cmds = commands(text)
        self.stored = stored

    def _index(self, fragment: str) -> int:
        hits = [i for i, c in enumerate(self.cmds) if c == fragment] or \
            [i for i, c in enumerate(self.cmds) if fragment in c]
        if len(hits) != 1:
            raise SystemExit(f"tutorial: {fragment!r} names {len(hits)} commands, not one")
        return hits[0]

    def wall(self, fragment: str) -> float:
        """Seconds the command containing ``fragment`` took."""
        return self.stored["walls"][self._index(fragment)]

    def minutes(self, fragment: str) -> str:
        """The wall time in seconds below 90 s, else in minutes."""
        w = self.wall(fragment)
        return f"{w:.0f} s" if w < 90 else f"{w / 60:.0f} minutes"

    def seconds(self, fragment: str) -> str:
        return f"{self.wall(fragment):.0f} s"

    def grep(self, fragment: str, pattern: str) -> str:
        """The first group of ``pattern`` in the output of the command with ``fragment``."""
        m = re.search(pattern, self.stored["outputs"][self._index(fragment)], re.M)
        if not m:
            raise SystemExit(f"tutorial: no {pattern!r} in the output of {fragment!r}")
        return m.group(1)

    @staticmethod
    def configs() -> str:
        """The shipped configuration files, as Markdown code."""
        names = sorted(p.name for p in (ROOT / "workloads" / "configs").glob("*.yaml"))
        return ", ".join(f"`{n}`" for n in names)

    def namespace(self) -> dict:
        return {"wall": self.wall, "minutes": self.minutes, "seconds": self.seconds,
                "grep": self.grep, "configs": self.configs}


def render(text: str, stored: dict) -> str:
    """The page: outputs in place of ``@@output@@``, expressions evaluated, directives
    removed."""
    ns = Helpers(text, stored).namespace()
    outs = iter(stored["outputs"])
    text = COMMAND.sub(lambda m: f"$ {m.group(1)}\n{_cut(next(outs), m.group(2))}", text)
    text = EXPR.sub(lambda m: str(eval(m.group(1), {}, ns)), text)  # noqa: S307 (ours)
    text = FILE.sub(lambda m: m.group(0).split("\n", 1)[1], text)
    return COPY.sub("", text)


def parses(cmd: str) -> str | None:
    """None if ``cmd`` (an ``h2m2sim`` command, perhaps piped into a filter such as
    ``| grep``) parses with today's CLI, else why not."""
    from h2m2sim.cli import build_parser
    argv = shlex.split(cmd.split(" | ")[0])
    if argv[0] != "h2m2sim":
        return None
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit:
        return f"{cmd!r} no longer parses"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--render", action="store_true", help="rebuild from outputs.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = ap.parse_args(argv)
    text = TEMPLATE.read_text()
    if args.check:
        stored = json.loads(OUTPUTS.read_text())
        problems = [p for p in map(parses, commands(text)) if p]
        if len(stored["outputs"]) != len(commands(text)):
            problems.append("outputs.json does not match the template's commands: rerun")
        elif PAGE.read_text() != render(text, stored):
            problems.append("docs/tutorial.md differs from its template: --render")
        for p in problems:
            print(f"tutorial: {p}", file=sys.stderr)
        return 1 if problems else 0
    if not args.render:
        with tempfile.TemporaryDirectory(prefix="h2m2sim-tutorial-") as work:
            stored = run_all(text, Path(work))
        OUTPUTS.write_text(json.dumps(stored, indent=1) + "\n")
    stored = json.loads(OUTPUTS.read_text())
    PAGE.write_text(render(text, stored))
    return 0


if __name__ == "__main__":
    sys.exit(main())

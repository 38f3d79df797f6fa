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
  (``wall('sweep')`` the seconds a command took, ``grep(command, pattern)`` a number
  from a command's output, ``stamp()`` the line naming the version and date the outputs
  were made with, ...).

Commands run in the scratch folder with this checkout's ``h2m2sim`` and a fresh result
cache (``scripts/`` is linked there, so ``python scripts/NAME.py`` runs as from the
repository root), so every number in the tutorial is what a new user gets today. The measured
values are kept in ``tools/tutorial/outputs.json``, with the h2m2sim version, git revision
and date they were made with; ``--render`` rebuilds the page from them without running
anything, and the test suite checks that the page, the template and the stored outputs
agree (``--check``), that every command still parses, and that the quickest commands
still print the stored numbers (tests/docs/test_doc_outputs.py).

    python tools/gen_tutorial.py            # run everything (minutes)
    python tools/gen_tutorial.py --render   # rebuild docs/tutorial.md from outputs.json
    python tools/gen_tutorial.py --check    # exit 1 if docs/tutorial.md is stale

``--notebook`` re-executes docs/examples/first-run.ipynb the same way (in a scratch
folder, with a fresh result cache) and stores its outputs with the line naming the version
and date; it needs Jupyter's ``nbclient`` and ``ipykernel``, which h2m2sim does not
(tests/api/test_notebook.py runs the notebook's code without them and compares its
numbers with the stored outputs).
"""
from __future__ import annotations

import argparse
import datetime
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
NOTEBOOK = ROOT / "docs" / "examples" / "first-run.ipynb"
#: the id of the notebook's Markdown cell that says what made its outputs
MADE_WITH_CELL = "made-with"

FILE = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)
COPY = re.compile(r"<!-- copy: (\S+) -> (\S+) -->\n")
COMMAND = re.compile(r"^\$ (.+)\n@@output(.*?)@@$", re.M)
EXPR = re.compile(r"\{\{(.+?)\}\}")


def commands(text: str) -> list[str]:
    """The ``$`` commands of the console blocks, in order."""
    return [m.group(1) for m in COMMAND.finditer(text)]


def run_all(text: str, work: Path, only=None, copy: bool = True) -> dict:
    """Run the commands of ``text`` in ``work``; their outputs and wall times. ``only``
    (a predicate over a command) picks the commands to run, the others get None; with
    ``copy`` False no file is copied into docs/."""
    for m in FILE.finditer(text):
        (work / m.group(1)).write_text(m.group(2))
    env = {**os.environ, "H2M2SIM_CACHE": str(work / ".cache"), "COLUMNS": "100"}
    bindir = Path(sys.executable).parent
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    # scripts run as from the repository root (``python scripts/NAME.py``)
    (work / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
    out = {"outputs": [], "walls": []}
    for cmd in commands(text):
        if only is not None and not only(cmd):
            out["outputs"].append(None)
            out["walls"].append(None)
            continue
        print(f"$ {cmd}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, shell=True, cwd=work, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out["walls"].append(time.perf_counter() - t0)
        out["outputs"].append(proc.stdout.rstrip("\n"))
        print(f"  {out['walls'][-1]:.1f} s, exit {proc.returncode}", file=sys.stderr)
    for src, dest in COPY.findall(text) if copy else ():
        shutil.copyfile(work / src, ROOT / "docs" / dest)
    return out


NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?")
#: what differs from run to run or from build to build, not with the results: the block
#: of wall-clock times, the version in a summary's first line
VARYING = [re.compile(r"^wall-clock times.*?(?:\n\n|\Z)", re.M | re.S),
           re.compile(r"^h2m2sim \S+(?=  config )", re.M)]


def _number(s: str) -> float:
    return float(s.replace(",", ""))


def _same_number(a: str, b: str, rel: float) -> bool:
    """Whole numbers (counts, bytes) equal; others equal to ``rel``."""
    x, y = _number(a), _number(b)
    if not any(c in a + b for c in ".eE"):
        return x == y
    return abs(x - y) <= rel * max(abs(x), abs(y))


def drift(stored: str, fresh: str, rel: float = 1e-6) -> list[str]:
    """How ``fresh`` output differs from ``stored``, line by line: the text between the
    numbers must be the same, whole numbers equal and the others equal to ``rel`` (the
    simulations are deterministic, so this is equality up to how floats print).
    Wall-clock times and the version string are left out. Empty when they agree."""
    for v in VARYING:
        stored, fresh = v.sub("", stored), v.sub("", fresh)
    a, b = stored.splitlines(), fresh.splitlines()
    if len(a) != len(b):
        return [f"{len(a)} lines stored, {len(b)} now"]
    out = []
    for x, y in zip(a, b):
        nx, ny = NUMBER.findall(x), NUMBER.findall(y)
        same = NUMBER.split(x) == NUMBER.split(y) and len(nx) == len(ny) and all(
            _same_number(p, q, rel) for p, q in zip(nx, ny))
        if not same:
            out.append(f"stored: {x!r}\n   now: {y!r}")
    return out


def made_with() -> dict:
    """What the outputs are made with: h2m2sim's version, this checkout's git revision
    (``+dirty`` with uncommitted changes) and today's date."""
    from h2m2sim.store import git_revision
    from h2m2sim.version import __version__
    return {"h2m2sim_version": __version__, "git_revision": git_revision(),
            "date": datetime.date.today().isoformat()}


def stamp(made: dict) -> str:
    """The sentence naming what made the outputs (:func:`made_with`)."""
    return (f"Outputs below were made with h2m2sim {made['h2m2sim_version']} on "
            f"{made['date']}.")


def run_notebook(path: Path = NOTEBOOK) -> None:
    """Execute the notebook at ``path`` in a scratch folder and store its outputs, with
    what made them in its metadata (``h2m2sim``) and in its ``made-with`` cell."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    made = made_with()
    with tempfile.TemporaryDirectory(prefix="h2m2sim-notebook-") as work:
        os.environ["H2M2SIM_CACHE"] = str(Path(work) / ".cache")   # the kernel inherits it
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": work}}).execute()
    cells = [c for c in nb.cells if c.get("id") == MADE_WITH_CELL]
    if len(cells) != 1:
        raise SystemExit(f"{path.name}: no Markdown cell with id {MADE_WITH_CELL!r}")
    cells[0].source = stamp(made)
    nb.metadata["h2m2sim"] = made
    nbformat.write(nb, path)


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

    def stamp(self) -> str:
        """The sentence naming the version and date the stored outputs were made with."""
        if not self.stored.get("made"):
            raise SystemExit("tutorial: outputs.json does not say what made it: rerun")
        return stamp(self.stored["made"])

    @staticmethod
    def configs() -> str:
        """The shipped configuration files, as Markdown code."""
        names = sorted(p.name for p in (ROOT / "workloads" / "configs").glob("*.yaml"))
        return ", ".join(f"`{n}`" for n in names)

    def namespace(self) -> dict:
        return {"wall": self.wall, "minutes": self.minutes, "seconds": self.seconds,
                "grep": self.grep, "configs": self.configs, "stamp": self.stamp}


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
    mode.add_argument("--notebook", action="store_true",
                      help="re-execute docs/examples/first-run.ipynb instead")
    args = ap.parse_args(argv)
    if args.notebook:
        run_notebook()
        return 0
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
            stored = {"made": made_with(), **run_all(text, Path(work))}
        OUTPUTS.write_text(json.dumps(stored, indent=1) + "\n")
    stored = json.loads(OUTPUTS.read_text())
    PAGE.write_text(render(text, stored))
    return 0


if __name__ == "__main__":
    sys.exit(main())

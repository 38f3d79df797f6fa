"""Assemble docs/validation/ and docs/performance/ into one page each, for reading offline.

The documentation lives one page per topic in docs/validation/*.md and
docs/performance/*.md. This script joins each folder into a single Markdown file, in a
fixed order (the folder's README first), under one title, with every heading demoted
one level. Relative links are rewritten for the new location: a link to a page that is
now part of the same file becomes a link to its heading, a link to a page of the other
folder points into the other assembled file, and any other link (images, data, other
docs) points at the file in docs/ itself. Nothing is written into docs/.

    python tools/assemble_docs.py                # writes build/docs/validation.md and
                                                 # build/docs/performance.md
    python tools/assemble_docs.py OUT_DIR        # the same, into OUT_DIR

The script then checks every relative link in docs/ and in what it wrote (the file
must exist; a #fragment must name a heading of the target page) and exits with status 1
listing the broken ones.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DEFAULT_OUT = ROOT / "build" / "docs"
FOLDERS = ("validation", "performance")
ORDER = ["README", "summary", "dram", "dram-presets", "npu", "model", "h2m2",
         "config-sweep", "serving", "odma", "bmc", "ellm", "sweep"]
TITLES = {
    "validation": ("Validation",
                   "Every comparison of the simulator with an independent truth -- closed-form "
                   "bounds, other simulators, published numbers -- with its source and error."),
    "performance": ("Performance",
                    "How fast the simulator runs, with the machine and the command for each "
                    "figure, so anyone can re-measure."),
}
# [text](target) and ![alt](target); the target has no spaces (as in every page here)
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^\s*(```|~~~)")


def _external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)) or target.startswith("/")


def pages(folder: str, docs: Path = DOCS) -> list[Path]:
    """The pages of docs/<folder>/ in reading order."""
    found = sorted((docs / folder).glob("*.md"))
    return sorted(found, key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER
                                        else len(ORDER), p.stem))


def _lines_outside_fences(text: str):
    fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            fence = not fence
            yield line, True
            continue
        yield line, fence


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every ATX heading outside fenced code."""
    out = []
    for line, fenced in _lines_outside_fences(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            out.append((len(m.group(1)), m.group(2)))
    return out


def slug(title: str) -> str:
    """GitHub's anchor for a heading title (before de-duplication)."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)        # links -> their text
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(text: str) -> list[str]:
    """Every heading anchor of a page, de-duplicated as GitHub does (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = []
    for _, title in headings(text):
        base = slug(title)
        n = seen.get(base, 0)
        out.append(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def _demote(text: str) -> str:
    out = []
    for line, fenced in _lines_outside_fences(text):
        out.append("#" + line if (not fenced and re.match(r"^#{1,5}\s", line)) else line)
    return "\n".join(out).strip() + "\n"


def _plain(title: str) -> str:
    return re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)


def _anchor_map(folder: str, docs: Path) -> dict[Path, dict[str, str]]:
    """For each page of the folder: its own heading anchors -> the anchors the same
    headings get in the assembled file (its title first, then every page's headings in
    order, de-duplicated over the whole file)."""
    seen: dict[str, int] = {}

    def take(t: str) -> str:
        base = slug(t)
        n = seen.get(base, 0)
        seen[base] = n + 1
        return base if n == 0 else f"{base}-{n}"

    take(TITLES[folder][0])
    out = {}
    for p in pages(folder, docs):
        text = p.read_text()
        out[p.resolve()] = {a: take(t) for a, (_, t) in zip(anchors(text), headings(text))}
    return out


def _assemble_one(folder: str, out_dir: Path, docs: Path) -> str:
    title, intro = TITLES[folder]
    parts = pages(folder, docs)
    maps = {f: _anchor_map(f, docs) for f in FOLDERS}
    own = maps[folder]

    def rewrite(page: Path, target: str) -> str:
        if _external(target):
            return target
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page.resolve()
        for f in FOLDERS:
            if dest in maps[f]:                       # a page that is assembled too
                m = maps[f][dest]
                anchor = m.get(frag, frag) if frag else next(iter(m.values()), "")
                return ("" if f == folder else f"{f}.md") + f"#{anchor}"
        rel = os.path.relpath(dest, out_dir.resolve()).replace(os.sep, "/")
        return rel + (f"#{frag}" if frag else "")

    toc, body = [], []
    for p in parts:
        text = p.read_text()
        hs = headings(text)
        name = _plain(hs[0][1]) if hs else p.stem
        toc.append(f"- [{name}](#{next(iter(own[p.resolve()].values()), '')})")
        text = LINK.sub(lambda m, p=p: m.group(1) + rewrite(p, m.group(2)) + m.group(3),
                        text)
        body.append(_demote(text))
    head = (f"# {title}\n\n{intro}\n\n<!-- Generated by tools/assemble_docs.py from "
            f"docs/{folder}/*.md; edit those files, not this one. -->\n\nContents:\n\n")
    return head + "\n".join(toc) + "\n\n" + "\n".join(body)


def assemble(out_dir: Path = DEFAULT_OUT, docs: Path = DOCS) -> list[Path]:
    """Write <out_dir>/validation.md and <out_dir>/performance.md; return their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for folder in FOLDERS:
        target = out_dir / f"{folder}.md"
        target.write_text(_assemble_one(folder, out_dir, docs))
        written.append(target)
    return written


def broken_links(files) -> list[str]:
    """'file: target (why)' for every relative link in ``files`` that does not resolve:
    a missing file, or a #fragment that names no heading of the target Markdown page."""
    bad = []
    cache: dict[Path, list[str]] = {}
    for f in map(Path, files):
        text = f.read_text()
        for line, fenced in _lines_outside_fences(text):
            if fenced:
                continue
            line = re.sub(r"`[^`]*`", "", line)            # links inside code spans are text
            for m in LINK.finditer(line):
                target = m.group(2)
                if _external(target):
                    continue
                path, _, frag = target.partition("#")
                dest = (f.parent / path).resolve() if path else f.resolve()
                if not dest.exists():
                    bad.append(f"{f}: {target} (no such file)")
                    continue
                if frag and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest.read_text())
                    if frag not in cache[dest]:
                        bad.append(f"{f}: {target} (no heading '#{frag}' in {dest.name})")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT),
                    help=f"output directory (default {DEFAULT_OUT.relative_to(ROOT)}/)")
    a = ap.parse_args(argv)
    written = assemble(Path(a.out))
    for w in written:
        print(f"wrote {w}")
    bad = broken_links(sorted(DOCS.rglob("*.md")) + written)
    for b in bad:
        print(f"broken link: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

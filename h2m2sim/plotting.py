"""Plots of sweep results in the style of the papers' figures: speedup curves (line)
and grouped bar charts, optionally normalised to a baseline system.

The data path is plain Python over the rows of ``results.csv`` (see
:mod:`h2m2sim.store`): :func:`load_results` -> :func:`filter_rows` ->
:func:`add_speedup` (optional) -> :func:`pivot` -> :func:`plot`. Every user mistake
(unknown column, ambiguous rows, missing baseline) is a one-line ConfigError.
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError
from h2m2sim.store import ResultStore, decode_cell, encode_cell, read_csv

log = logging.getLogger(__name__)

__all__ = ["Results", "load_results", "filter_rows", "find_baseline_column", "column",
           "guess_better", "add_speedup", "check_out", "pivot", "plot", "format_pivot", "FORMATS"]

FORMATS = (".png", ".pdf", ".svg")
# Grey-friendly colours and hatches, so figures survive black-and-white printing.
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
          "#8c8c8c", "#ccb974", "#64b5cd"]
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++", "**", "||"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]


@dataclass
class Results:
    columns: list[str]
    rows: list[dict[str, Any]]
    axes: list[str]          # swept columns (empty when unknown, e.g. a bare CSV)
    source: Path


def load_results(path: str | os.PathLike) -> Results:
    """Rows of a sweep directory (its CSV is rebuilt from the point files first) or of
    a results CSV file."""
    p = Path(path)
    if p.is_dir():
        cols, rows, axes = ResultStore(p).read()
        return Results(cols, rows, axes, p)
    if not p.exists():
        raise ConfigError(str(p), "no such file or directory")
    try:
        cols, rows = read_csv(p)
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(p), f"cannot read: {err}") from None
    axes: list[str] = []
    if (p.parent / "plan.json").exists():
        axes = list(ResultStore(p.parent).plan().get("axes", []))
    return Results(cols, rows, [a for a in axes if a in cols], p)


def column(res: Results, name: str | None, option: str) -> str | None:
    if name is None:
        return None
    if name not in res.columns:
        raise ConfigError(option, f"no column '{name}'" + suggest(name, res.columns)
                          + f"; columns: {', '.join(res.columns)}")
    return name


def _same(a: Any, b: Any) -> bool:
    return a == b or encode_cell(a) == encode_cell(b)


def filter_rows(res: Results, where: Iterable[str]) -> list[dict[str, Any]]:
    """Rows matching every ``COL=VALUE`` (VALUE compared as it appears in the CSV)."""
    rows = res.rows
    for cond in where:
        col, sep, val = cond.partition("=")
        if not sep:
            raise ConfigError("--where", f"expected COL=VALUE, got {cond!r}")
        column(res, col, "--where")
        want = decode_cell(val)
        rows = [r for r in rows if _same(r.get(col), want)]
        if not rows:
            raise ConfigError("--where", f"no rows with {col}={val}")
    return rows


def find_baseline_column(res: Results, spec: str) -> tuple[str, Any]:
    """``COL=VALUE`` or just ``VALUE``: the column (a swept one if known) holding it."""
    if "=" in spec:
        col, _, val = spec.partition("=")
        return column(res, col, "--baseline"), decode_cell(val)
    want = decode_cell(spec)
    candidates = res.axes or [c for c in res.columns if c not in ("point", "config_hash")]
    hits = [c for c in candidates if any(_same(r.get(c), want) for r in res.rows)]
    if not hits:
        raise ConfigError("--baseline", f"no swept column has the value {spec!r}")
    if len(hits) > 1:
        raise ConfigError("--baseline", f"{spec!r} appears in columns {', '.join(hits)}; "
                                        "write --baseline COL=VALUE")
    return hits[0], want


_HIGHER = ("per_s", "throughput", "bandwidth", "goodput", "utilization", "util", "speedup",
           "hit", "accuracy", "tokens_s", "gbps")
_LOWER = ("_ns", "_us", "_ms", "_s", "time", "latency", "cycles", "ttft", "tpot", "energy",
          "bytes", "stall", "miss")


def guess_better(y: str) -> str:
    """'higher' or 'lower' is better, from the metric's name; ConfigError if unclear."""
    name = y.lower()
    if any(k in name for k in _HIGHER):
        return "higher"
    if any(name.endswith(k) or k in name for k in _LOWER):
        return "lower"
    raise ConfigError("--better", f"cannot tell whether higher or lower '{y}' is better; "
                                  "pass --better higher|lower")


def add_speedup(rows: Sequence[dict[str, Any]], y: str, base_col: str, base_value: Any,
                match: Sequence[str], better: str) -> list[dict[str, Any]]:
    """Rows with a ``speedup`` column: each row's ``y`` against the baseline row with
    the same values of the ``match`` columns (``base/y`` when lower is better,
    ``y/base`` when higher is). Rows without a baseline partner are dropped (with a
    warning); no partner at all is an error."""
    match = [c for c in match if c != base_col]
    key = lambda r: tuple(encode_cell(r.get(c)) for c in match)  # noqa: E731
    base = {}
    for r in rows:
        if _same(r.get(base_col), base_value) and isinstance(r.get(y), (int, float)):
            base.setdefault(key(r), r[y])
    out, missing = [], 0
    for r in rows:
        b, v = base.get(key(r)), r.get(y)
        if b is None or not isinstance(v, (int, float)):
            missing += 1
            continue
        s = (b / v if v else math.inf) if better == "lower" else (v / b if b else math.inf)
        out.append(dict(r, speedup=s))
    if not out:
        raise ConfigError("--baseline", f"no row has a baseline partner with "
                                        f"{base_col}={base_value!r} (matched on "
                                        f"{', '.join(match) or 'nothing'})")
    if missing:
        log.warning("%d rows have no %s=%s row to compare with (or no value); left out",
                    missing, base_col, base_value)
    return out


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else (1, 0, encode_cell(v))


def pivot(rows: Sequence[dict[str, Any]], x: str, y: str, hue: str | None,
          columns: Sequence[str] = ()) -> tuple[list, list, dict]:
    """(x values, hue values, {(hue, x): y}); x values sorted, hues in order of first
    appearance. Two rows landing on the same (hue, x) are an error naming the columns
    that tell them apart."""
    xs, hues, data, seen = [], [], {}, {}
    for r in rows:
        xv, hv, yv = r.get(x), (r.get(hue) if hue else None), r.get(y)
        if not isinstance(yv, (int, float)) or isinstance(yv, bool):
            continue
        k = (encode_cell(hv), encode_cell(xv))
        if k in data:
            other = seen[k]
            differ = [c for c in columns if c not in (x, y, hue, "point", "config_hash")
                      and not _same(other.get(c), r.get(c))]
            raise ConfigError("--hue" if hue else "--x", f"several rows have {x}={xv}"
                              + (f", {hue}={hv}" if hue else "") + "; they differ in "
                              + (", ".join(differ) or "nothing swept")
                              + ": add --where COL=VALUE or use one as --hue")
        data[k], seen[k] = yv, r
        if not any(_same(xv, e) for e in xs):
            xs.append(xv)
        if not any(_same(hv, e) for e in hues):
            hues.append(hv)
    if not data:
        raise ConfigError("--y", f"column '{y}' has no numeric values to plot")
    xs.sort(key=_sort_key)
    return xs, hues, {k: v for k, v in data.items()}


def format_pivot(xs: list, hues: list, data: dict, x: str) -> str:
    """The plotted numbers as a text table (hues as rows, x values as columns)."""
    head = [x] + [encode_cell(v) for v in xs]
    lines = [head]
    for h in hues:
        row = [encode_cell(h) if h is not None else "value"]
        for xv in xs:
            v = data.get((encode_cell(h), encode_cell(xv)))
            row.append("-" if v is None else f"{v:.4g}")
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in lines)


def check_out(out: str | os.PathLike) -> Path:
    """``out`` as a Path if its extension names a supported figure format."""
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise ConfigError("--out", f"must end in {', '.join(FORMATS)}, got '{out.name}'")
    return out


def plot(xs: list, hues: list, data: dict, *, x: str, ylabel: str, hue: str | None,
         out: str | os.PathLike, kind: str = "line", title: str | None = None,
         reference: float | None = None, logx: bool = False, logy: bool = False) -> Path:
    """Draw and save the figure (format from ``out``'s extension)."""
    out = check_out(out)
    if kind not in ("line", "bar"):
        raise ConfigError("--kind", f"must be line or bar, got {kind!r}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric_x = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    labels = [encode_cell(v) for v in xs]
    with plt.rc_context({"font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.axisbelow": True,
                         "svg.hashsalt": "h2m2sim", "pdf.compression": 6}):
        width = max(4.0, min(12.0, 1.0 + 0.45 * len(xs) * max(1, len(hues)) ** 0.5))
        fig, ax = plt.subplots(figsize=(width, 3.0))
        if kind == "line":
            for i, h in enumerate(hues):
                pts = [(xv, data[(encode_cell(h), encode_cell(xv))]) for xv in xs
                       if (encode_cell(h), encode_cell(xv)) in data]
                px = [p[0] for p in pts] if numeric_x else [xs.index(p[0]) for p in pts]
                ax.plot(px, [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                        color=COLORS[i % len(COLORS)], linewidth=1.5, markersize=4,
                        label=encode_cell(h) if h is not None else None)
            if numeric_x and logx:
                ax.set_xscale("log", base=2)
            if numeric_x:
                ax.set_xticks(xs, labels)
            else:
                ax.set_xticks(range(len(xs)), labels)
        else:
            n = max(1, len(hues))
            bw = 0.8 / n
            for i, h in enumerate(hues):
                vals = [data.get((encode_cell(h), encode_cell(xv)), float("nan")) for xv in xs]
                pos = [j - 0.4 + bw * (i + 0.5) for j in range(len(xs))]
                ax.bar(pos, vals, width=bw, color=COLORS[i % len(COLORS)],
                       hatch=HATCHES[i % len(HATCHES)], edgecolor="black", linewidth=0.5,
                       label=encode_cell(h) if h is not None else None)
            ax.set_xticks(range(len(xs)), labels)
            ax.grid(False, axis="x")
        if reference is not None:
            ax.axhline(reference, color="black", linewidth=0.8, linestyle="--")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if hue and hues:
            ax.legend(title=hue, ncol=min(len(hues), 4), frameon=False, fontsize=8,
                      loc="lower center", bbox_to_anchor=(0.5, 1.0 if not title else 1.08))
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            meta = {".svg": {"Date": None}, ".pdf": {"CreationDate": None}}
            fig.savefig(out, dpi=200, metadata=meta.get(out.suffix.lower()))
        except OSError as err:
            raise ConfigError("--out", f"cannot write {out}: {err.strerror or err}") from None
        finally:
            plt.close(fig)
    return out

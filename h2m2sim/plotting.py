"""Plots of sweep results in the style of the papers' figures: speedup curves (line)
and grouped bar charts, optionally normalised to a baseline system.

The data path is plain Python over the rows of ``results.csv`` (see
:mod:`h2m2sim.store`): :func:`load_results` -> :func:`filter_rows` ->
:func:`finite_rows` -> :func:`add_speedup` (optional) -> :func:`axis` and
:func:`rescale` (units) -> :func:`pivot` -> :func:`plot`. Every user mistake (unknown
column, ambiguous rows, missing baseline, a unit the column cannot be shown in, a
column with no finite value) is a one-line ConfigError.

Axes are labelled with a readable name and a unit picked from the column's unit suffix
(:mod:`h2m2sim.quantities`): ``iteration_time_ns`` of about 5e8 is drawn as
"iteration time (ms)" with ticks near 500, never with an offset or exponent
(``--xunit``/``--yunit`` choose the unit, ``--xlabel``/``--ylabel`` the text). A speedup
names its baseline: the one given with ``--baseline``, or for the runner's ``speedup``
metric the ``policy.baseline`` recorded in the points ("speedup over lpddr-only").
Defaults fit one column of a two-column paper (3.4 x 2.4 inches, 7-8 point text; category
labels that would overlap are tilted, then thinned); ``--size`` changes it.
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError
from h2m2sim.quantities import quantity_of, readable_name
from h2m2sim.store import ResultStore, decode_cell, encode_cell, given_out, read_csv

log = logging.getLogger(__name__)

__all__ = ["Results", "load_results", "filter_rows", "finite_rows", "find_baseline_column",
           "column",
           "guess_better", "add_speedup", "check_out", "pivot", "plot", "format_pivot", "FORMATS",
           "Axis", "axis", "rescale", "speedup_label", "parse_size", "figure", "PAPER_SIZE"]

FORMATS = (".png", ".pdf", ".svg")
# Grey-friendly colours and hatches, so figures survive black-and-white printing.
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
          "#8c8c8c", "#ccb974", "#64b5cd"]
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++", "**", "||"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
#: One column of a two-column paper, in inches (width, height).
PAPER_SIZE = (3.4, 2.4)
#: Text sizes in points that stay legible when the figure is printed at PAPER_SIZE.
STYLE = {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7,
         "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "axes.axisbelow": True, "axes.formatter.useoffset": False,
         "svg.hashsalt": "h2m2sim", "pdf.compression": 6}


@dataclass
class Results:
    columns: list[str]
    rows: list[dict[str, Any]]
    axes: list[str]          # swept columns (empty when unknown, e.g. a bare CSV)
    source: Path
    #: names of the ``policy.baseline`` systems recorded in the points, in order of
    #: first appearance (empty for a bare CSV or runs without a baseline)
    baselines: list[str] = field(default_factory=list)


def _baseline_names(store: ResultStore) -> list[str]:
    """The baseline systems the store's points were compared against (their resolved
    ``policy.baseline`` is a system mapping with a name, or still a preset name)."""
    names: dict[str, None] = {}
    for _, rec in store.records():
        cfg = rec.get("config")
        policy = cfg.get("policy") if isinstance(cfg, dict) else None
        base = policy.get("baseline") if isinstance(policy, dict) else None
        name = base.get("name") if isinstance(base, dict) else base
        if name:
            names[str(name)] = None
    return list(names)


def load_results(path: str | os.PathLike) -> Results:
    """Rows of a sweep directory (its CSV is rebuilt from the point files first) or of
    a results CSV file."""
    p = Path(path)
    if p.is_dir():
        store = ResultStore(p)
        cols, rows, axes = store.read()
        return Results(cols, rows, axes, p, _baseline_names(store))
    if not p.exists():
        raise ConfigError(str(p), "no such file or directory")
    try:
        cols, rows = read_csv(p)
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(p), f"cannot read: {err}") from None
    axes: list[str] = []
    baselines: list[str] = []
    if (p.parent / "plan.json").exists():
        store = ResultStore(p.parent)
        axes = list(store.plan().get("axes", []))
        baselines = _baseline_names(store)
    return Results(cols, rows, [a for a in axes if a in cols], p, baselines)


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


def _number(v: Any) -> bool:
    """Whether a cell holds a number (a bool does not count)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite_rows(rows: Sequence[dict[str, Any]], col: str, option: str
                ) -> list[dict[str, Any]]:
    """Rows whose number in ``col`` is finite: a ``nan`` or ``inf`` cell (a metric that
    was not computed, a division by zero) has no place on an axis, so its rows are left
    out with one warning saying how many. Cells that are not numbers (categories) are
    kept. A ConfigError naming ``option`` when ``col`` holds numbers but none finite."""
    kept = [r for r in rows if not _number(r.get(col)) or math.isfinite(r[col])]
    left = len(rows) - len(kept)
    if left and not any(_number(r.get(col)) for r in kept):
        raise ConfigError(option, f"column '{col}' has no finite value (only nan or inf): "
                                  "nothing to plot")
    if left:
        log.warning("%d rows with no finite %s (nan or inf) are left out of the plot",
                    left, col)
    return kept


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


@dataclass(frozen=True)
class Axis:
    """How a column is drawn on an axis: its label and the factor turning stored numbers
    into the numbers drawn (1e-6 for ns shown in ms)."""
    label: str
    scale: float = 1.0


def _numbers(rows: Iterable[dict[str, Any]], col: str) -> list[float]:
    return [float(r[col]) for r in rows if _number(r.get(col))]


def axis(rows: Sequence[dict[str, Any]], col: str, *, label: str | None = None,
         unit: str | None = None, option: str = "--yunit") -> Axis:
    """The axis of column ``col``: unit ``unit`` if given (checked against the column's
    unit suffix, errors under ``option``), else the unit its values read best in; label
    ``label`` if given, else its readable name with that unit."""
    q = quantity_of(col)
    shown = q.display_unit(_numbers(rows, col), unit, option)
    return Axis(label or q.label(shown), q.scale(shown))


def rescale(rows: Sequence[dict[str, Any]], col: str, factor: float) -> list[dict[str, Any]]:
    """Rows with the numbers of ``col`` multiplied by ``factor`` (rounded to 12
    significant digits, so 128e9 bytes read 128 GB and not 128.00000000000001)."""
    if factor == 1.0:
        return list(rows)
    out = []
    for r in rows:
        v = r.get(col)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            r = dict(r, **{col: float(f"{v * factor:.12g}")})
        out.append(r)
    return out


def _compared(y: str) -> str:
    """What a speedup of ``y`` compares, in words with no unit: a speedup is a ratio,
    and a rate's bare name ('tokens' of ``tokens_per_s``) in parentheses would read as
    the axis' unit."""
    q = quantity_of(y)
    return f"{q.name} throughput" if q.fixed == "/s" else q.name


def speedup_label(res: Results, y: str, baseline: str | None = None) -> str:
    """'speedup over lpddr-only': the baseline named on the command line (then the
    metric it was computed from is added), else the one recorded in the points when
    ``y`` is the runner's ``speedup`` metric."""
    if baseline is not None:
        return f"speedup over {baseline} ({_compared(y)})"
    if len(res.baselines) == 1:
        return f"speedup over {res.baselines[0]}"
    if res.baselines:
        return "speedup over " + " / ".join(res.baselines)
    return "speedup"


def parse_size(text: str) -> tuple[float, float]:
    """``'3.4x2.4'`` -> (3.4, 2.4) inches; a ConfigError naming --size otherwise."""
    w, sep, h = text.lower().partition("x")
    try:
        size = (float(w), float(h))
    except ValueError:
        size = None
    if not sep or size is None or not all(0.5 <= v <= 40 for v in size):
        raise ConfigError("--size", f"expected WIDTHxHEIGHT in inches, each 0.5..40 "
                                    f"(e.g. 3.4x2.4), got {text!r}")
    return size


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
    """``out`` as a Path if it is not empty and its extension names a supported figure
    format."""
    out = given_out(out, "--out", "file")
    if out.suffix.lower() not in FORMATS:
        raise ConfigError("--out", f"must end in {', '.join(FORMATS)}, got '{out.name}'")
    return out


def _label(v: Any) -> str:
    """A tick label: numbers without float noise, other values as in the CSV."""
    if isinstance(v, float) and not isinstance(v, bool):
        return f"{v:g}"
    return encode_cell(v)


def _overlapping(labels: list) -> bool:
    boxes = [t.get_window_extent() for t in labels if t.get_visible() and t.get_text()]
    return any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:]))


def _declutter_xticks(fig, ax) -> None:
    """Tilt category labels that would overlap; if tilted ones still collide, keep
    every k-th. Numeric axes are left to Matplotlib's locator, which never crowds."""
    fig.canvas.draw()
    labels = ax.get_xticklabels()
    if not _overlapping(labels):
        return
    for t in labels:
        t.set_rotation(30)
        t.set_horizontalalignment("right")
        t.set_rotation_mode("anchor")
    fig.canvas.draw()
    step = 1
    while _overlapping(labels) and step < len(labels):
        step += 1
        for i, t in enumerate(labels):
            t.set_visible(i % step == 0)
        fig.canvas.draw()


def _lines(ax, xs: list, hues: list, data: dict, numeric_x: bool, logx: bool) -> None:
    for i, h in enumerate(hues):
        pts = [(xv, data[(encode_cell(h), encode_cell(xv))]) for xv in xs
               if (encode_cell(h), encode_cell(xv)) in data]
        px = [p[0] for p in pts] if numeric_x else [xs.index(p[0]) for p in pts]
        ax.plot(px, [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                color=COLORS[i % len(COLORS)], linewidth=1.2, markersize=3.5,
                label=encode_cell(h) if h is not None else None)
    if numeric_x and logx:
        ax.set_xscale("log", base=2)
        if len(xs) <= 8:  # the swept values themselves, as the papers label them
            ax.set_xticks(xs, [_label(v) for v in xs])
            ax.minorticks_off()
    elif not numeric_x:
        ax.set_xticks(range(len(xs)), [_label(v) for v in xs])


def _bars(ax, xs: list, hues: list, data: dict) -> None:
    bw = 0.8 / max(1, len(hues))
    for i, h in enumerate(hues):
        vals = [data.get((encode_cell(h), encode_cell(xv)), float("nan")) for xv in xs]
        pos = [j - 0.4 + bw * (i + 0.5) for j in range(len(xs))]
        ax.bar(pos, vals, width=bw, color=COLORS[i % len(COLORS)],
               hatch=HATCHES[i % len(HATCHES)], edgecolor="black", linewidth=0.4,
               label=encode_cell(h) if h is not None else None)
    ax.set_xticks(range(len(xs)), [_label(v) for v in xs])
    ax.grid(False, axis="x")


def figure(xs: list, hues: list, data: dict, *, xlabel: str, ylabel: str,
           hue: str | None = None, kind: str = "line", title: str | None = None,
           reference: float | None = None, logx: bool = False, logy: bool = False,
           size: tuple[float, float] = PAPER_SIZE):
    """The Matplotlib figure (``size`` in inches); the caller closes it."""
    if kind not in ("line", "bar"):
        raise ConfigError("--kind", f"must be line or bar, got {kind!r}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric_x = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        if kind == "line":
            _lines(ax, xs, hues, data, numeric_x, logx)
        else:
            _bars(ax, xs, hues, data)
        if reference is not None:
            ax.axhline(reference, color="black", linewidth=0.7, linestyle="--")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if hue and hues:
            # above the axes, so no curve or bar is hidden; constrained layout makes room
            ncol = max(1, min(len(hues), int(size[0] * 12 // max(
                len(encode_cell(h)) + 4 for h in hues))))
            ax.legend(title=readable_name(hue), ncol=ncol, frameon=False,
                      loc="lower center", bbox_to_anchor=(0.5, 1.0), borderaxespad=0.2)
        _declutter_xticks(fig, ax)
    return fig


def plot(xs: list, hues: list, data: dict, *, x: str, ylabel: str, hue: str | None,
         out: str | os.PathLike, kind: str = "line", title: str | None = None,
         reference: float | None = None, logx: bool = False, logy: bool = False,
         xlabel: str | None = None, size: tuple[float, float] = PAPER_SIZE) -> Path:
    """Draw and save the figure (format from ``out``'s extension; ``size`` in inches;
    ``xlabel`` defaults to the column name ``x``)."""
    out = check_out(out)
    fig = figure(xs, hues, data, xlabel=xlabel or x, ylabel=ylabel, hue=hue, kind=kind,
                 title=title, reference=reference, logx=logx, logy=logy, size=size)
    import matplotlib.pyplot as plt  # after figure() chose the file-only backend

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        meta = {".svg": {"Date": None}, ".pdf": {"CreationDate": None}}
        with plt.rc_context(STYLE):
            fig.savefig(out, dpi=300, metadata=meta.get(out.suffix.lower()))
    except OSError as err:
        raise ConfigError("--out", f"cannot write {out}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return out

#!/usr/bin/env python
"""The tables of docs/validation/engines.md from what ``scripts/serving_engines.py``
wrote (``engines.csv``, ``grid.csv``), so the page is rewritten from a run, not retyped.

    python tools/engines_tables.py docs/validation/engines     # prints Markdown
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _pct(x: str) -> str:
    return f"{100 * float(x):+.1f} %"


def fp8kv(rows: list[dict]) -> str:
    """Median TTFT and ITL of the vLLM FP8-KV post, measured beside simulated."""
    out = ["| KV cache | median TTFT measured | simulated | median ITL measured | simulated |",
           "|---|---|---|---|---|"]
    for r in rows:
        if r["set"] == "fp8kv":
            out.append(f"| {r['label'].split()[-1].upper()} | {float(r['measured_ttft_ms']):.1f} ms"
                       f" | {float(r['simulated_ttft']):.0f} ms ({_pct(r['error_ttft'])}) | "
                       f"{float(r['measured_itl_ms']):.2f} ms | {float(r['simulated_itl']):.1f}"
                       f" ms ({_pct(r['error_itl'])}) |")
    return "\n".join(out)


def nim(rows: list[dict]) -> str:
    """Mean TTFT and ITL by concurrency, measured and the two FP8-KV engines."""
    pts = [r for r in rows if r["set"] == "nim" and r["label"].startswith("KV fp8")]
    conc = sorted({int(r["concurrency"]) for r in pts})
    by = {(r["engine"], int(r["concurrency"])): r for r in pts}
    head = "| concurrency | " + " | ".join(map(str, conc)) + " |"
    out = [head, "|---|" + "---|" * len(conc)]
    for what, unit in (("ttft", "TTFT"), ("itl", "ITL")):
        meas = [float(by[("trtllm", c)][f"measured_{what}_ms"]) for c in conc]
        out.append(f"| {unit} measured (ms) | " + " | ".join(_ms(v, what) for v in meas) + " |")
        for eng in ("trtllm", "vllm"):
            sim = [float(by[(eng, c)][f"simulated_{what}"]) for c in conc]
            out.append(f"| `{eng}`, FP8 KV | " + " | ".join(_ms(v, what) for v in sim) + " |")
    return "\n".join(out)


def _ms(v: float, what: str) -> str:
    return f"{v:,.0f}" if what == "ttft" else f"{v:.1f}"


def trtllm(rows: list[dict]) -> str:
    """Offline output tokens/s, measured / simulated, FP8 KV, by ISL/OSL and setup."""
    pts = [r for r in rows if r["set"] == "trtllm" and "fp8" in r["label"].lower()]
    cols: dict[str, str] = {}
    cells: dict[tuple[str, str], str] = {}
    for r in pts:
        setup = f"{r['model']} {r['system']} x{r['cards']}"
        cols.setdefault(setup, setup)
        isl_osl = r["trace"].split(":", 1)[1].replace(":", "/")
        m, s = float(r["measured_tokens_per_s"]), float(r["simulated_tokens_per_s"])
        cells[(isl_osl, setup)] = f"{m:,.0f} / {s:,.0f} ({_pct(r['error_tokens_per_s'])})"
    lengths = sorted({k[0] for k in cells}, key=lambda t: tuple(map(int, t.split("/"))))
    out = ["| ISL/OSL (FP8 KV) | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for t in lengths:
        out.append(f"| {t} | " + " | ".join(cells.get((t, c), "") for c in cols) + " |")
    return "\n".join(out)


def grid(rows: list[dict]) -> str:
    """Mean TTFT (s) / mean TPOT (ms) by GPU, TP, lengths and concurrency."""
    cells: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    heads: list[str] = []
    for r in rows:
        col = f"{r['trace'].split(':', 1)[1]} C={r['concurrency']}"
        if col not in heads:
            heads.append(col)
        cells[(r["system"], int(r["cards"]))][col] = \
            f"{float(r['ttft_mean_s']):.2f} / {1e3 * float(r['tpot_mean_s']):.1f}"
    out = ["| GPU | TP | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for (system, tp), row in cells.items():
        out.append(f"| {system} | {tp} | " + " | ".join(row.get(h, "") for h in heads) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="where serving_engines.py wrote engines.csv and grid.csv")
    a = p.parse_args(argv)
    folder = Path(a.folder)
    eng = _rows(folder / "engines.csv")
    for title, text in (("fp8kv", fp8kv(eng)), ("nim", nim(eng)), ("trtllm", trtllm(eng)),
                        ("grid", grid(_rows(folder / "grid.csv")))):
        print(f"## {title}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``h2m2sim run CONFIG``: one simulation run, summarised or as JSON."""
from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h2m2sim.cli.cmd_validate import add_set_option

HELP = "run one configuration and print its metrics"
log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help=HELP, description=HELP[0].upper() + HELP[1:]
                              + " (iteration time, speedup over policy.baseline if set, "
                                "breakdown).")
    p.add_argument("config", help="run configuration (YAML)")
    add_set_option(p)
    p.add_argument("--out", metavar="DIR",
                   help="also write DIR/result.json, the resolved DIR/config.yaml and the "
                        "wall times DIR/timing.json; DIR must not hold a result already")
    p.add_argument("--overwrite", action="store_true",
                   help="with --out: replace the result DIR already holds")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (config_hash, version, metrics, timing) "
                        "instead of the summary")
    p.set_defaults(func=main)


def _num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.6g}"


def _duration(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"


def _name(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    name = getattr(obj, "name", None)
    if name is None and isinstance(obj, Mapping):
        name = obj.get("name") or obj.get("preset")
    return str(name) if name else "(inline)"


def table(data: Mapping[str, Any]) -> list[str]:
    """Lines of a text table: a mapping of scalars becomes two columns, a mapping of
    mappings becomes rows x columns (deeper levels flattened with dots)."""
    from h2m2sim.store import flatten_metrics
    if all(not isinstance(v, Mapping) for v in data.values()):
        rows = {k: {"value": v} for k, v in data.items()}
    else:
        rows = {k: flatten_metrics(v) if isinstance(v, Mapping) else {"value": v}
                for k, v in data.items()}
    cols: dict[str, None] = {}
    for r in rows.values():
        cols.update(dict.fromkeys(r))
    cells = [[""] + list(cols)] + [[k] + [_num(r[c]) if c in r else "-" for c in cols]
                                   for k, r in rows.items()]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def _plan(cfg: Any) -> str:
    """What a run of ``cfg`` simulates, in a few words."""
    p = cfg.policy
    base = f" and baseline {_name(p.baseline)}" if p.baseline is not None else ""
    return (f"{_name(cfg.model)} on {_name(cfg.system)}{base}, mapper {p.mapper}, "
            f"fidelity {cfg.simulation.fidelity}")


def summary(cfg: Any, metrics: Mapping[str, Any], chash: str,
            timing: Mapping[str, Any] | None = None) -> str:
    """The text report of one run; ``timing`` (wall seconds) is shown last, apart."""
    from h2m2sim import runner
    from h2m2sim.version import __version__
    w, p = cfg.workload, cfg.policy
    seq = (f"seq {w.seq}" if isinstance(w.seq, int)
           else f"seq {min(w.seq)}..{max(w.seq)} (per request)")
    lines = [f"h2m2sim {__version__}  config {chash[:12]}",
             f"  system     {_name(cfg.system)}",
             f"  model      {_name(cfg.model)}",
             (f"  workload   serving ({_name(w.serving)})" if w.serving is not None else
              f"  workload   {w.phase}, batch {w.batch}, {seq}, one iteration"),
             f"  policy     mapper {p.mapper}, allocator {p.allocator}", ""]
    t = runner.TIME_METRIC.get(runner.job_kind(cfg))
    if t in metrics and isinstance(metrics[t], (int, float)):
        label = t[:-3].replace("_", " ") if t.endswith("_ns") else t
        lines.append(f"{label}: {_duration(metrics[t]) if t.endswith('_ns') else metrics[t]}")
    if "speedup" in metrics:
        base = metrics.get(f"baseline_{t}")
        of = f" ({_duration(base)})" if isinstance(base, (int, float)) and \
            t.endswith("_ns") else ""
        lines.append(f"speedup: {metrics['speedup']:.3f}x over {_name(p.baseline)}{of}")
    skip = {t, "speedup", f"baseline_{t}"}
    scalars = {k: v for k, v in metrics.items() if k not in skip and not isinstance(v, Mapping)
               and not isinstance(v, list)}
    width = max((len(k) for k in scalars), default=0)
    lines += [f"{k.ljust(width)}  {_num(v)}" for k, v in scalars.items()]
    for k, v in metrics.items():
        if isinstance(v, Mapping) and v:
            lines += ["", f"{k}:"] + table(v)
    if timing:
        lines += ["", "wall-clock times (s; vary from run to run):"] + table(timing)
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    log.info("reading %s", args.config)     # a first line before the imports below
    from h2m2sim import api
    from h2m2sim.cache import config_hash
    cfg = api.load(args.config, args.sets)
    log.info("config %s: %s", config_hash(cfg)[:12], _plan(cfg))
    res = api.run(cfg, out=args.out or None, overwrite=args.overwrite)
    if args.json:
        print(json.dumps({**res.result_record(), "timing": res.timing}, allow_nan=True))
    else:
        print(summary(res.config, res.metrics, res.config_hash, res.timing))
        if args.out:
            print(f"\nwrote {Path(args.out) / 'result.json'}, config.yaml and timing.json")
    return 0

"""``h2m2sim model``: sizes, FLOPs and kernels of one decoder layer of a zoo model, an
optional head-aware partition summary, and export of the layer's DRAM trace."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from dram_models.errors import ConfigError
from dram_models.schema import suggest
from dram_models.trace import FORMATS, save

from h2m2sim.model import (DTYPE_BYTES, SUBLAYERS, build_layer_graph,
                           graph_footprint, kernels, list_models, load_model,
                           normalize_batch, partition_layer, split_units, state_bytes,
                           stored_bytes, total_flops, transfer_bytes, transfers, unique_bytes)
from h2m2sim.model.spec import MODELS, STORAGE_ONLY
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.memory.layer_traffic import layer_traffic
from h2m2sim.store import atomic_output_path, given_out, prepare_file, writing_to


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "model", help="per-layer sizes, FLOPs and kernels of an LLM; export a layer's DRAM trace",
        description="Show the shape, parameter count, footprint (weights / KV / activations "
        "per sublayer), FLOPs and kernel count of one decoder layer for a batch, optionally "
        "partitioned over two memory sides, and export the layer's DRAM requests.")
    p.add_argument("name", nargs="?", help="zoo name (see --list) or path to a model YAML file")
    p.add_argument("--list", action="store_true", help="list the zoo models and exit")
    p.add_argument("--batch", default="1", help="requests in the batch (default 1)")
    p.add_argument("--seq", default="1", help="context length per request: one integer, or "
                   "comma-separated lengths, one per request (decode: tokens attended "
                   "including the new one; prefill: prompt length)")
    p.add_argument("--phase", default="decode", help="decode (default) or prefill")
    p.add_argument("--kv-dtype", default=None, help="dtype of the KV cache: int4 | fp8 | "
                   "int8 | fp16 | bf16 | fp32 (default: the model's kv_dtype, else --dtype)")
    p.add_argument("--weight-dtype", default=None, help="dtype the weights are stored in, "
                   "as --kv-dtype (default: the model's weight_dtype, else --dtype)")
    p.add_argument("--dtype", default=None, help="activations and compute: fp8 | int8 | fp16 "
                   "| bf16 | fp32 (default: the model's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--split", default=None, metavar="qkv=N,attention=N,fc=N",
                   help="partition the layer: N units of each sublayer on the first side")
    p.add_argument("--sides", default=None, help="with --split: the two side names (default "
                   "hbm,lpddr)")
    p.add_argument("--export-trace", default=None, metavar="FILE",
                   help="write the layer's DRAM requests to FILE")
    p.add_argument("--format", default=None, help="trace format: " + " | ".join(FORMATS)
                   + " (default npz; text is gzip-compressed if FILE ends in .gz). The "
                   "layer is an open loop: dramsim3 lines all carry cycle 0, which "
                   "replays the same as the other formats")
    p.add_argument("--kv-layout", default=None, help="contiguous (default) | paged")
    p.add_argument("--block-tokens", default=None, help="tokens per KV block (paged "
                   "layout; default 16)")
    p.add_argument("--request-bytes", default=None, help="bytes per DRAM request (default "
                   "32)")
    p.add_argument("--seed", default=None, help="seed of the paged block scatter (default 0)")
    p.add_argument("--side", default=None, help="with --split: export only this side")
    p.add_argument("--no-activations", action="store_true",
                   help="trace only weight and KV traffic")
    p.add_argument("--timing", action="store_true",
                   help="also report graph build wall times (seconds), under 'timing'")
    p.set_defaults(func=run)


#: bounds of ``--batch`` and of ``--seq`` and ``--block-tokens``: those of
#: ``workload.batch`` and ``workload.seq`` in a run configuration
MAX_BATCH, MAX_TOKENS = 65536, 1 << 24


def _int(text: str, key: str, lo: int = 0, hi: int | None = None) -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {text!r}") from None
    if v < lo:
        raise ConfigError(key, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ConfigError(key, f"must be <= {hi}, got {v}")
    return v


def _choice(text, key: str, allowed) -> str:
    if text not in allowed:
        raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {text!r}"
                          + suggest(str(text), list(allowed)))
    return text


def _parse_split(text: str) -> dict:
    out = {}
    for item in text.split(","):
        if "=" not in item:
            raise ConfigError("--split", f"expected qkv=N,attention=N,fc=N, got {text!r}")
        k, v = item.split("=", 1)
        if k.strip() in out:
            raise ConfigError("--split", f"gives {k.strip()} twice in {text!r}")
        out[k.strip()] = _int(v, f"--split {k.strip()}")
    return out


def run(args) -> int:
    if args.list:
        if args.name:
            raise ConfigError("--list", f"lists the zoo and takes no model name, got "
                              f"{args.name!r}")
        for name in list_models():
            m = load_model(name)
            print(f"{name:30s} {m.total_params / 1e9:8.2f}B  {m.layers:3d} layers  "
                  f"d={m.hidden:<6d} {m.heads:3d}/{m.kv_heads:<3d} heads  {m.dtype}")
        return 0
    if not args.name:
        raise ConfigError("model", "give a model name (see h2m2sim model --list)")
    model = load_model(args.name)
    batch = _int(args.batch, "--batch", 1, MAX_BATCH)
    seq_text = str(args.seq)
    seq = ([_int(s, "--seq", 1, MAX_TOKENS) for s in seq_text.split(",")] if "," in seq_text
           else _int(seq_text, "--seq", 1, MAX_TOKENS))
    batch, seqs = normalize_batch(batch, seq, key="--seq")
    phase = _choice(args.phase, "--phase", ("decode", "prefill"))
    compute = [d for d in DTYPE_BYTES if d not in STORAGE_ONLY]
    dtype = _choice(args.dtype, "--dtype", compute) if args.dtype else model.dtype
    for flag, field in (("--weight-dtype", "weight_dtype"), ("--kv-dtype", "kv_dtype")):
        chosen = getattr(args, field)
        if chosen:
            model = dataclasses.replace(model, **{field: _choice(chosen, flag,
                                                                 list(DTYPE_BYTES))})

    t0 = time.perf_counter()
    G = build_layer_graph(model, batch, seqs, phase=phase, dtype=dtype)
    t_build = time.perf_counter() - t0
    ub = unique_bytes(G)
    flops = total_flops(G)
    st = state_bytes(G)
    fp = graph_footprint(G, state_apart=True)
    kinds = _layer_kinds(model, G, batch, seqs, phase, dtype)
    kv_dtype = model.kv_dtype or dtype
    weight_dtype = model.weight_dtype or dtype
    out = {
        "name": model.name, "phase": phase, "batch": batch, "dtype": dtype,
        "weight_dtype": weight_dtype,
        # the sizes serving and memory studies start from (KV in --kv-dtype)
        "params": model.total_params, "active_params": model.active_params,
        "kv_dtype": kv_dtype, "kv_bytes_per_token": model.kv_bytes_per_token(kv_dtype),
        "kv_bytes": sum(model.kv_bytes_of(s, kv_dtype) for s in seqs),
        "attention": [_attention_kind(model, i) for i in range(model.layers)],
        "seq_min": min(seqs), "seq_max": max(seqs), "seq_sum": sum(seqs),
        "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
        "kv_heads": model.kv_heads, "head_dim": model.head_dim, "ffn_dim": model.ffn_dim,
        "kv_lora_rank": model.kv_lora_rank, "qk_rope_head_dim": model.qk_rope_head_dim,
        "ffn_type": model.ffn_type,
        "params_per_layer": model.params_per_layer, "total_params": model.total_params,
        "decoder_params": model.total_params - model.embedding_params,
        "embedding_params": model.embedding_params,
        "weight_bytes_per_layer": ub["weight"], "kv_bytes_per_layer": ub["kv"] - st,
        "ssm_state_bytes_per_layer": st,
        "activation_bytes_per_layer": ub["activation"],
        "kv_bytes_per_token_per_layer": model.kv_bytes_per_token_per_layer(kv_dtype),
        "total_weight_bytes": stored_bytes(model.total_params, weight_dtype),
        "decoder_weight_bytes": sum(k["layers"] * k["weight_bytes_per_layer"] for k in kinds),
        "total_kv_bytes": sum(k["layers"] * k["kv_bytes_per_layer"] for k in kinds),
        "total_ssm_state_bytes": sum(k["layers"] * k["ssm_state_bytes_per_layer"]
                                     for k in kinds),
        "flops_per_layer": flops,
        "total_decoder_flops": sum(k["layers"] * k["flops_per_layer"] for k in kinds),
        "layer_kinds": kinds,
        "kernels_per_layer": len(kernels(G)),
        "footprint_per_layer": fp,
        "split_units": {s: split_units(model, s) for s in SUBLAYERS},
    }
    timing = {"build_s": round(t_build, 6)}  # wall clock: apart from the results
    split = _parse_split(args.split) if args.split else None
    if split is None and args.sides is not None:
        raise ConfigError("--sides", "only meaningful with --split")
    sides = tuple(s.strip() for s in (args.sides or "hbm,lpddr").split(","))
    if split is not None:
        t0 = time.perf_counter()
        P = partition_layer(model, batch, seqs, split, phase=phase, dtype=dtype, sides=sides)
        t_part = time.perf_counter() - t0
        per_side = {}
        for k in kernels(P):
            s = per_side.setdefault(k.side, {"kernels": 0, "flops": 0})
            s["kernels"] += 1
            s["flops"] += k.flops
        for side, subs in graph_footprint(P, by_side=True).items():
            per_side.setdefault(side, {"kernels": 0, "flops": 0})["footprint"] = subs
        out["partition"] = {
            "split": split, "sides": list(sides), "per_side": per_side,
            "transfers": len(transfers(P)), "transfer_bytes": transfer_bytes(P),
            "flops": total_flops(P)}
        timing["partition_s"] = round(t_part, 6)
    elif args.side is not None:
        raise ConfigError("--side", "only meaningful with --split")
    _refuse_unused(args)
    if args.export_trace is not None:     # an empty one is refused, not ignored
        fmt = _choice(args.format or "npz", "--format", FORMATS)
        kind = _choice(args.kv_layout or "contiguous", "--kv-layout", ("contiguous", "paged"))
        layout = CONTIGUOUS if kind == "contiguous" else \
            KVLayout.paged(_int(args.block_tokens or 16, "--block-tokens", 1, MAX_TOKENS))
        if split is not None and args.side is None:
            raise ConfigError("--side", f"--export-trace with --split needs --side "
                              f"({' or '.join(sides)})")
        path = _trace_path(given_out(args.export_trace, "--export-trace", "file"), fmt)
        # before the traffic, which may take seconds; never over the model file read
        model_file = None if args.name.lower() in MODELS else args.name
        prepare_file(path, "--export-trace", [("model", model_file)])
        tr = layer_traffic(model, batch, seqs, kv_layout=layout,
                           request_bytes=_int(args.request_bytes or 32, "--request-bytes", 1),
                           dtype=dtype, seed=_int(args.seed or 0, "--seed"), split=split,
                           side=args.side, phase=phase, sides=sides,
                           activations=not args.no_activations)
        with writing_to(path, "--export-trace"), atomic_output_path(path) as tmp:
            save(tr, tmp, fmt)
        out["trace"] = {"file": str(path), "format": fmt, "requests": len(tr),
                        "writes": int(tr.is_write.sum()), "kv_layout": kind}
    if args.timing:
        out["timing"] = timing
    if args.json:
        json.dump(out, sys.stdout, indent=None)
        print()
        return 0
    _print_text(out)
    return 0


#: options of the trace export, and the one each needs besides --export-trace
EXPORT_ONLY = (("format", "--format", None), ("kv_layout", "--kv-layout", None),
               ("request_bytes", "--request-bytes", None),
               ("no_activations", "--no-activations", None),
               ("block_tokens", "--block-tokens", "paged"), ("seed", "--seed", "paged"))


def _refuse_unused(args) -> None:
    """A ConfigError for an option given that this run would not use: the export's
    options without --export-trace, the paged layout's without ``--kv-layout paged``."""
    for attr, flag, layout in EXPORT_ONLY:
        if getattr(args, attr) in (None, False):
            continue
        if args.export_trace is None:
            raise ConfigError(flag, "only meaningful with --export-trace")
        if layout is not None and args.kv_layout != layout:
            raise ConfigError(flag, f"only meaningful with --kv-layout {layout}")


def _attention_kind(model, layer: int) -> str:
    """What layer ``layer`` attends with: ``full`` (the whole context), ``sliding W``
    (the last W tokens), ``mla`` (multi-head latent attention over the whole context)
    or ``none`` (a Mamba layer, which keeps a fixed state)."""
    if not model.is_attention_layer(layer):
        return "none"
    if model.mla:
        return "mla"
    local = model.sliding_window is not None and (model.sliding_window_period == 1
                                                  or model.is_local_layer(layer))
    return f"sliding {model.sliding_window}" if local else "full"


def _layer_kinds(model, G, batch, seqs, phase, dtype) -> list[dict]:
    """Per (mixer, ffn) kind of the stack: its layer count, one layer's parameters (all,
    and those one token uses) and bytes (weights this batch reads, KV cache and Mamba
    recurrent state apart) and FLOPs. ``G`` is layer 0's graph. The
    per-layer fields at the top of the output describe layer 0; totals add the kinds."""
    out = []
    for (mixer, ffn), n in model.layer_groups().items():
        Gk = G if (mixer, ffn) == model.layer_kind(0) else build_layer_graph(
            model, batch, seqs, phase=phase, dtype=dtype,
            layer=next(i for i in range(model.layers) if model.layer_kind(i) == (mixer, ffn)))
        ub, st = unique_bytes(Gk), state_bytes(Gk)
        out.append({"mixer": mixer, "ffn": ffn, "layers": n,
                    "params_per_layer": model.params_of_kind((mixer, ffn)),
                    "active_params_per_layer": model.params_of_kind((mixer, ffn), True),
                    "weight_bytes_per_layer": ub["weight"],
                    "kv_bytes_per_layer": ub["kv"] - st, "ssm_state_bytes_per_layer": st,
                    "activation_bytes_per_layer": ub["activation"],
                    "flops_per_layer": total_flops(Gk)})
    return out


def _trace_path(text: str, fmt: str) -> Path:
    """The file a trace export writes: ``npz`` gains the ``.npz`` suffix it lacks (as
    NumPy would add it)."""
    path = Path(text)
    return path if fmt != "npz" or path.name.endswith(".npz") else \
        path.with_name(path.name + ".npz")


def _fmt_bytes(n: int) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n:,} B ({n / div:.3f} {unit})"
    return f"{n:,} B"


def _short_bytes(n: float) -> str:
    """Bytes in the largest decimal unit that keeps the figure >= 1 (B, kB, MB, GB)."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.3f} {unit}"
    return f"{int(n)} B"


def _short_count(n: float) -> str:
    """A parameter count in B (1e9), M (1e6) or k (1e3)."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3f}{unit}"
    return f"{int(n)}"


#: readable names of the layer kinds' mixers and FFNs
MIXER_NAMES = {"attention": "attention", "local": "local attention", "ssm": "mamba"}
FFN_NAMES = {"dense": "dense FFN", "moe": "MoE FFN"}


def _kind_name(k: dict) -> str:
    return f"{MIXER_NAMES.get(k['mixer'], k['mixer'])} + {FFN_NAMES.get(k['ffn'], k['ffn'])}"


def _print_params(o: dict) -> None:
    """Total and active parameters, and how the layers and embeddings add up to them."""
    print(f"parameters: {o['total_params']:,} ({_short_count(o['total_params'])}) total, "
          f"{o['active_params']:,} ({_short_count(o['active_params'])}) active per token")
    print(f"  = {o['layers']} decoder layers {_short_count(o['decoder_params'])} + "
          f"embeddings and LM head {_short_count(o['embedding_params'])}")


def _print_kinds(o: dict) -> None:
    """One row per layer kind: count, parameters and one layer's bytes and FLOPs."""
    moe = any(k["ffn"] == "moe" for k in o["layer_kinds"])
    note = f"; MoE weights: the experts batch {o['batch']} routes to" if moe else ""
    print(f"layer kinds (one layer of each kind{note}):")
    print(f"  {'kind':<26} {'layers':>6} {'params':>10} {'active':>10} {'weights':>12} "
          f"{'KV':>12} {'ssm state':>12} {'GFLOP':>10}")
    for k in o["layer_kinds"]:
        print(f"  {_kind_name(k):<26} {k['layers']:>6} "
              f"{_short_count(k['params_per_layer']):>10} "
              f"{_short_count(k['active_params_per_layer']):>10} "
              f"{_short_bytes(k['weight_bytes_per_layer']):>12} "
              f"{_short_bytes(k['kv_bytes_per_layer']):>12} "
              f"{_short_bytes(k['ssm_state_bytes_per_layer']):>12} "
              f"{k['flops_per_layer'] / 1e9:>10.3f}")


#: rows of one layer: shown for a stack of one kind (a mixed stack has the kinds table)
PER_LAYER = ("weight_bytes_per_layer", "kv_bytes_per_layer", "ssm_state_bytes_per_layer",
             "activation_bytes_per_layer")


def _print_text(o: dict) -> None:
    kv = (f"latent {o['kv_lora_rank']} + rotary {o['qk_rope_head_dim']}" if o["kv_lora_rank"]
          else f"{o['kv_heads']} KV heads")
    print(f"model: {o['name']}  ({o['layers']} layers, d={o['hidden']}, {o['heads']} heads x "
          f"{o['head_dim']}, {kv}, FFN {o['ffn_dim']} {o['ffn_type']})")
    seq = (str(o["seq_max"]) if o["seq_min"] == o["seq_max"]
           else f"{o['seq_min']}..{o['seq_max']} (sum {o['seq_sum']})")
    print(f"workload: {o['phase']}, batch {o['batch']}, seq {seq}, dtype {o['dtype']}")
    _print_params(o)
    _print_kinds(o)
    one_kind = len(o["layer_kinds"]) == 1
    rows = [("layers", f"{o['layers']}")]
    if one_kind:
        rows += [("params_per_layer", f"{o['params_per_layer']:,}")]
    rows += [("total_params", f"{o['total_params']:,} ({o['total_params'] / 1e9:.3f}B)")]
    rows += [(k, _fmt_bytes(o[k])) for k in (PER_LAYER if one_kind else ())]
    rows += [(k, _fmt_bytes(o[k])) for k in (
        "kv_bytes_per_token_per_layer", "total_weight_bytes",
        "decoder_weight_bytes", "total_kv_bytes", "total_ssm_state_bytes")]
    gf = o["flops_per_layer"] / 1e9
    rows += [("flops_per_layer", f"{o['flops_per_layer']:,} ({gf:.3f} GFLOP)")] \
        if one_kind else []
    rows += [("kernels_per_layer", f"{o['kernels_per_layer']}"),
             ("split_units", ", ".join(f"{k}={v}" for k, v in o["split_units"].items()))]
    for k, v in o.get("timing", {}).items():
        rows.append((f"{k} (wall)", f"{v:.4f}"))
    w = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    first = "" if len(o["layer_kinds"]) == 1 else f", layer 0: {_kind_name(o['layer_kinds'][0])}"
    print(f"footprint per layer (bytes{first}):")
    state = o["ssm_state_bytes_per_layer"] > 0     # a column only where a layer has state
    print(f"  {'sublayer':<10} {'weight':>15} {'kv':>15} {'activation':>13}"
          + (f" {'ssm state':>13}" if state else ""))
    for sub, kinds in o["footprint_per_layer"].items():
        print(f"  {sub:<10} {kinds['weight']:>15,} {kinds['kv']:>15,} {kinds['activation']:>13,}"
              + (f" {kinds['ssm_state']:>13,}" if state else ""))
    if "partition" in o:
        p = o["partition"]
        print(f"partition {p['split']} over {p['sides']}: {p['transfers']} transfers, "
              f"{p['transfer_bytes']:,} B copied, {p['flops']:,} FLOPs")
        for side, s in p["per_side"].items():
            fp = s.get("footprint", {})
            wt = sum(v["weight"] for v in fp.values())
            kv = sum(v["kv"] for v in fp.values())
            print(f"  {side}: {s['kernels']} kernels, {s['flops']:,} FLOPs, weights {wt:,} B, "
                  f"KV {kv:,} B")
    if "trace" in o:
        t = o["trace"]
        print(f"trace: {t['requests']:,} requests ({t['writes']:,} writes, {t['kv_layout']} KV) "
              f"-> {t['file']} ({t['format']})")

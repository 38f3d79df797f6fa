"""``h2m2sim serve``: replay a request trace through a KV allocator and report serving
metrics (throughput, TTFT/TPOT, KV utilization, allocator events, predictor accuracy).

    h2m2sim serve --trace CSV --system PRESET --model NAME --allocator {static,paged,odma}
                  [--predictor NAME] [--max-requests N] [--json] [more options]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys


__all__ = ["register", "run"]
log = logging.getLogger(__name__)

#: Metrics always present in --json output (null where not applicable).
JSON_KEYS = ("kv_utilization", "tokens_per_s", "ttft_p50_s", "tpot_p50_s",
             "requests_completed", "predictor_accuracy", "migration_rate", "energy_j",
             "energy_per_output_token_j", "itl_p50_s", "itl_p99_s", "slo_attainment",
             "goodput_rps", "prefill_tokens_computed", "prefill_tokens_total",
             "prefix_hit_rate", "tokens_per_step", "speculative")


def _kv(items, what):
    import yaml

    from h2m2sim.errors import ConfigError
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--{what}", f"expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


#: The form of --speculative's value.
SPECULATIVE_FORM = "draft=MODEL,k=K,acceptance=A (A in [0, 1), or beta:ALPHA:BETA per request)"


def _speculative(text):
    """``workload.serving.speculative`` from --speculative's ``draft=MODEL,k=K,acceptance=A``
    (``acceptance=beta:ALPHA:BETA`` draws a rate per request); the values are checked
    where the configuration is loaded."""
    import yaml

    from h2m2sim.errors import ConfigError
    out = {}
    for item in str(text).split(","):
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not value or key not in ("draft", "k", "acceptance") or key in out:
            raise ConfigError("--speculative", f"expected {SPECULATIVE_FORM}, got {text!r}")
        out[key] = value
    if "draft" not in out or "k" not in out or "acceptance" not in out:
        raise ConfigError("--speculative", f"expected {SPECULATIVE_FORM}, got {text!r}")
    try:
        out["k"] = yaml.safe_load(out["k"])
    except yaml.YAMLError:
        pass
    kind, _, params = out["acceptance"].partition(":")
    if kind == "beta":
        try:
            a, b = (float(x) for x in params.split(":"))
        except ValueError:
            raise ConfigError("--speculative", f"acceptance=beta:ALPHA:BETA takes two "
                              f"numbers, got {out['acceptance']!r}") from None
        del out["acceptance"]
        out["acceptance_beta"] = [a, b]
    else:
        try:
            out["acceptance"] = float(out["acceptance"])
        except ValueError:
            raise ConfigError("--speculative", f"acceptance must be a number in [0, 1) or "
                              f"beta:ALPHA:BETA, got {out['acceptance']!r}") from None
    return out


def register(subparsers) -> None:
    from h2m2sim.allocators import ALLOCATORS
    from h2m2sim.serving.links import LINKS, TIERS
    from h2m2sim.cli.cmd_run import add_timeline_options
    p = subparsers.add_parser(
        "serve", help="replay a request trace through a KV-cache allocator",
        description="Replay a request trace (CSV with arrival_s, prompt_tokens, output_tokens "
                    "[, prompt, prefix_block_hashes]; a Mooncake-format .jsonl; .gz allowed; "
                    "or a bundled name: azure2023_conv, azure2023_code, alpaca, "
                    "mooncake2025_conv) with continuous batching and report serving "
                    "metrics. Iteration times come from tables built by a point evaluator: "
                    "the cycle-level NPU chip and DRAM model by default, or the analytic "
                    "placeholder, which the output then names.")
    p.add_argument("--trace", required=True, metavar="FILE",
                   help="trace file (.csv, .jsonl, .gz), bundled name, or random:IN:OUT "
                        "(--max-requests requests of IN prompt and OUT output tokens)")
    p.add_argument("--system", default=None, metavar="PRESET",
                   help="system preset or YAML file (e.g. mlu370-x4: four cards, tensor "
                        "parallel); required unless the pools have their own systems "
                        "(--prefill-system, --decode-system)")
    p.add_argument("--cards", type=int, default=None, metavar="N",
                   help="identical cards of the system (its cards: N; tensor parallel "
                        "unless --replicas says otherwise)")
    p.add_argument("--engine", default=None, metavar="NAME",
                   help="serving engine profile: ideal, vllm, vllm-v0, sglang, trtllm, "
                        "distserve or a profile YAML file (host time per step, CUDA "
                        "graphs, all-reduce, defaults; default: vllm on a GPU system, "
                        "ideal on the others)")
    p.add_argument("--model", required=True, metavar="NAME",
                   help="model-zoo name (e.g. deepseek-r1-distill-qwen-7b)")
    p.add_argument("--allocator", required=True, choices=sorted(ALLOCATORS),
                   help="KV-cache allocator")
    p.add_argument("--predictor", metavar="NAME", default=None,
                   help="length predictor: oracle, noisy, s3, learned (default: learned "
                        "when the allocator uses predictions)")
    p.add_argument("--max-requests", type=int, metavar="N", default=None,
                   help="replay only the first N requests")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    p.add_argument("--rate", type=float, metavar="REQ_PER_S", default=None,
                   help="replace arrivals with seeded Poisson arrivals at this rate")
    p.add_argument("--max-concurrency", type=int, metavar="C", default=None,
                   help="closed loop: C clients, each sending its next request when its "
                        "last one finished; latencies count from the send (default: open "
                        "loop, every request sent at its arrival)")
    p.add_argument("--seed", type=int, default=0, help="seed (arrivals, predictors)")
    p.add_argument("--max-batch", type=int, default=None, help="most running requests")
    p.add_argument("--max-context", type=int, default=None, metavar="TOKENS",
                   help="longest request (prompt + output) accepted (default: the model's "
                        "context)")
    p.add_argument("--history-fraction", type=float, default=None, metavar="F",
                   help="share of the trace held out as history (predictor training, "
                        "ODMA's first buckets), not replayed (default: 0.5 when the "
                        "allocator or predictor learns from it, else 0)")
    p.add_argument("--replicas", type=int, default=None, metavar="N",
                   help="copies of the model, each with its own KV pool (default: one "
                        "over all the system's cards)")
    p.add_argument("--tensor-parallel", type=int, default=None, metavar="K",
                   help="cards per replica (replicas x K = the system's cards)")
    p.add_argument("--router", choices=("round-robin", "least-kv"), default=None,
                   help="how requests are given to replicas (default least-kv)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="TOKENS",
                   help="cap on generated tokens per request")
    p.add_argument("--scheduler", choices=("fcfs", "bucket", "shortest"), default=None,
                   help="fcfs, bucket (ODMA's bucket-aware co-batching) or shortest "
                        "(shortest predicted output first)")
    p.add_argument("--preemption", choices=("recompute", "swap"), default=None,
                   help="what happens to a preempted request's KV")
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="cache shared prompt prefixes (the trace's prefix_block_hashes; "
                        "default: as the engine does)")
    p.add_argument("--prefix-block-tokens", type=int, default=None, metavar="TOKENS",
                   help="prompt tokens per hashed block of the trace (default 512)")
    p.add_argument("--preemption-victim", choices=("latest-arrived", "most-memory"),
                   default=None, help="which running request is preempted (default "
                                      "latest-arrived)")
    p.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=None, help="chunked prefill: decodes and prefill chunks share "
                                      "iterations (default: as the engine does)")
    p.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="TOKENS",
                   help="token budget of a chunked-prefill iteration (default: from the "
                        "model's prefill and decode costs)")
    p.add_argument("--slo-ttft", type=float, default=None, metavar="S",
                   help="TTFT SLO in seconds (slo_attainment, goodput_rps)")
    p.add_argument("--slo-tpot", type=float, default=None, metavar="S",
                   help="TPOT SLO in seconds (slo_attainment, goodput_rps)")
    p.add_argument("--speculative", default=None, metavar="SPEC",
                   help="speculative decoding with a draft model: draft=MODEL,k=K,"
                        "acceptance=A (K tokens drafted per step, each accepted with "
                        "probability A in [0, 1); acceptance=beta:ALPHA:BETA draws A per "
                        "request with --seed)")
    p.add_argument("--disaggregate", default=None, metavar="P:D",
                   help="prefill on P of the system's cards and decode on the other D, the "
                        "KV crossing --kv-link (default: colocated)")
    p.add_argument("--pool-replicas", default=None, metavar="RP:RD",
                   help="disaggregated: replicas of the model in the prefill and the decode "
                        "pool (default 1:1), routed by --router")
    p.add_argument("--kv-streaming", action="store_true",
                   help="disaggregated: stream the KV layer by layer during the prefill "
                        "(Splitwise) instead of after it (DistServe)")
    p.add_argument("--prefill-system", default=None, metavar="PRESET",
                   help="disaggregated on two systems: prefill on this one (all its cards), "
                        "decode on --decode-system")
    p.add_argument("--decode-system", default=None, metavar="PRESET",
                   help="the decode pool's system (with --prefill-system)")
    p.add_argument("--kv-link", default=None, metavar="NAME",
                   help=f"link of a disaggregated run's KV: {', '.join(LINKS.names())} "
                        "(default nvlink4)")
    p.add_argument("--kv-offload", default=None, metavar="TIER",
                   help=f"a second KV tier under the prefix cache: {', '.join(TIERS.names())} "
                        "(needs --kv-offload-capacity)")
    p.add_argument("--kv-offload-capacity", default=None, metavar="SIZE",
                   help="KV capacity of the --kv-offload tier (e.g. '512 GB')")
    p.add_argument("--kv-offload-policy", default=None, choices=("lru", "prefix-aware"),
                   help="which blocks leave the full tier first (default lru)")
    p.add_argument("--kv-offload-running", action="store_true",
                   help="with --kv-offload: when device KV runs out, a running request's "
                        "KV goes cold to the tier and is read back over its link at every "
                        "step, instead of the request being preempted")
    p.add_argument("--kv-dtype", default=None, metavar="DTYPE",
                   help="KV cache data type: int4, fp8, int8, fp16, bf16, fp32 (default: the "
                        "model's)")
    p.add_argument("--weight-dtype", default=None, metavar="DTYPE",
                   help="data type the weights are stored in, as --kv-dtype (default: the "
                        "model's)")
    p.add_argument("--kv-capacity", default=None, metavar="SIZE",
                   help="KV memory of all devices together (e.g. '40 GB'); default: "
                        "memory fraction x device memory - weights")
    p.add_argument("--allocator-param", action="append", metavar="KEY=VALUE",
                   help="allocator option, e.g. block_tokens=32, gamma=0.2 (repeatable)")
    p.add_argument("--predictor-param", action="append", metavar="KEY=VALUE",
                   help="predictor option, e.g. accuracy=0.9 (repeatable)")
    p.add_argument("--evaluator", default="cycle", metavar="NAME",
                   help="iteration-time evaluator: cycle (the NPU chip model and DRAM "
                        "engine, default) or analytic (a labelled placeholder); on a system "
                        "of several NPU sides (h2m2) each decode step is mapped over them "
                        "by H2M2's greedy mapper, simulated (cycle) or by its roofline "
                        "(analytic)")
    p.add_argument("--no-cache", action="store_true", help="do not reuse or store tables")
    p.add_argument("--out", metavar="DIR",
                   help="also write DIR/result.json (metrics, version, git revision), the "
                        "run configuration DIR/config.yaml (h2m2sim run of it gives the same "
                        "metrics) and DIR/timing.json; DIR must not hold a result already")
    p.add_argument("--overwrite", action="store_true",
                   help="with --out: replace the result DIR already holds")
    add_timeline_options(p, "the run (each request queued, prefilling and decoding; "
                            "running and waiting requests and reserved KV over time)")
    p.set_defaults(func=run)


#: The run configuration's simulation.fidelity that each --evaluator stands for.
FIDELITY = {"cycle": "sampled", "analytic": "estimate"}


def _serving_data(args) -> dict:
    """``workload.serving`` of the run configuration the flags describe."""
    data = {"trace": args.trace, "predictor": args.predictor, "engine": args.engine,
            "predictor_params": _kv(args.predictor_param, "predictor-param")}
    pools = "cards of the prefill and the decode pool"
    for key, value in (("max_requests", args.max_requests), ("arrival_rate", args.rate),
                       ("max_concurrency", args.max_concurrency),
                       ("max_batch", args.max_batch), ("max_context_tokens", args.max_context),
                       ("max_new_tokens", args.max_new_tokens), ("scheduler", args.scheduler),
                       ("preemption", args.preemption),
                       ("history_fraction", args.history_fraction),
                       ("prefix_caching", args.prefix_caching),
                       ("prefix_block_tokens", args.prefix_block_tokens),
                       ("preemption_victim", args.preemption_victim),
                       ("chunked_prefill", args.chunked_prefill),
                       ("max_num_batched_tokens", args.max_num_batched_tokens),
                       ("slo_ttft_s", args.slo_ttft), ("slo_tpot_s", args.slo_tpot),
                       ("kv_dtype", args.kv_dtype), ("kv_link", args.kv_link),
                       ("kv_streaming", args.kv_streaming or None),
                       ("prefill_system", args.prefill_system),
                       ("decode_system", args.decode_system),
                       ("kv_offload", args.kv_offload),
                       ("kv_offload_policy", args.kv_offload_policy),
                       ("kv_offload_running", args.kv_offload_running or None),
                       ("kv_capacity_bytes", _size(args.kv_capacity, "--kv-capacity")),
                       ("kv_offload_capacity_bytes",
                        _size(args.kv_offload_capacity, "--kv-offload-capacity")),
                       ("disaggregate", _pair(args.disaggregate, "--disaggregate", pools)),
                       ("pool_replicas", _pair(args.pool_replicas, "--pool-replicas",
                                               "replicas of the prefill and the decode "
                                               "pool")),
                       ("speculative", None if args.speculative is None
                        else _speculative(args.speculative))):
        if value is not None:
            data[key] = value
    if args.kv_offload is not None and args.kv_offload_capacity is None:
        from h2m2sim.errors import ConfigError
        raise ConfigError("--kv-offload-capacity", f"is needed with --kv-offload "
                          f"{args.kv_offload} (the tier's size, e.g. 1TB)")
    dep = {k: v for k, v in (("replicas", args.replicas),
                             ("tensor_parallel", args.tensor_parallel),
                             ("router", args.router)) if v is not None}
    if dep:
        data["deployment"] = dep
    return data


def _size(text: str | None, flag: str) -> int | None:
    """Bytes from a size flag (``'40 GB'``), or None when it is not given."""
    from dram_models.schema import parse_size
    from h2m2sim.errors import ConfigError
    if text is None:
        return None
    try:
        n = parse_size(text)
    except ValueError as err:
        raise ConfigError(flag, str(err) + _unit_hint(text, flag)) from None
    if n < MIN_BARE_BYTES and _is_bare_number(text):
        # a capacity of a few bytes is a forgotten unit, not a request
        raise ConfigError(flag, f"{text} is {n} bytes: give a unit, e.g. {flag} '{text} GB'")
    return n


#: a capacity flag given as a bare number below this many bytes (1 MB) lacks its unit
MIN_BARE_BYTES = 10**6


def _is_bare_number(text: str) -> bool:
    """Whether ``text`` is a number without a unit ('20', '1.5')."""
    try:
        float(str(text).strip())
    except ValueError:
        return False
    return True


def _unit_hint(text: str, flag: str) -> str:
    """A hint to add a unit when ``text`` is a bare number, else ''."""
    return f"; give a unit, e.g. {flag} '{text} GB'" if _is_bare_number(text) else ""


def _pair(text: str | None, flag: str, what: str) -> list[int] | None:
    """Two whole numbers from ``A:B`` (``what`` they are, for the error), or None when
    the flag is not given."""
    from h2m2sim.errors import ConfigError
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(flag, f"expected A:B ({what}), got {text!r}")
    return [int(p) for p in parts]


def _system(args) -> str:
    """The run's system: ``--system``, or with pools on two systems the prefill pool's
    (the run configuration needs one; the pools run on their own)."""
    from h2m2sim.errors import ConfigError
    if args.system is None:
        if args.prefill_system is None:
            raise ConfigError("--system", "is required (a system preset or YAML file), "
                              "unless --prefill-system and --decode-system are given")
        return args.prefill_system
    if args.prefill_system is not None and args.system != args.prefill_system:
        raise ConfigError("--system", f"{args.system} is not used: the pools run on "
                          f"--prefill-system ({args.prefill_system}) and --decode-system "
                          f"({args.decode_system}); leave --system out")
    return args.system


def run_config(args) -> dict:
    """The run configuration (a raw mapping) the flags describe: ``h2m2sim run`` of it
    gives the same metrics, and ``--out`` stores it as config.yaml."""
    from h2m2sim.errors import ConfigError
    if args.evaluator not in FIDELITY:
        raise ConfigError("--evaluator", f"unknown evaluator {args.evaluator!r}; choose "
                          f"from {', '.join(FIDELITY)}")
    model = args.model if args.weight_dtype is None else \
        {"base": args.model, "weight_dtype": args.weight_dtype}
    system = _system(args)
    if args.cards is not None and args.prefill_system is not None:
        raise ConfigError("--cards", "is not used: the pools run on all the cards of "
                          "--prefill-system and --decode-system; set cards in their files")
    if args.cards is not None:
        system = {"preset": system, "cards": args.cards}
    return {"system": system, "model": model,
            "policy": {"allocator": args.allocator,
                       "allocator_params": _kv(args.allocator_param, "allocator-param")},
            "workload": {"serving": _serving_data(args)},
            "simulation": {"fidelity": FIDELITY[args.evaluator], "seed": args.seed,
                           "cache": not args.no_cache}}


def run(args) -> int:
    where = args.system if args.prefill_system is None else \
        f"{args.prefill_system} (prefill) + {args.decode_system} (decode)"
    log.info("h2m2sim serve: trace %s, model %s on %s, allocator %s", args.trace, args.model,
             where, args.allocator)
    from h2m2sim import api
    from h2m2sim.cache import plain
    from h2m2sim.cli.cmd_run import say_timeline_written, timeline_options
    res = api.run(run_config(args), out=args.out, overwrite=args.overwrite,
                  **timeline_options(args))
    say_timeline_written(args)
    from h2m2sim.store import json_safe     # NaN/inf -> null, NumPy -> Python
    m = json_safe(res.metrics)
    for key in JSON_KEYS:
        m.setdefault(key, None)
    notes = list(m.get("predictor_notes") or [])
    if m.get("arrivals") and m["arrivals"] != "from trace":
        notes.append(f"arrivals: {m['arrivals']}")
    if not m.get("cycle_level") or len(res.config.system.sides) > 1:   # a placeholder,
        notes.append(f"iteration times: {m['iteration_time_model']}")   # or one side of several
    notes += _draft_notes(m)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:   # the metrics at the top level, beside where they came from
        record = res.result_record()
        print(json.dumps({**m, "config_hash": record["config_hash"],
                          "h2m2sim_version": record["h2m2sim_version"],
                          "git_revision": record["git_revision"],
                          "config": json_safe(plain(res.config))}, sort_keys=True))
        _say_stored(args)
        return 0
    _print_table(m)
    _say_stored(args)
    return 0


def _say_stored(args) -> None:
    """Where ``--out`` stored the run, on stderr (information, not a result)."""
    if args.out:
        sys.stdout.flush()
        print(f"wrote {args.out}/result.json, config.yaml (rerun with h2m2sim run) and "
              "timing.json", file=sys.stderr)


def _fmt(v, unit=""):
    """A number to four significant digits with ``unit``; '-' for None. Times and
    energies go through :mod:`h2m2sim.cli.fmt`, which picks their unit."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def _speculative_rows(m) -> list[tuple[str, str]]:
    """Measured tokens per verify step against the formula's, and the draft's share;
    no row when not speculating."""
    from h2m2sim.cli.fmt import seconds
    sp = m.get("speculative")
    if not sp:
        return []
    return [("speculative: tokens/step",
             f"{_fmt(m['tokens_per_step'])} (expected {_fmt(sp['expected_tokens_per_step'])}; "
             f"draft {sp['draft']}, k={sp['k']}, draft time {seconds(sp['draft_time_s'])})")]


def _draft_notes(m) -> list[str]:
    """Where a draft model's memory came from: the target's KV capacity shrinks by the
    draft's weights and by its KV cache (which holds the same tokens); none otherwise."""
    sp = m.get("speculative")
    if not sp or m.get("kv_capacity_bytes") is None:
        return []
    gb = 1e9
    return [f"speculative decoding: the target's KV cache gets "
            f"{m['kv_capacity_bytes'] / gb:.4g} GB; the draft {sp['draft']} takes the rest: "
            f"its weights ({sp['draft_weight_bytes'] / gb:.4g} GB) and its KV cache "
            f"({sp['draft_kv_capacity_bytes'] / gb:.4g} GB, as many tokens at "
            f"{sp['draft_kv_bytes_per_token']:,} B each)"]


def _itl(m) -> str:
    """ITL p50 / p99; a zero gap under speculation is tokens one verify step emits."""
    from h2m2sim.cli.fmt import seconds
    p50, p99 = m["itl_p50_s"], m["itl_p99_s"]
    same = " (tokens of one verify step arrive together)" if m.get("speculative") and \
        p50 == 0 else ""
    return f"{seconds(p50)} / {seconds(p99)}{same}"


def _disaggregated_rows(m) -> list[tuple[str, str]]:
    """The pools and the KV transfers of a disaggregated run; no row otherwise."""
    from h2m2sim.cli.fmt import joules, seconds
    pools = m.get("disaggregate")
    if not pools:
        return []
    return [("prefill / decode pool", f"{_cards(pools[0], m['prefill_system'])} / "
                                      f"{_cards(pools[1], m['decode_system'])}, KV over "
                                      f"{m['kv_link']}"),
            ("KV transfer p50 / p99", f"{seconds(m['kv_transfer_s_p50'])} / "
                                      f"{seconds(m['kv_transfer_s_p99'])}, "
                                      f"{_fmt(m['kv_transfer_bytes'] / 1e9, ' GB')}, "
                                      f"{joules(m['kv_transfer_energy_j'])}")]


def _cards(n: int, system: str) -> str:
    """'2 cards of mlu370-x4'."""
    return f"{n} card{'' if n == 1 else 's'} of {system}"


def _tier_rows(m) -> list[tuple[str, str]]:
    """Where the prefix hits came from and what crossed to the KV tier; no row without
    one."""
    from h2m2sim.cli.fmt import joules
    tier = m.get("kv_offload")
    if not tier:
        return []
    by = m.get("prefix_hit_rate_by_tier") or {}
    rates = ", ".join(f"{k} {_fmt(v)}" for k, v in by.items())
    return [("prefix hit rate by tier", rates),
            (f"KV tier {tier}", f"{_fmt(m['offload_bytes'] / 1e9, ' GB')} demoted, "
                                f"{_fmt(m['promoted_bytes'] / 1e9, ' GB')} promoted, "
                                f"{joules(m['offload_energy_j'])}")]


def _print_table(m) -> None:
    from h2m2sim.cli.fmt import joules, seconds
    rows = [
        ("trace / model / system", f"{m['trace']} / {m['model']} / {m['system']}"),
        ("allocator (layout)", f"{m['allocator']} ({m['kv_layout']}), scheduler "
                               f"{m.get('scheduler') or '-'}, predictor {m.get('predictor') or '-'}"),
        ("requests completed", f"{m['requests_completed']} of {m['requests']} replayed "
                               f"({m['requests_rejected']} rejected, {m['requests_cut']} cut; "
                               f"{m.get('history_requests') or 0} held out as history)"),
        ("output tokens/s", _fmt(m["tokens_per_s"])),
        ("TTFT p50 / p90 / p99", " / ".join(seconds(m[f"ttft_{q}_s"]) for q in ("p50", "p90", "p99"))),
        ("TPOT p50 / p90 / p99", " / ".join(seconds(m[f"tpot_{q}_s"]) for q in ("p50", "p90", "p99"))),
        ("ITL p50 / p99", _itl(m)),
        ("SLO attainment / goodput", f"{_fmt(m['slo_attainment'])} / "
                                     f"{_fmt(m['goodput_rps'], ' req/s')}"),
        ("queueing delay p50 / p99", f"{seconds(m['queue_delay_p50_s'])} / "
                                     f"{seconds(m['queue_delay_p99_s'])}"),
        ("KV utilization", _fmt(m["kv_utilization"])),
        ("reserved KV peak / mean", f"{_fmt(m['peak_reserved_bytes'] / 1e9, ' GB')} / "
                                    f"{_fmt((m['mean_reserved_bytes'] or 0) / 1e9, ' GB')} of "
                                    f"{_fmt(m['kv_capacity_bytes'] / 1e9, ' GB')}"),
        ("mean decode batch", _fmt(m["mean_decode_batch"])),
        *_speculative_rows(m),
        *_disaggregated_rows(m),
        ("preemptions", _fmt(m["preemptions"])),
        ("prefill tokens computed / total", f"{m['prefill_tokens_computed']} / "
                                            f"{m['prefill_tokens_total']} (prefix hit rate "
                                            f"{_fmt(m['prefix_hit_rate'])})"),
        *_tier_rows(m),
        ("migrations (rate)", f"{m['migrations']} ({_fmt(m['migration_rate'])})"),
        ("predictor accuracy", _fmt(m["predictor_accuracy"])),
        ("energy total / per output token", f"{joules(m['energy_j'])} / "
                                            f"{joules(m['energy_per_output_token_j'])}"),
        ("iteration times", m["iteration_time_model"]),
    ]
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

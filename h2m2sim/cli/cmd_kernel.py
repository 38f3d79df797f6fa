"""``h2m2sim kernel``: simulate one kernel on one side of a system (NPU + DMA + DRAM in
one closed loop) and report time, bandwidth, stall breakdown and TLB statistics."""
from __future__ import annotations

import json

from dram_models.errors import ConfigError
from dram_models.schema import parse_size

from .cmd_model import _choice, _int

HELP = "simulate one kernel (gemm, gemv, attention, ...) on one side of a system"

#: keys printed with --json (besides the full DRAM statistics under "dram")
KEYS = ("op", "side", "cycles", "time_ns", "flops", "bytes", "achieved_gbps", "peak_gbps",
        "compute_bound", "stall_compute_ns", "stall_memory_ns", "stall_tlb_ns", "tlb_hits",
        "tlb_misses", "compute_ns", "unit", "tiles", "fidelity", "simulated_fraction")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "kernel", help=HELP,
        description="Simulate one kernel on one memory side: on an NPU side, tiles on the "
        "chip's cores, DMA requests through the MMU/TLB into the DRAM model, compute gated "
        "by data and prefetch gated by compute; on a GPU side (a system like h200), the "
        "GPU kernel model over the DRAM engine's measured bandwidth. gemm/gemv: [m x k] @ [k x n] with a k x n weight; "
        "attention: score, softmax and value of --batch KV heads, m queries per head, "
        "k = head_dim, n = sequence length.")
    p.add_argument("--system", required=True, help="system preset name (see 'h2m2sim "
                   "presets systems') or a YAML file")
    p.add_argument("--side", required=True, help="memory side, e.g. hbm or lpddr")
    p.add_argument("--op", required=True, help="gemm | gemv | attention (also attn_score, "
                   "attn_value, softmax, layernorm, residual, activation, elementwise)")
    p.add_argument("--m", required=True, help="rows of the input (gemv: 1)")
    p.add_argument("--k", required=True, help="reduction dimension (attention: head_dim)")
    p.add_argument("--n", required=True, help="output columns (attention: sequence length)")
    p.add_argument("--batch", default="1", help="independent products (attention: KV heads)")
    p.add_argument("--dtype", default=None, help="int8 | fp16 | bf16 | fp32 (default: int8 "
                   "on an NPU side, bf16 on a GPU side)")
    p.add_argument("--page-size", default=None, help="page size in bytes (4096 .. 1 GiB; "
                   "accepts 4KiB, 2MiB); default: the system's")
    p.add_argument("--placement", default="contiguous",
                   help="contiguous (default) | scattered physical frames (NPU sides)")
    p.add_argument("--translate", default=None, help="mmu | ideal (default: the system's "
                   "mmu.enabled; NPU sides)")
    p.add_argument("--unit", default="auto", help="auto | mm | mv (matrix unit to use; NPU "
                   "sides)")
    p.add_argument("--fidelity", default="cycle", help="cycle (default) | sampled (NPU "
                   "sides)")
    p.add_argument("--seed", default=None, help="seed of the scattered placement "
                   "(default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


#: NPU-only options and their defaults: a GPU side refuses them when changed
NPU_ONLY = (("page_size", "--page-size", None), ("placement", "--placement", "contiguous"),
            ("translate", "--translate", None), ("unit", "--unit", "auto"),
            ("fidelity", "--fidelity", "cycle"), ("seed", "--seed", None))

#: keys printed with --json on a GPU side
GPU_KEYS = ("op", "side", "dtype", "time_ns", "flops", "bytes", "achieved_gbps",
            "peak_gbps", "compute_bound", "compute_ns", "memory_ns", "fixed_ns", "model")


def run(args) -> int:
    from h2m2sim.npu.simulate import OPS
    from h2m2sim.system.config import resolve_system
    op = _choice(args.op, "--op", OPS)
    m, k, n = _int(args.m, "--m", 1), _int(args.k, "--k", 1), _int(args.n, "--n", 1)
    batch = _int(args.batch, "--batch", 1)
    system = resolve_system(args.system, "--system")
    side = system.side(args.side, "--side")
    if side.gpu is not None:
        return _run_gpu(args, system, side, op, m, k, n, batch)
    return _run_npu(args, system, op, m, k, n, batch)


def _run_gpu(args, system, side, op, m, k, n, batch) -> int:
    """Price the kernel with the GPU kernel model (the side has a GPU, not an NPU chip)."""
    from h2m2sim.compute.gpu import gpu_kernel
    for attr, flag, default in NPU_ONLY:
        if getattr(args, attr) != default:
            raise ConfigError(flag, f"applies to NPU sides; side {side.name!r} of "
                              f"{system.name!r} is a GPU ({side.gpu.name})")
    if op == "gemv" and m != 1:
        raise ConfigError("--m", f"a gemv has m = 1, got {m}; use --op gemm")
    dtype = args.dtype or "bf16"       # the model zoo's usual weights on a GPU
    g = gpu_kernel(system, op, m, k, n, batch=batch, dtype=dtype, key="--dtype")
    if args.json:
        out = {"op": op, "side": side.name, "dtype": dtype, "model": g["label"], **g}
        print(json.dumps({"system": system.name, **{key: out[key] for key in GPU_KEYS}},
                         indent=2, default=float))
        return 0
    bound = "compute-bound" if g["compute_bound"] else "memory-bound"
    print(f"{op} m={m} k={k} n={n} batch={batch} {dtype} on {system.name}/{side.name}")
    print(f"  model       {g['label']}")
    print(f"  time        {g['time_ns']:,.1f} ns  {bound}")
    print(f"  flops       {g['flops']:,}  ({g['flops'] / g['time_ns'] / 1e3:,.2f} TFLOP/s)")
    print(f"  bytes       {g['bytes']:,}  ({g['achieved_gbps']:,.1f} GB/s of "
          f"{g['peak_gbps']:,.1f} peak)")
    print(f"  parts       fixed {g['fixed_ns']:,.1f} ns (launch, ramp, last wave) + max("
          f"compute {g['compute_ns']:,.1f} ns, memory {g['memory_ns']:,.1f} ns)")
    return 0


def _run_npu(args, system, op, m, k, n, batch) -> int:
    """Simulate the kernel on the side's NPU chip, cycle by cycle."""
    from h2m2sim.npu.simulate import FIDELITIES, simulate_kernel
    fidelity = _choice(args.fidelity, "--fidelity", FIDELITIES)
    placement = _choice(args.placement, "--placement", ("contiguous", "scattered"))
    if args.seed is not None and placement != "scattered":
        raise ConfigError("--seed", "only meaningful with --placement scattered")
    seed = _int(args.seed or 0, "--seed", 0)
    unit = _choice(args.unit, "--unit", ("auto", "mm", "mv"))
    translate = None if args.translate is None else \
        _choice(args.translate, "--translate", ("mmu", "ideal"))
    page = None
    if args.page_size is not None:
        try:
            page = parse_size(args.page_size)
        except ValueError as err:
            raise ConfigError("--page-size", str(err)) from None
        from h2m2sim.system.mmu import check_page_size
        check_page_size(page, "--page-size")
    dtype = args.dtype or "int8"
    r = simulate_kernel(system, args.side, op, m, k, n, dtype=dtype, page_size=page,
                        batch=batch, fidelity=fidelity, placement=placement, seed=seed,
                        translate=translate, unit=unit, key="--dtype")
    d = r.as_dict()
    chip = system.side(args.side).chip
    label = f"NPU chip model ({chip.cores} cores at {chip.freq_ghz:g} GHz, cycle-level)"
    if args.json:
        out = {key: d[key] for key in KEYS}
        out["system"] = system.name
        out["model"] = label
        out["dram"] = d["dram"]
        if r.kernels:
            out["kernels"] = d["kernels"]
        print(json.dumps(out, indent=2, default=float))
        return 0
    bound = "compute-bound" if r.compute_bound else "memory-bound"
    print(f"{op} m={m} k={k} n={n} batch={batch} {dtype} on {system.name}/{r.side} "
          f"({r.unit}, {r.tiles} tiles, {r.fidelity})")
    print(f"  model       {label}")
    print(f"  time        {r.time_ns:,.1f} ns  ({r.cycles:,} cycles)  {bound}")
    print(f"  flops       {r.flops:,}  ({r.flops / r.time_ns / 1e3:,.2f} TOPS)")
    print(f"  bytes       {r.bytes:,}  ({r.achieved_gbps:,.1f} GB/s of {r.peak_gbps:,.1f} "
          f"peak)")
    print(f"  compute     {r.compute_ns:,.1f} ns;  stalls: memory {r.stall_memory_ns:,.1f} ns, "
          f"compute {r.stall_compute_ns:,.1f} ns, TLB {r.stall_tlb_ns:,.1f} ns")
    print(f"  TLB         {r.tlb_hits:,} hits, {r.tlb_misses:,} misses")
    for kd in r.kernels:
        print(f"    {kd['name']:<12} {kd['time_ns']:>14,.1f} ns  {kd['bytes']:>14,} B")
    return 0

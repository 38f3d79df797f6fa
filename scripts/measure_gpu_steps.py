"""Measure LLM kernel and step times on the local CUDA GPU (PyTorch), for checking and
calibrating a GPU system preset.

    python scripts/measure_gpu_steps.py --out my-gpu-steps.json --models llama2-7b

Sections of the JSON it writes:

* ``launch``: per-kernel cost of a tiny kernel, launched eagerly and replayed from a CUDA
  graph (the floor of any kernel of a step);
* ``gemm``: ``x[M, K] @ W[K, N]`` in the model dtype for the projection shapes of each
  model, M = 1..8192 tokens (rotating over weight copies larger than the L2 cache);
* ``attention``: decode attention (one query per request against S cached tokens) and
  prefill attention (causal, S queries), PyTorch's scaled_dot_product_attention, over
  per-layer KV copies so that nothing stays in L2; prefill attention both launched
  eagerly (``us``, with the host's dispatch) and replayed from a CUDA graph
  (``graph_us``, the kernel alone);
* ``steps``: whole decode and prefill steps of a dense decoder (RMSNorm, fused QKV and
  gate/up projections, SwiGLU, SDPA, residuals, final norm and LM head; random weights of
  the model's shapes from ``workloads/models``), decode replayed from a CUDA graph (as
  serving engines do) and also launched eagerly.

Every time is the median of ``--repeat`` timed runs after a warm-up (CUDA events). The
model is a plain PyTorch implementation, not a serving engine: it has more kernels per
layer than an engine with fused norms and rotary embedding, and none of its scheduling,
sampling or paging. Needs PyTorch with CUDA and PyYAML.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from measure_gpu_memory import write_atomic  # noqa: E402  (a sibling script: no deps)

DEVICE = "cuda"
M_LIST = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DECODE_POINTS = ((1, 512), (1, 2048), (1, 8192), (4, 2048), (16, 512), (16, 2048),
                 (16, 8192), (32, 2048), (64, 512), (64, 2048), (128, 512), (128, 1024))
PREFILL_POINTS = ((1, 512), (1, 2048), (1, 8192), (4, 512), (4, 2048), (8, 1024),
                  (16, 512))


def load_shape(name: str) -> dict:
    import yaml
    m = yaml.safe_load((ROOT / "workloads" / "models" / f"{name}.yaml").read_text())
    return {"name": name, "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"],
            "kv_heads": m.get("kv_heads", m["heads"]), "head_dim": m["head_dim"],
            "ffn": m["ffn_dim"], "vocab": m["vocab"]}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


class Timer:
    def __init__(self, torch, repeat: int):
        self.torch = torch
        self.repeat = repeat

    def ms(self, fn, warm: int = 2) -> float:
        t = self.torch
        for _ in range(warm):
            fn()
        t.cuda.synchronize()
        out = []
        for _ in range(self.repeat):
            a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        return median(out)

    def graph(self, fn):
        """A CUDA graph of ``fn`` (warmed up on a side stream first) and its replay."""
        t = self.torch
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            for _ in range(2):
                fn()
        t.cuda.current_stream().wait_stream(s)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            fn()
        return g.replay


def measure_launch(torch, timer) -> dict:
    x = torch.zeros(1, device=DEVICE)
    n = 200

    def many():
        for _ in range(n):
            x.add_(1.0)
    eager = timer.ms(many) / n * 1e3
    replay = timer.graph(many)
    graph = timer.ms(replay) / n * 1e3
    return {"eager_us_per_kernel": eager, "graph_us_per_kernel": graph, "kernels": n}


def measure_gemm(torch, timer, shape: dict, dtype, log) -> list[dict]:
    h, f = shape["hidden"], shape["ffn"]
    qkv = (shape["heads"] + 2 * shape["kv_heads"]) * shape["head_dim"]
    projs = {"qkv": (h, qkv), "out": (shape["heads"] * shape["head_dim"], h),
             "gate_up": (h, 2 * f), "down": (f, h)}
    rows = []
    for name, (k, n) in projs.items():
        copies = max(2, -(-3 * (64 << 20) // (k * n * 2)))
        ws = [torch.randn(n, k, device=DEVICE, dtype=dtype) * 0.02 for _ in range(copies)]
        for m in M_LIST:
            x = torch.randn(m, k, device=DEVICE, dtype=dtype)

            def run():
                for w in ws:
                    torch.nn.functional.linear(x, w)
            ms = timer.ms(timer.graph(run)) / copies
            flops = 2.0 * m * k * n
            nbytes = 2.0 * (k * n + m * k + m * n)
            rows.append({"model": shape["name"], "proj": name, "M": m, "K": k, "N": n,
                         "us": ms * 1e3, "tflops": flops / ms / 1e9,
                         "gbps": nbytes / ms / 1e6})
        log(f"gemm {shape['name']} {name} K={k} N={n}: " + ", ".join(
            f"M={r['M']} {r['us']:.1f}us" for r in rows[-len(M_LIST):][::3]))
        del ws
    return rows


def measure_sustained(torch, timer, shape: dict, dtype, log, seconds: float = 1.0) -> list:
    """Compute-bound projections (M = 2048 and 8192 rows) run back to back for about
    ``seconds`` each: TFLOP/s and the SM clock (NVML) under sustained tensor-core load,
    the regime of a long prefill."""
    import time
    h, f = shape["hidden"], shape["ffn"]
    qkv = (shape["heads"] + 2 * shape["kv_heads"]) * shape["head_dim"]
    rows = []
    for name, (k, n) in {"qkv": (h, qkv), "gate_up": (h, 2 * f), "down": (f, h)}.items():
        w = torch.randn(n, k, device=DEVICE, dtype=dtype) * 0.02
        for m in (2048, 8192):
            x = torch.randn(m, k, device=DEVICE, dtype=dtype)
            replay = timer.graph(lambda: torch.nn.functional.linear(x, w))
            clock = sm_clock_during(torch, replay, seconds)      # warms the card up
            torch.cuda.synchronize()
            t0, reps = time.time(), 0
            while time.time() - t0 < seconds:
                replay()
                reps += 1
            torch.cuda.synchronize()
            us = (time.time() - t0) / reps * 1e6
            rows.append({"model": shape["name"], "proj": name, "M": m, "K": k, "N": n,
                         "us": us, "tflops": 2.0 * m * k * n / us / 1e6,
                         "sm_clock_mhz": clock})
            log(f"sustained {name} M={m}: {us:.0f} us, {rows[-1]['tflops']:.0f} TFLOP/s, "
                f"clock {clock}")
    return rows


def attention_fn(torch, q, k, v, causal: bool, gqa: bool):
    F = torch.nn.functional
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def measure_attention(torch, timer, shape: dict, dtype, log) -> list[dict]:
    H, Hk, D = shape["heads"], shape["kv_heads"], shape["head_dim"]
    gqa = Hk != H
    rows = []
    for b, s in DECODE_POINTS:
        kv_bytes = 2 * b * Hk * s * D * 2
        copies = max(1, min(8, -(-(256 << 20) // kv_bytes)))
        ks = [torch.randn(b, Hk, s, D, device=DEVICE, dtype=dtype) for _ in range(copies)]
        vs = [torch.randn(b, Hk, s, D, device=DEVICE, dtype=dtype) for _ in range(copies)]
        q = torch.randn(b, H, 1, D, device=DEVICE, dtype=dtype)

        def run():
            for k, v in zip(ks, vs):
                attention_fn(torch, q, k, v, False, gqa)
        ms = timer.ms(timer.graph(run)) / copies
        rows.append({"model": shape["name"], "phase": "decode", "batch": b, "seq": s,
                     "us": ms * 1e3, "kv_gbps": kv_bytes / ms / 1e6})
        del ks, vs
    for b, s in PREFILL_POINTS:
        q = torch.randn(b, H, s, D, device=DEVICE, dtype=dtype)
        k = torch.randn(b, Hk, s, D, device=DEVICE, dtype=dtype)
        v = torch.randn(b, Hk, s, D, device=DEVICE, dtype=dtype)
        ms = timer.ms(lambda: attention_fn(torch, q, k, v, True, gqa))
        # the eager time includes the host's dispatch of the kernel (the GPU idles from
        # the start event until the launch arrives); a graph replay leaves it out
        graph_ms = timer.ms(timer.graph(lambda: attention_fn(torch, q, k, v, True, gqa)))
        flops = 4.0 * b * H * D * s * s / 2        # causal: half the score matrix
        rows.append({"model": shape["name"], "phase": "prefill", "batch": b, "seq": s,
                     "us": ms * 1e3, "graph_us": graph_ms * 1e3,
                     "tflops": flops / graph_ms / 1e9})
    log(f"attention {shape['name']}: " + ", ".join(
        f"{r['phase'][0]} B={r['batch']} S={r['seq']} {r['us']:.0f}us" for r in rows))
    return rows


class Decoder:
    """A dense Llama-style decoder of ``shape`` with random weights; the KV cache is
    given per step (:meth:`cache`)."""

    def __init__(self, torch, shape: dict, dtype):
        self.t = torch
        self.s = shape
        self.dtype = dtype
        h, f = shape["hidden"], shape["ffn"]
        H, Hk, D = shape["heads"], shape["kv_heads"], shape["head_dim"]
        qkv = (H + 2 * Hk) * D

        def mk(*sz):
            return torch.randn(*sz, device=DEVICE, dtype=dtype) * 0.02

        def ones():
            return torch.ones(h, device=DEVICE, dtype=dtype)
        self.layers = [{"n1": ones(), "qkv": mk(qkv, h), "o": mk(h, H * D), "n2": ones(),
                        "gu": mk(2 * f, h), "down": mk(h, f)}
                       for _ in range(shape["layers"])]
        self.norm = ones()
        self.head = mk(shape["vocab"], h)

    def cache(self, batch: int, tokens: int):
        """Per-layer K and V caches of ``batch`` x ``tokens`` (random contents)."""
        s = self.s
        mk = lambda: self.t.randn(batch, s["kv_heads"], tokens, s["head_dim"],  # noqa
                                  device=DEVICE, dtype=self.dtype)
        return [mk() for _ in self.layers], [mk() for _ in self.layers]

    def forward(self, x, kc, vc, pos: int, new: int, batch: int):
        """x: [batch * new, hidden], the tokens at positions pos..pos+new-1 of each
        request; kc / vc: per-layer caches of exactly pos + new tokens."""
        t, s = self.t, self.s
        F = t.nn.functional
        H, Hk, D, h = s["heads"], s["kv_heads"], s["head_dim"], s["hidden"]
        gqa = Hk != H
        for i, L in enumerate(self.layers):
            y = F.rms_norm(x, (h,), L["n1"])
            qkv = F.linear(y, L["qkv"]).view(batch, new, H + 2 * Hk, D)
            q = qkv[:, :, :H].transpose(1, 2)
            kc[i][:, :, pos:pos + new] = qkv[:, :, H:H + Hk].transpose(1, 2)
            vc[i][:, :, pos:pos + new] = qkv[:, :, H + Hk:].transpose(1, 2)
            a = attention_fn(t, q, kc[i], vc[i], new > 1, gqa)
            a = a.transpose(1, 2).reshape(batch * new, H * D)
            x = x + F.linear(a, L["o"])
            y = F.rms_norm(x, (h,), L["n2"])
            g, u = F.linear(y, L["gu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, L["down"])
        last = x.view(batch, new, h)[:, -1]
        return F.linear(F.rms_norm(last, (h,), self.norm), self.head)


#: also replay prefill steps from a CUDA graph; sample the SM clock while steps repeat
GRAPH_PREFILL = False
CLOCKS = False


def sm_clock_during(torch, fn, seconds: float = 1.0) -> list[float] | None:
    """[min, mean] SM clock (MHz, NVML) sampled while ``fn`` runs back to back for about
    ``seconds``: a clock below the maximum means the card throttles under this load."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:      # noqa: BLE001 - NVML is optional
        return None
    import time
    samples = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        fn()
        samples.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    torch.cuda.synchronize()
    return [float(min(samples)), float(sum(samples) / len(samples))]


def measure_steps(torch, timer, shape: dict, dtype, log, cap_tokens: int) -> list[dict]:
    """Decode and prefill steps at the points whose KV fits ``cap_tokens``."""
    rows = []
    pts = [("decode", b, s) for b, s in DECODE_POINTS if b * (s + 1) <= cap_tokens] + \
          [("prefill", b, s) for b, s in PREFILL_POINTS if b * s <= cap_tokens]
    dec = Decoder(torch, shape, dtype)
    for phase, b, s in pts:
        new = 1 if phase == "decode" else s
        pos = s if phase == "decode" else 0
        kc, vc = dec.cache(b, pos + new)
        x = torch.randn(b * new, shape["hidden"], device=DEVICE, dtype=dtype)

        def step():
            dec.forward(x, kc, vc, pos, new, b)
        with torch.inference_mode():
            eager = timer.ms(step)
            replay = timer.graph(step) if phase == "decode" or GRAPH_PREFILL else None
            graph = timer.ms(replay) if replay is not None else None
            clock = sm_clock_during(torch, replay or step) if CLOCKS else None
        rows.append({"model": shape["name"], "phase": phase, "batch": b, "seq": s,
                     "eager_ms": eager, "graph_ms": graph, "sm_clock_mhz": clock})
        log(f"step {shape['name']} {phase} B={b} S={s}: eager {eager:.2f} ms"
            + (f", graph {graph:.2f} ms" if graph is not None else "")
            + (f", SM clock {clock[0]:.0f}-{clock[1]:.0f} MHz" if clock else ""))
        del kc, vc, x, step
        torch.cuda.empty_cache()
    del dec
    torch.cuda.empty_cache()
    return rows


PROFILE_POINTS = (("decode", 1, 512), ("decode", 64, 2048), ("prefill", 1, 2048))


def profile_layer(torch, shape: dict, dtype, log) -> list[dict]:
    """The kernels of one decoder layer (a 2-layer decoder profiled, totals halved):
    per kernel name, calls and GPU time, at :data:`PROFILE_POINTS`."""
    from torch.profiler import ProfilerActivity, profile
    two = dict(shape, layers=2)
    dec = Decoder(torch, two, dtype)
    rows = []
    for phase, b, s in PROFILE_POINTS:
        new = 1 if phase == "decode" else s
        pos = s if phase == "decode" else 0
        kc, vc = dec.cache(b, pos + new)
        x = torch.randn(b * new, shape["hidden"], device=DEVICE, dtype=dtype)
        with torch.inference_mode():
            for _ in range(3):
                dec.forward(x, kc, vc, pos, new, b)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                dec.forward(x, kc, vc, pos, new, b)
                torch.cuda.synchronize()
        kern = {}
        for ev in prof.events():
            if ev.device_type.name != "CUDA":
                continue
            k = kern.setdefault(ev.name[:120], [0, 0.0])
            k[0] += 1
            k[1] += ev.device_time_total if hasattr(ev, "device_time_total") else \
                ev.cuda_time_total
        rows.append({"model": shape["name"], "phase": phase, "batch": b, "seq": s,
                     "kernels": [{"name": n, "calls_per_layer": c / 2, "us_per_layer": t / 2}
                                 for n, (c, t) in sorted(kern.items(), key=lambda i: -i[1][1])]})
        log(f"profile {shape['name']} {phase} B={b} S={s}: " + "; ".join(
            f"{k['name'][:40]} x{k['calls_per_layer']:g} {k['us_per_layer']:.1f}us"
            for k in rows[-1]["kernels"][:14]))
        del kc, vc, x
    del dec
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="llama2-7b", help="comma-separated zoo names")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--sections", default="launch,gemm,attention,steps",
                   help="comma-separated: launch, gemm, attention, steps, profile, "
                   "sustained")
    p.add_argument("--kv-gib", type=float, default=60, help="KV cache budget for steps")
    p.add_argument("--graph-prefill", action="store_true", help="also replay prefill "
                   "steps from a CUDA graph")
    p.add_argument("--clocks", action="store_true", help="sample the SM clock (NVML) "
                   "while each step repeats for a second")
    p.add_argument("--points", default="", help="only these points, e.g. "
                   "prefill:1:2048,decode:64:2048")
    args = p.parse_args(argv)
    global GRAPH_PREFILL, CLOCKS, DECODE_POINTS, PREFILL_POINTS
    GRAPH_PREFILL, CLOCKS = args.graph_prefill, args.clocks
    if args.points:
        pts = [tuple(x.split(":")) for x in args.points.split(",")]
        DECODE_POINTS = tuple((int(b), int(s)) for ph, b, s in pts if ph == "decode")
        PREFILL_POINTS = tuple((int(b), int(s)) for ph, b, s in pts if ph == "prefill")
    try:
        import torch
    except ImportError:
        print("error: this script needs PyTorch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU", file=sys.stderr)
        return 2

    def log(msg):
        print(msg, flush=True)
    props = torch.cuda.get_device_properties(0)
    out = {"device": {"name": props.name, "sms": props.multi_processor_count,
                      "mem_bytes": props.total_memory, "torch": torch.__version__,
                      "cuda": torch.version.cuda},
           "method": "scripts/measure_gpu_steps.py " + " ".join(
               argv if argv is not None else sys.argv[1:])}
    timer = Timer(torch, args.repeat)
    secs = args.sections.split(",")
    torch.backends.cuda.matmul.allow_tf32 = True
    if "launch" in secs:
        out["launch"] = measure_launch(torch, timer)
        log(f"launch: {out['launch']}")
        write_atomic(args.out, out)
    for name in args.models.split(","):
        shape = load_shape(name)
        dtype = torch.float16 if name.startswith(("llama2", "opt")) else torch.bfloat16
        per_token = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * 2
        cap = int(args.kv_gib * (1 << 30) / per_token)
        for sec, fn in (("gemm", lambda: measure_gemm(torch, timer, shape, dtype, log)),
                        ("attention", lambda: measure_attention(torch, timer, shape,
                                                                dtype, log)),
                        ("steps", lambda: measure_steps(torch, timer, shape, dtype, log,
                                                        cap)),
                        ("profile", lambda: profile_layer(torch, shape, dtype, log)),
                        ("sustained", lambda: measure_sustained(torch, timer, shape, dtype,
                                                                log))):
            if sec in secs:
                out.setdefault(sec, []).extend(fn())
                write_atomic(args.out, out)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

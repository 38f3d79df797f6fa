"""Measure the memory curve of the local CUDA GPU, for calibrating a system preset.

    pip install ".[gpu]"          # CuPy (see docs/validation/hardware.md for CUDA 13)
    python scripts/measure_gpu_memory.py --out my-gpu.json
    python scripts/hardware_memory_curve.py --system h200 --measured my-gpu.json

Writes one JSON object in the schema of the shipped H200 measurement
(``workloads/hardware/h200.json``): ``device``, ``bandwidth`` (stream read and write,
random gathers of contiguous chunks of 16 B to 64 KiB as GB/s and as a fraction of stream
read), ``latency`` (dependent loads of one thread, L1/L2-warm and DRAM-cold) and, with
``--energy``, ``energy`` (board power from NVML's energy counter while a pattern runs).

Method (as for the shipped file): every figure is the best of ``--repeat`` timed runs
after a warm-up, timed with CUDA events; bytes are counted once. A gather of chunk size G
cuts a window of the buffer into G-byte chunks and reads chunk ``hash(c) mod n`` for work
item c, in full, with 16-byte loads by G/16 adjacent threads (one thread for G < 16
reads G bytes). Extra sections, written when asked: ``fetch_granularity`` (the gather
curve under each L2 fetch granularity the driver accepts, ``--granularity``) and
``concurrency`` (gather bandwidth against resident warps, ``--concurrency``): the first
shows the DRAM access size, the second whether random access is limited by the memory's
activation rate or by requests in flight.

Needs a CUDA GPU and CuPy; nothing else of h2m2sim.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time

KERNELS = r"""
typedef unsigned long long u64;

__device__ __forceinline__ u64 mix(u64 x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33; return x;
}

extern "C" __global__ void stream_read(const int4* __restrict__ src, u64 n, int* sink) {
    int acc = 0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int4 v = __ldcs(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) sink[0] = acc;     // never true: keeps the loads
}

extern "C" __global__ void stream_write(int4* __restrict__ dst, u64 n) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    int4 v = make_int4(1, 2, 3, (int)threadIdx.x);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        __stcs(dst + i, v);
}

// Work item w reads 16 bytes (or `chunk` bytes when chunk < 16) of chunk
// mix(w / per) mod nchunks; `per` = chunk / 16 adjacent work items share a chunk.
// Chunk size and count are powers of two (log2 given): shifts and masks keep the index
// arithmetic far below the load rate. UNROLL independent loads per thread are in flight.
template <int UNROLL>
__device__ void gather(const unsigned char* __restrict__ base, int lchunk, int lnchunks,
                       u64 items, u64 seed, int* sink) {
    u64 chunk = 1ULL << lchunk;
    int lper = lchunk >= 4 ? lchunk - 4 : 0;
    u64 pmask = (1ULL << lper) - 1, cmask = (1ULL << lnchunks) - 1;
    u64 stride = (u64)gridDim.x * blockDim.x;
    int acc = 0;
    u64 w = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; w + (UNROLL - 1) * stride < items; w += UNROLL * stride) {
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            u64 wi = w + u * stride;
            u64 c = mix((wi >> lper) ^ seed) & cmask;
            const unsigned char* p = base + (c << lchunk) + ((wi & pmask) << 4);
            if (chunk >= 16) { int4 v = __ldcg((const int4*)p); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
            else if (chunk == 8) { acc ^= (int)__ldcg((const u64*)p); }
            else { acc ^= __ldcg((const int*)p); }
        }
    }
    if (acc == 0x7fffffff) sink[0] = acc;
}

extern "C" __global__ void gather4(const unsigned char* base, int lchunk, int lnchunks,
                                   u64 items, u64 seed, int* sink) {
    gather<4>(base, lchunk, lnchunks, items, seed, sink);
}

extern "C" __global__ void gather1(const unsigned char* base, int lchunk, int lnchunks,
                                   u64 items, u64 seed, int* sink) {
    gather<1>(base, lchunk, lnchunks, items, seed, sink);
}

// One thread follows the chain: next = *(u64*)(base + cur); ld.global.cg skips L1 when
// cg != 0. Returns the final position so the chain cannot be elided.
extern "C" __global__ void chase(const unsigned char* base, u64 start, u64 hops, int cg,
                                 u64* out) {
    u64 cur = start;
    if (cg) { for (u64 i = 0; i < hops; ++i) cur = __ldcg((const u64*)(base + cur)); }
    else    { for (u64 i = 0; i < hops; ++i) cur = *(const u64*)(base + cur); }
    out[0] = cur;
}
"""

GATHER_BYTES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
THREADS = 256


def _cudart():
    """The CUDA runtime library, for the L2 fetch-granularity limit (CuPy does not wrap
    it on every version)."""
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    try:
        import cupy
        path = os.path.join(os.path.dirname(cupy.__file__), "..", "nvidia")
        for root, _, files in os.walk(path):
            for f in files:
                if f.startswith("libcudart.so"):
                    return ctypes.CDLL(os.path.join(root, f))
    except Exception:      # noqa: BLE001 - optional: the section is skipped without it
        pass
    return None


LIMIT_L2_FETCH = 0x05      # cudaLimitMaxL2FetchGranularity (CUDA runtime API)


def get_fetch_granularity(rt) -> int | None:
    """The L2 fetch granularity the driver reports (bytes), or None."""
    try:
        import cupy
        return int(cupy.cuda.runtime.deviceGetLimit(LIMIT_L2_FETCH))
    except Exception:      # noqa: BLE001 - fall back on the runtime library
        pass
    if rt is None:
        return None
    v = ctypes.c_size_t(0)
    return int(v.value) if rt.cudaDeviceGetLimit(ctypes.byref(v), LIMIT_L2_FETCH) == 0 \
        else None


def set_fetch_granularity(rt, value: int) -> int | None:
    """Ask for an L2 fetch granularity (a hint to the driver); returns what it took."""
    try:
        import cupy
        cupy.cuda.runtime.deviceSetLimit(LIMIT_L2_FETCH, value)
        return get_fetch_granularity(rt)
    except Exception:      # noqa: BLE001 - fall back on the runtime library
        pass
    if rt is None or rt.cudaDeviceSetLimit(LIMIT_L2_FETCH, ctypes.c_size_t(value)) != 0:
        return None
    return get_fetch_granularity(rt)


class Gpu:
    """The device, its kernels and timing helpers."""

    def __init__(self, buffer_bytes: int, repeat: int):
        import cupy as cp
        self.cp = cp
        self.mod = cp.RawModule(code=KERNELS, options=("-std=c++14",),
                                name_expressions=None)
        self.k = {n: self.mod.get_function(n) for n in
                  ("stream_read", "stream_write", "gather4", "gather1", "chase")}
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.props = props
        self.sms = int(props["multiProcessorCount"])
        free = cp.cuda.runtime.memGetInfo()[0]
        self.buffer_bytes = min(buffer_bytes, int(free * 0.8)) // (1 << 20) << 20
        self.buf = cp.empty(self.buffer_bytes, dtype=cp.uint8)
        words = self.buf.view(cp.uint32)
        step = 1 << 28                 # fill 1 GiB at a time (no second full-size array)
        for i in range(0, words.size, step):
            n = min(step, words.size - i)
            words[i:i + n] = cp.arange(n, dtype=cp.uint32) + cp.uint32(i & 0xFFFFFFFF)
        self.sink = cp.zeros(4, dtype=cp.int32)
        # gathers read a power-of-two window (at most 32 GiB) at the start of the buffer
        self.window = 1 << min(35, self.buffer_bytes.bit_length() - 1)
        self.repeat = repeat

    def time_ms(self, launch, warm: int = 1) -> list[float]:
        cp = self.cp
        for _ in range(warm):
            launch()
        cp.cuda.Device().synchronize()
        out = []
        for _ in range(self.repeat):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            launch()
            b.record()
            b.synchronize()
            out.append(cp.cuda.get_elapsed_time(a, b))
        return out

    def grid(self, blocks_per_sm: int = 16) -> tuple[int]:
        return (self.sms * blocks_per_sm,)

    def stream_read(self, nbytes: int) -> tuple[float, float]:
        """GB/s of a stream read of ``nbytes``: the best and the median run."""
        n = nbytes // 16
        ms = self.time_ms(lambda: self.k["stream_read"](
            self.grid(), (THREADS,), (self.buf, self.cp.uint64(n), self.sink)))
        return nbytes / min(ms) / 1e6, nbytes / sorted(ms)[len(ms) // 2] / 1e6

    def stream_write(self, nbytes: int) -> float:
        """GB/s of a stream write of ``nbytes`` (best run)."""
        n = nbytes // 16
        ms = self.time_ms(lambda: self.k["stream_write"](
            self.grid(), (THREADS,), (self.buf, self.cp.uint64(n))))
        return nbytes / min(ms) / 1e6

    def gather(self, chunk: int, total: int, window: int, blocks_per_sm: int = 16,
               unroll: int = 4, seed: int = 12345) -> float:
        """GB/s of useful bytes for a gather of ``total`` bytes in ``chunk``-byte pieces
        over the first ``window`` bytes of the buffer."""
        cp = self.cp
        lchunk = chunk.bit_length() - 1
        lnchunks = (window // chunk).bit_length() - 1
        per_item = min(chunk, 16)
        items = total // per_item
        kern = self.k["gather4" if unroll == 4 else "gather1"]
        ms = self.time_ms(lambda: kern(
            self.grid(blocks_per_sm), (THREADS,),
            (self.buf, cp.int32(lchunk), cp.int32(lnchunks), cp.uint64(items),
             cp.uint64(seed), self.sink)))
        return items * per_item / min(ms) / 1e6

    def chase(self, footprint: int, stride: int, cg: bool, hops: int,
              warm: bool) -> list[float]:
        """ns per dependent load of one thread over a random cyclic chain of
        footprint / stride entries, one pointer per stride."""
        cp = self.cp
        n = footprint // stride
        # the chain lies at the end of the buffer; the eviction stream reads its start
        region = self.buf[self.buffer_bytes - footprint:]
        perm = cp.random.permutation(n).astype(cp.uint64)
        nxt = cp.empty(n, dtype=cp.uint64)
        nxt[perm] = cp.roll(perm, -1) * cp.uint64(stride)
        words = region.view(cp.uint64)
        words[(cp.arange(n, dtype=cp.uint64) * cp.uint64(stride // 8))] = nxt
        out = cp.zeros(1, dtype=cp.uint64)
        start = int(perm[0]) * stride
        if warm:
            self.k["chase"]((1,), (1,), (region, cp.uint64(start), cp.uint64(n),
                                        cp.int32(int(cg)), out))
        res = []
        for r in range(self.repeat):
            if not warm:        # evict: stream other data through the caches
                self.stream_read(min(1 << 30, self.buffer_bytes - footprint))
                start = int(perm[(r + 1) * 7919 % n]) * stride
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            self.k["chase"]((1,), (1,), (region, cp.uint64(start), cp.uint64(hops),
                                        cp.int32(int(cg)), out))
            b.record()
            b.synchronize()
            res.append(cp.cuda.get_elapsed_time(a, b) * 1e6 / hops)
        return res


def device_info(gpu: Gpu) -> dict:
    cp = gpu.cp
    p = gpu.props
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    info = {"name": name, "sms": gpu.sms, "l2_bytes": int(p["l2CacheSize"]),
            "mem_bytes": int(p["totalGlobalMem"]),
            "mem_bus_bits": int(p.get("memoryBusWidth", 0)),
            "mem_clock_khz": int(p.get("memoryClockRate", 0)), "cupy": cp.__version__}
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        info["nvml_max_mem_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, 2)
        info["nvml_max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, 1)
        drv = pynvml.nvmlSystemGetDriverVersion()
        info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        info["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1e3
    except Exception as err:    # noqa: BLE001 - NVML is optional
        info["nvml"] = f"unavailable: {err}"
    return info


def measure_bandwidth(gpu: Gpu, sizes, log) -> dict:
    stream_bytes = min(16 << 30, gpu.buffer_bytes)
    best, median = gpu.stream_read(stream_bytes)
    write = gpu.stream_write(stream_bytes)
    log(f"stream read {best:.0f} GB/s (median {median:.0f}), write {write:.0f} GB/s")
    window = gpu.window
    rand = {}
    for g in sizes:
        total = (4 << 30) if g >= 64 else (1 << 30)
        gbps = gpu.gather(g, total, window)
        rand[str(g)] = {"GBps": gbps, "frac_of_stream": gbps / best}
        log(f"gather {g:>6} B: {gbps:7.0f} GB/s = {gbps / best:.3f} of stream")
    return {"buffer_bytes": gpu.buffer_bytes, "stream_read_GBps": best,
            "stream_read_GBps_median": median, "stream_write_GBps": write,
            "random_gather_by_bytes": rand}


def measure_latency(gpu: Gpu, log) -> dict:
    rows = {}
    for foot, stride, warm in ((32 << 10, 128, True), (8 << 20, 128, True),
                               (4 << 30, 4096, False)):
        if foot > gpu.buffer_bytes // 2:
            continue
        key = f"{foot >> 10}KiB_stride{stride}"
        hops = 100_000 if warm else 20_000
        rows[key] = {"entries": foot // stride, "mode": "warm" if warm else "cold",
                     "chase_ns": gpu.chase(foot, stride, False, hops, warm),
                     "chase_cg_ns": gpu.chase(foot, stride, True, hops, warm)}
        log(f"latency {key}: {min(rows[key]['chase_ns']):.1f} ns, L2-only path "
            f"{min(rows[key]['chase_cg_ns']):.1f} ns")
    return rows


def measure_granularity(gpu: Gpu, values, log) -> dict:
    """The gather curve at small chunks under each L2 fetch granularity."""
    rt = _cudart()
    default = get_fetch_granularity(rt)
    out = {"default_bytes": default, "runs": {}}
    window = gpu.window
    for v in values:
        took = set_fetch_granularity(rt, v)
        row = {"asked_bytes": v, "driver_bytes": took}
        for g in (16, 32, 64, 128, 256):
            row[str(g)] = gpu.gather(g, (1 << 30), window)
        out["runs"][str(v)] = row
        log(f"fetch granularity {v} (driver: {took}): " + ", ".join(
            f"{g} B {row[str(g)]:.0f}" for g in (16, 32, 64, 128, 256)) + " GB/s")
    if default is not None:
        set_fetch_granularity(rt, default)
    return out


def measure_concurrency(gpu: Gpu, log) -> dict:
    """Gather bandwidth against the loads in flight: one load per thread at a time
    (unroll 1), 1..32 resident blocks of 256 threads per SM."""
    out = {}
    window = gpu.window
    for g in (64, 128, 4096):
        row = {}
        for bps in (1, 2, 4, 8):
            row[str(bps * THREADS)] = gpu.gather(g, 1 << 30, window, blocks_per_sm=bps,
                                                 unroll=1)
        row[f"{8 * THREADS}x4"] = gpu.gather(g, 1 << 30, window, blocks_per_sm=8, unroll=4)
        out[str(g)] = row
        log(f"concurrency {g} B: " + ", ".join(f"{k} thr/SM {v:.0f}" for k, v in
                                               row.items()))
    return {"threads_per_sm_to_GBps": out, "unroll": "1 load in flight per thread; "
            "'x4' rows 4"}


def measure_energy(gpu: Gpu, seconds: float, log) -> dict:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    cp = gpu.cp

    def phase(name, launch, nbytes):
        cp.cuda.Device().synchronize()
        e0, t0, moved = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.time(), 0
        while time.time() - t0 < seconds:
            if launch is None:
                time.sleep(0.05)
            else:
                launch()
                cp.cuda.Device().synchronize()
                moved += nbytes
        dt = time.time() - t0
        joules = (pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0) / 1e3
        return {"seconds": dt, "mean_power_w_energy_counter": joules / dt, "bytes": moved,
                "GBps": moved / dt / 1e9}

    out = {"idle": phase("idle", None, 0)}
    idle_w = out["idle"]["mean_power_w_energy_counter"]
    nb = min(16 << 30, gpu.buffer_bytes)
    lwin = gpu.window.bit_length() - 1
    n = nb // 16
    cases = {
        "stream_read": (lambda: gpu.k["stream_read"](gpu.grid(), (THREADS,),
                                                     (gpu.buf, cp.uint64(n), gpu.sink)), nb),
        "gather_64B": (lambda: gpu.k["gather4"](
            gpu.grid(), (THREADS,), (gpu.buf, cp.int32(6), cp.int32(lwin - 6),
                                     cp.uint64(nb // 16), cp.uint64(7), gpu.sink)), nb),
        "gather_4KiB": (lambda: gpu.k["gather4"](
            gpu.grid(), (THREADS,), (gpu.buf, cp.int32(12), cp.int32(lwin - 12),
                                     cp.uint64(nb // 16), cp.uint64(7), gpu.sink)), nb),
    }
    for name, (launch, nbytes) in cases.items():
        row = phase(name, launch, nbytes)
        bits = row["bytes"] * 8
        row["pj_per_bit_above_idle"] = (row["mean_power_w_energy_counter"] - idle_w) * \
            row["seconds"] / bits * 1e12
        row["pj_per_bit_total"] = row["mean_power_w_energy_counter"] * row["seconds"] / \
            bits * 1e12
        out[name] = row
        log(f"energy {name}: {row['mean_power_w_energy_counter']:.0f} W, "
            f"{row['pj_per_bit_above_idle']:.1f} pJ/bit above idle")
    return out


def write_atomic(path: str, data: dict) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".measure-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file to write (replaced atomically)")
    p.add_argument("--buffer", type=float, default=48, help="GiB of device memory to use "
                   "(default 48, capped at 80%% of free memory)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per figure (best kept)")
    p.add_argument("--energy", action="store_true", help="also measure board energy "
                   "(NVML; several seconds per pattern)")
    p.add_argument("--energy-seconds", type=float, default=3.0)
    p.add_argument("--granularity", default="", help="comma-separated L2 fetch "
                   "granularities to measure the small-chunk curve under, e.g. 32,64,128")
    p.add_argument("--concurrency", action="store_true", help="also measure gather "
                   "bandwidth against loads in flight")
    p.add_argument("--no-latency", action="store_true")
    args = p.parse_args(argv)
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("error: this script needs CuPy and a CUDA GPU (pip install \".[gpu]\")",
              file=sys.stderr)
        return 2

    def log(msg):
        print(msg, flush=True)

    gpu = Gpu(int(args.buffer * (1 << 30)), args.repeat)
    out = {"device": device_info(gpu), "method": "scripts/measure_gpu_memory.py "
           + " ".join(argv if argv is not None else sys.argv[1:])}
    out["bandwidth"] = measure_bandwidth(gpu, GATHER_BYTES, log)
    write_atomic(args.out, out)
    if not args.no_latency:
        out["latency"] = measure_latency(gpu, log)
        write_atomic(args.out, out)
    if args.granularity:
        out["fetch_granularity"] = measure_granularity(
            gpu, [int(v) for v in args.granularity.split(",")], log)
        write_atomic(args.out, out)
    if args.concurrency:
        out["concurrency"] = measure_concurrency(gpu, log)
        write_atomic(args.out, out)
    if args.energy:
        out["energy"] = measure_energy(gpu, args.energy_seconds, log)
        write_atomic(args.out, out)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

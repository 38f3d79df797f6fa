"""One decode iteration of a whole system, cycle-level, from a mapping.

A decode iteration runs every decoder layer. Layers of one kind (attention or Mamba mixer,
dense or MoE FFN) have the same shape and, under a head-aware mapping, the same split, so
one layer per kind is simulated and scaled by that kind's layer count (:func:`run_iteration`
says so in its result, and ``tests/decode/test_decode_iteration.py`` checks two simulated
layers against twice one).

One layer: the kernel graph is partitioned by the mapping (:func:`h2m2sim.model.
partition_layer`); for each sublayer (qkv-linear, attention, fc) each side runs its
partition on its own chip against its own DRAM (:func:`h2m2sim.npu.run_kernels`, the
closed DMA/compute/DRAM loop); the sublayer ends when the slower side finishes, then a
cross-chip barrier (``system.sync.barrier_ns``) and the activation copies the next
sublayer needs cross the interconnect (latency + bytes / bandwidth, per direction).

Speed: kernels that are identical in shape and tensor sizes (the per-request attention
kernels of requests with the same context length) are simulated once and counted; every
simulated piece is cached on disk by content hash (:mod:`h2m2sim.cache`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
from collections import OrderedDict
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np

from dram_models.energy import Additive, dram_energy, energy_per_command_pj
from dram_models.schema import to_dict
from dram_models.stats import DramStats
from h2m2sim.cache import cached
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import SUBLAYERS, Mapping, Problem, SublayerTimes
from h2m2sim.model import (ModelSpec, build_layer_graph, dtype_bytes, expected_experts,
                           footprint, kernels, normalize_batch, partition_layer, split_units,
                           transfers)
from h2m2sim.npu.energy import Activity, activity, result_counts
from h2m2sim.npu.simulate import kernel_dependencies, needs_sampling, run_kernels
from h2m2sim.parallel import map_ordered
from h2m2sim.system.chip import ENERGY_FIELDS as CHIP_ENERGY
from h2m2sim.system.mmu import ENERGY_FIELDS as MMU_ENERGY

CACHE_NS = "system-piece"
#: version of what a cached piece holds (2: activity counts and DRAM statistics; 3:
#: dependency-driven execution of request groups, TLB carried over, merged misses; 4:
#: synchronisation bytes; 5: request groups per sampled run set by their bytes)
PIECE_VERSION = 5
#: request groups of one shape simulated together at ``sampled`` fidelity (``cycle``
#: runs all) are as many as hold SAMPLED_GROUP_BYTES of kernel data, at most
#: CONCURRENT_GROUPS; the piece counts count / W such runs. Sampling parameters like
#: SAMPLE_PREFIX, set by the measured error against whole-batch cycle runs (a run's start
#: and end are counted once per run, so a run must be long against them): with 32 groups
#: within +2.2 % on the attention of Llama2 (B = 128), Chinchilla (B = 64) and GPT3
#: (B = 32); 8 groups of 2-9 MB each were up to +6.6 % off, 8 groups of 31 MB +2.1 %,
#: 4 of 51 MB +1.2 % (docs/validation/npu.md#request-groups-per-sampled-run)
CONCURRENT_GROUPS = 32
SAMPLED_GROUP_BYTES = 256 * 2**20
PIECE_FIELDS = ("time_ns", "compute_ns", "stall_memory_ns", "stall_compute_ns",
                "stall_tlb_ns", "bytes", "sync_bytes", "tlb_hits", "tlb_misses", "flops")


@dataclasses.dataclass(frozen=True)
class Piece(Additive):
    """Time and breakdown of kernels run back to back on one side (ns, bytes), and the
    side's :class:`~h2m2sim.npu.energy.Activity` for its energy. ``sync_bytes``: the part
    of ``bytes`` that is synchronisation flag reads (barriers, joins)."""

    time_ns: float = 0.0
    compute_ns: float = 0.0
    stall_memory_ns: float = 0.0
    stall_compute_ns: float = 0.0
    stall_tlb_ns: float = 0.0
    bytes: float = 0.0
    sync_bytes: float = 0.0
    tlb_hits: float = 0.0
    tlb_misses: float = 0.0
    flops: float = 0.0
    activity: Activity = Activity()


@dataclasses.dataclass(frozen=True)
class PieceRun:
    """One simulated kernel group of a piece, as a timeline draws it: the engine run's
    per-tile rows (:func:`~h2m2sim.npu.run_kernels`'s ``timeline``: kernel, unit, core,
    DMA start, reads back, compute start, compute end, ns from the run's start), the
    run's own time and the time the piece counts for it (``times`` such runs: sampled
    request groups, or tiles extrapolated inside a kernel), ns."""

    rows: tuple
    engine_ns: float
    reported_ns: float
    times: float
    dram: dict
    tlb_hits: float
    tlb_misses: float
    stall_tlb_ns: float
    #: DRAM energy of the whole piece run (all ``times``), nJ by component
    dram_nj: dict = dataclasses.field(default_factory=dict)
    #: with DRAM commands asked for, ``relog(window, channels)`` simulates the run again
    #: (the same run, so the same numbers) and returns its
    #: :class:`~h2m2sim.npu.KernelResult` with the command log (``commands``, ``queued``)
    #: of what was issued ``window`` = (start, end) ns after the run starts on
    #: ``channels`` (None: all): the log of a window, not of the whole run; ns per tick
    relog: object = None
    tick_ns: float = 0.0
    #: (producer, consumer) kernel names: the consumer reads what the producer wrote
    deps: tuple = ()
    #: with the command log: pJ of each command code
    #: (:func:`~dram_models.energy.energy_per_command_pj`; empty without power
    #: parameters) and one channel's background power during the run, W
    command_pj: tuple = ()
    background_w: float = 0.0


@dataclasses.dataclass(frozen=True)
class LayerTrace:
    """A simulated layer as a timeline draws it: ``runs[(sublayer, side)]`` the piece's
    runs in the order its time adds them up, and the layer's result (its times)."""

    label: str
    runs: dict
    result: "LayerResult"


@dataclasses.dataclass(frozen=True)
class _Capture:
    layers: list
    dram_commands: bool


_CAPTURE: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar(
    "h2m2sim_layer_capture", default=None)


@contextlib.contextmanager
def capture_layers(into: list[LayerTrace] | None, dram_commands: bool = False
                   ) -> Iterator[None]:
    """Layers simulated inside the block (:func:`run_layer`) append a LayerTrace to
    ``into``: their pieces run with per-tile timelines (and with ``dram_commands`` a
    way to run each again logging its DRAM commands in a window, :class:`PieceRun`'s
    ``relog``), simulated afresh rather than read from the result cache (the same
    deterministic runs, so the same times). None captures nothing inside the block."""
    token = _CAPTURE.set(None if into is None else _Capture(into, dram_commands))
    try:
        yield
    finally:
        _CAPTURE.reset(token)


def _tensor_sig(t) -> tuple:
    # where a tensor sits (its offset in a shared buffer, its address) does not change the
    # work; DRAM placement effects are part of the simulated representative
    return (t.kind, tuple(t.shape), int(t.bytes), t.view_of is not None)


def kernel_signature(k) -> tuple:
    """What determines a kernel's time on a side: op, shape, FLOPs and its tensors'
    sizes (not their names, addresses or the request they belong to)."""
    return (k.op, int(k.m), int(k.k), int(k.n), int(k.batch), int(k.flops),
            tuple(_tensor_sig(t) for t in k.operands), tuple(_tensor_sig(t) for t in k.outputs))


def _side_key(system, side: str) -> str:
    spec = system.side(side)
    # energy prices change no timing: a sweep over them reuses the simulations
    side_d, mmu_d = to_dict(spec), to_dict(system.mmu)
    side_d.pop("name", None)     # sides built alike time alike, whatever they are called
    for f in CHIP_ENERGY:
        side_d["chip"].pop(f, None)
    for f in MMU_ENERGY:
        mmu_d.pop(f, None)
    blob = json.dumps({"side": side_d, "mmu": mmu_d, "piece": PIECE_VERSION,
                       "groups": CONCURRENT_GROUPS, "group_bytes": SAMPLED_GROUP_BYTES},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _groups(ks: Sequence) -> list[tuple[list, int, list]]:
    """Consecutive runs of kernels, with identical per-request groups merged: returns
    (kernel list, count, members) in execution order, ``members`` being the kernel lists
    of every request merged into the group. Kernels of one request form one group."""
    out: "OrderedDict[tuple, list]" = OrderedDict()
    for k in ks:
        key = ("req", k.request) if k.request is not None else ("k", k.name)
        out.setdefault(key, []).append(k)
    merged: "OrderedDict[tuple, list]" = OrderedDict()
    for key, group in out.items():
        sig = tuple(kernel_signature(k) for k in group)
        if sig in merged:
            merged[sig][1] += 1
            merged[sig][2].append(group)
        else:
            merged[sig] = [group, 1, [group]]
    return [(g, c, m) for g, c, m in merged.values()]


#: how the per-request attention kernels of a sublayer are launched (see run_piece)
ATTENTION_MODES = ("per-request", "fused")
#: the matrix unit of the attention score and value products (see AttentionExec)
ATTENTION_UNITS = ("auto", "mv", "mm")
#: the graph ops whose unit AttentionExec.unit chooses
ATTENTION_PRODUCTS = ("attn_score", "attn_value")


@dataclasses.dataclass(frozen=True)
class AttentionExec:
    """How decode attention executes on a chip.

    ``launch``: one launch per request's kernel (``per-request``) or the requests of
    equal length batched (``fused``, :func:`fuse_requests`). ``unit``: where the score
    (Q K^T) and value (P V) products run. ``mv``: the MV unit, each K/V tile fetched
    once into the scratchpad and reused by the group's query heads (a KV byte read from
    DRAM serves ``group_size`` heads; ``group_size x n`` dot products of ``head_dim``);
    ``mm``: the MM array as a small GEMM (``group_size`` rows streamed through each
    ``head_dim x 128`` fold of K or V); ``auto``: the faster of the two by the tile
    search's estimate (:func:`h2m2sim.npu.tiling.choose_matmul_tiles`). Softmax runs on
    the vector unit in every case."""

    launch: str = "per-request"
    unit: str = "auto"

    def __post_init__(self):
        if self.launch not in ATTENTION_MODES:
            raise ConfigError("attention", f"must be one of {', '.join(ATTENTION_MODES)}, "
                              f"got {self.launch!r}")
        if self.unit not in ATTENTION_UNITS:
            raise ConfigError("attention_unit", f"must be one of "
                              f"{', '.join(ATTENTION_UNITS)}, got {self.unit!r}")

    @classmethod
    def of(cls, attention: "str | AttentionExec") -> "AttentionExec":
        """An AttentionExec from itself or a launch mode name (unit ``auto``)."""
        return attention if isinstance(attention, cls) else cls(launch=attention)


def fuse_requests(members: Sequence[Sequence]) -> list | None:
    """The decode attention of requests with identical shapes as one batched launch per
    stage (score, softmax, value over all their heads), as batched decode-attention
    kernels do on real accelerators: K and V stay the requests' own tensors (the
    operands are lists of them), the scores of all requests are one buffer. Returns
    None when the group is not score/softmax/value with one query token."""
    first = list(members[0])
    c = len(members)
    if [k.op for k in first] != ["attn_score", "softmax", "attn_value"]:
        return None
    sc0 = first[0].outputs[0]
    if len(first[0].outputs) != 1 or sc0.shape[1] != 1:
        return None
    if not any(t.kind == "kv" for t in first[0].operands):
        return None         # keys decompressed per request (MLA's naive form)
    score, soft, value = ([m[j] for m in members] for j in range(3))
    tag = f"[{min(k.request for k in score)}x{c}]"
    sc = dataclasses.replace(sc0, name=f"scores{tag}", shape=(c * sc0.shape[0],) +
                             sc0.shape[1:], bytes=c * sc0.bytes, request=None, view_of=None,
                             offset=0)
    pr = dataclasses.replace(sc, name=f"probs{tag}", is_output=True, view_of=sc.name)
    acts = lambda ks: tuple(t for k in ks for t in k.operands  # noqa: E731
                            if t.kind == "activation")
    kvs = lambda ks: tuple(t for k in ks for t in k.operands if t.kind == "kv")  # noqa: E731
    k0, k1, k2 = first
    return [
        dataclasses.replace(k0, name=k0.name + tag, request=None, flops=c * k0.flops,
                            operands=acts(score) + kvs(score), outputs=(sc,),
                            batch=c * k0.batch),
        dataclasses.replace(k1, name=k1.name + tag, request=None, flops=c * k1.flops,
                            m=c * k1.m, operands=(sc,), outputs=(pr,)),
        dataclasses.replace(k2, name=k2.name + tag, request=None, flops=c * k2.flops,
                            operands=(pr,) + kvs(value),
                            outputs=tuple(t for k in value for t in k.outputs),
                            batch=c * k2.batch),
    ]


class _Task(NamedTuple):
    """One simulation of a piece: ``run()`` gives its (scaled Piece, PieceRun or None);
    ``cost`` estimates what it costs (the bytes it moves); ``key`` is its cache key, the
    same for simulations that are the same."""

    run: Callable[[], tuple]
    cost: float
    key: str


def _piece_tasks(system, side: str, ks: Sequence, fidelity: str, translate: str | None,
                 cache: dict | None, attention: "str | AttentionExec") -> list[_Task]:
    """The simulations of one piece, one per distinct kernel group: ``run()`` gives the
    group's cached or simulated piece, scaled to the groups it stands for."""

    att = AttentionExec.of(attention)
    tasks = []
    cap = _CAPTURE.get()
    capture = cap is not None
    commands = capture and cap.dram_commands
    skey = _side_key(system, side)
    dram_spec = system.side(side).dram_spec
    groups = _groups(ks)
    for gi, (group, count, members) in enumerate(groups):
        if att.launch == "fused" and count > 1:
            fused = fuse_requests(members)
            if fused is not None:
                group, count, members = fused, 1, [fused]
        others = [k for j, (_, _, ms) in enumerate(groups) if j != gi for m in ms for k in m]
        key = {"side": skey, "kernels": [list(map(str, kernel_signature(k))) for k in group],
               "fidelity": fidelity, "translate": translate or "default", "count": count,
               "warm": [list(map(str, kernel_signature(k))) for k in others]}
        if att.unit != "auto" and any(k.op in ATTENTION_PRODUCTS for k in group):
            key["attention_unit"] = att.unit    # the default's keys stay as they were

        def compute(group=group, count=count, members=members, others=others):
            return _simulate_groups(system, side, group, count, members, fidelity,
                                    translate, others, att.unit, capture, commands)

        def run(key=key, compute=compute):
            d = compute() if capture else cached(CACHE_NS, key, compute, **(cache or {}))
            piece = Piece(**{f: d[f] for f in PIECE_FIELDS},
                          activity=activity(d["counts"], dram_spec, DramStats(**d["dram"]))
                          ).scaled(d["times"])
            return piece, (_piece_run(d, piece, dram_spec) if capture else None)

        # what the simulation costs grows with the bytes it moves
        sims = count if fidelity == "cycle" else sampled_groups(group, count)
        tasks.append(_Task(run, group_bytes(group) * sims, json.dumps(key, sort_keys=True)))
    return tasks


def touched_before(ks: Sequence, others: Sequence) -> list:
    """The tensors (views too) of ``others`` -- kernels of the piece that run before or
    beside ``ks`` -- on base tensors ``ks`` use: the query and attention-output buffers
    all requests share, the KV pages the KV append wrote. Their pages are in the TLB when
    ``ks`` run (the TLB carries across kernels and request groups)."""
    mine = {t.base for k in ks for t in list(k.operands) + list(k.outputs)}
    return [t for k in others for t in list(k.operands) + list(k.outputs) if t.base in mine]


def _fields(r, times: float = 1, timeline: bool = False) -> dict:
    """Cached fields of a simulated result that stands for ``times`` identical runs
    (with ``timeline``, also its per-tile rows and command log: never cached)."""
    d = {**{f: float(getattr(r, f)) for f in PIECE_FIELDS}, "counts": result_counts(r),
         "dram": r.dram.as_dict(), "times": times}
    if timeline:
        d.update(timeline=r.timeline, tick_ns=r.tick_ns)
    return d


def _piece_run(d: dict, piece: Piece, dram_spec) -> PieceRun:
    """The timeline's view of one simulated group (``d``: its fields with rows)."""
    e = piece.activity.dram
    pj, bg_w = (), 0.0
    relog = d.get("relog")
    if relog is not None and (per := energy_per_command_pj(dram_spec)) is not None:
        stats = DramStats(**d["dram"])
        pj = tuple(per)
        if stats.sim_ns > 0:
            bg_w = dram_energy(dram_spec, stats).background_nj / stats.sim_ns / stats.channels
    return PieceRun(tuple(d["timeline"]), d["time_ns"], piece.time_ns, d["times"],
                    d["dram"], piece.tlb_hits, piece.tlb_misses, piece.stall_tlb_ns,
                    {f.name[:-3]: getattr(e, f.name) for f in dataclasses.fields(e)},
                    relog, d["tick_ns"], d.get("deps", ()), pj, bg_w)


def _simulate_groups(system, side: str, group: Sequence, count: int, members: Sequence,
                     fidelity: str, translate: str | None, others: Sequence,
                     attention_unit: str = "auto", timeline: bool = False,
                     dram_commands: bool = False) -> dict:
    """Cached fields of ``count`` identical kernel groups (``members``: their kernels).
    Groups whose kernels are short run together, each as its dependencies allow
    (requests overlap); ``sampled`` fidelity runs W = :func:`sampled_groups` of them and
    counts that run count / W times. Groups of long kernels (which
    ``sampled`` extrapolates) run once and count ``count`` times. ``others``: the
    piece's other kernels (:func:`touched_before`); ``attention_unit``: see
    :func:`~h2m2sim.npu.simulate.plan_graph_kernel`. ``dram_commands`` (with
    ``timeline``): the fields hold ``relog`` (see :class:`PieceRun`), which runs the
    simulation again logging a window of its DRAM commands."""
    def one(ks, times=1):
        ids = {id(k) for k in ks}
        rest = list(others) + [k for m in members for k in m if id(k) not in ids]
        args = dict(fidelity=fidelity, translate=translate, warm=touched_before(ks, rest),
                    attention_unit=attention_unit, timeline=timeline)
        r = run_kernels(system, side, ks, **args)
        if r.deadlock:
            raise ConfigError("system", f"the simulation of {ks[0].name} on side {side} "
                              "deadlocked")
        d = _fields(r, times, timeline)
        if timeline:
            d["deps"] = tuple((ks[i].name, ks[j].name)
                              for j, ds in enumerate(kernel_dependencies(ks)) for i in ds)
        if timeline and dram_commands:
            # a timeline shows the commands of a short window: only the runs it overlaps,
            # once their place on it is known, log them (the command log of a whole run
            # can be hundreds of millions of rows)
            d["relog"] = lambda window, channels: run_kernels(
                system, side, ks, dram_commands=True, dram_window=window,
                dram_channels=channels, **args)
        return d

    flat = lambda ms: [k for m in ms for k in m]  # noqa: E731
    if count == 1 or len(members) < count or needs_sampling(system, side, group, fidelity):
        return one(group, count)
    W = count if fidelity == "cycle" else sampled_groups(group, count)
    return one(flat(members[:W]), count / W)


def group_bytes(ks: Sequence) -> int:
    """Bytes the kernels ``ks`` read and write (each operand and output counted once
    per kernel)."""
    return int(sum(t.bytes for k in ks for t in list(k.operands) + list(k.outputs)))


def sampled_groups(group: Sequence, count: int) -> int:
    """Request groups (identical to ``group``) one ``sampled`` run simulates out of
    ``count``: enough to hold SAMPLED_GROUP_BYTES, at most CONCURRENT_GROUPS."""
    need = -(-SAMPLED_GROUP_BYTES // max(group_bytes(group), 1))
    return int(min(count, CONCURRENT_GROUPS, max(need, 1)))


def _sum_piece(results, counts) -> Piece:
    total = Piece()
    for piece, count in zip(results, counts):
        total = total + piece.scaled(count)
    return total


def _run_pieces(specs: Sequence[tuple], fidelity: str, translate: str | None,
                cache: dict | None, attention: str, desc: str = "kernels",
                runs: list | None = None) -> list[Piece]:
    """Pieces for ``specs`` = [(system, side, kernels)], their simulations spread over
    the run's threads (:mod:`h2m2sim.parallel`); summed in a fixed order, so the result
    does not depend on the thread count. Inside :func:`capture_layers`, ``runs`` gets
    each spec's list of :class:`PieceRun`."""

    per = [_piece_tasks(sysm, side, ks, fidelity, translate, cache, attention)
           for sysm, side, ks in specs]
    flat = [task for tasks in per for task in tasks]
    # tasks of one key (a piece met twice: on sides built alike, or in two candidate
    # splits) are simulated once, not on two threads at once before either is cached
    unique = list({t.key: t for t in flat}.values())
    done = dict(zip((t.key for t in unique),
                    map_ordered(lambda t: t.run(), unique, cost=[t.cost for t in unique],
                                desc=desc)))
    per_spec = [[done[t.key] for t in tasks] for tasks in per]
    if runs is not None:
        runs.extend([r for _, r in got] for got in per_spec)
    return [_sum_piece([p for p, _ in got], [1] * len(got)) for got in per_spec]


def run_piece(system, side: str, ks: Sequence, fidelity: str = "sampled",
              translate: str | None = None, cache: dict | None = None,
              attention: "str | AttentionExec" = "per-request") -> Piece:
    """Simulate ``ks`` back to back on ``side``. ``attention``: an :class:`AttentionExec`
    or its launch mode: ``per-request`` runs each request's attention kernels as their
    own launches (identical requests simulated once and counted); ``fused`` launches the
    attention of identical requests together (:func:`fuse_requests`). ``cache``: options
    for :func:`h2m2sim.cache.cached` (``cache_dir``, ``enabled``). Distinct kernel groups
    run on the run's threads."""
    return _run_pieces([(system, side, ks)], fidelity, translate, cache, attention)[0]


@dataclasses.dataclass(frozen=True)
class LayerResult:
    """One simulated decoder layer (ns). ``sublayers[sl][side]`` is that side's Piece;
    ``boundary_ns[sl]`` the barrier + transfer cost after sublayer ``sl``, of which
    ``interconnect_ns[sl]`` is the activation copies over the chip-to-chip link."""

    time_ns: float
    sublayers: dict
    boundary_ns: dict
    transfer_bytes: float
    interconnect_ns: dict = dataclasses.field(default_factory=dict)


def layer_kernels(model: ModelSpec, batch: int, seq_lens, split: dict, sides: Sequence[str],
                  dtype: str | None = None, phase: str = "decode"):
    """Kernels per (side, sublayer) and transfers of one layer under ``split``."""
    if len(sides) == 1:
        G = build_layer_graph(model, batch, seq_lens, phase=phase, dtype=dtype)
        per = {}
        for k in kernels(G):
            per.setdefault((sides[0], k.sublayer), []).append(k)
        return per, []
    G = partition_layer(model, batch, seq_lens, split, phase=phase, dtype=dtype,
                        sides=tuple(sides))
    per = {}
    for k in kernels(G):
        per.setdefault((k.side, k.sublayer), []).append(k)
    return per, transfers(G)


def _consumed_ns(system, xfers, sublayer: str) -> tuple[float, float]:
    """Interconnect time (ns) and bytes of the copies ``sublayer`` consumes (those made for
    the next layer's qkv-linear count for qkv-linear: every layer has the same split).
    Copies in one direction share the link; the two directions run in parallel."""
    link = system.interconnect
    by_dir: dict = {}
    for x in xfers:
        consumer = "qkv" if x.sublayer == "next_layer" else x.sublayer
        if consumer == sublayer:
            by_dir[(x.src, x.dst)] = by_dir.get((x.src, x.dst), 0) + x.bytes
    if not by_dir:
        return 0.0, 0.0
    t = max(link.latency_ns + b / link.bandwidth_gbps for b in by_dir.values())
    return t, float(sum(by_dir.values()))


def run_layer(system, model: ModelSpec, batch: int, seq_lens, split: dict,
              sides: Sequence[str] | None = None, dtype: str | None = None,
              fidelity: str = "sampled", translate: str | None = None,
              cache: dict | None = None, attention: str = "per-request") -> LayerResult:
    """Simulate one decoder layer under a head-aware ``split`` (units on ``sides[0]``).
    A stack of several layer kinds (:func:`layer_kinds`) gives the layer-count-weighted
    mean of one simulated layer per kind, so ``layers x time_ns`` is the whole stack."""
    if not model.homogeneous:
        return _mean_layer([(n, run_layer(system, view, batch, seq_lens, split, sides, dtype,
                                          fidelity, translate, cache, attention))
                            for _, view, n in layer_kinds(model)])
    sides = tuple(sides or system.side_names)
    per, xfers = layer_kernels(model, batch, seq_lens, split, sides, dtype)
    subl, bound, link = {}, {}, {}
    total = 0.0
    xbytes = 0.0
    barrier = system.sync.barrier_ns if len(sides) > 1 else 0.0
    # every (sublayer, side) piece is independent: simulate them all at once
    keys = [(sl, s) for sl in SUBLAYERS for s in sides if (s, sl) in per]
    capture = _CAPTURE.get()
    runs: list | None = [] if capture is not None else None
    done = dict(zip(keys, _run_pieces([(system, s, per[(s, sl)]) for sl, s in keys],
                                      fidelity, translate, cache, attention,
                                      "layer kernels", runs)))
    for sl in SUBLAYERS:
        subl[sl] = {s: done.get((sl, s), Piece()) for s in sides}
        total += max(p.time_ns for p in subl[sl].values())
        t_x, b_x = _consumed_ns(system, xfers, sl)
        bound[sl] = barrier + t_x
        link[sl] = t_x
        total += bound[sl]
        xbytes += b_x
    result = LayerResult(total, subl, bound, xbytes, link)
    if capture is not None:
        capture.layers.append(LayerTrace(model.name, dict(zip(keys, runs)), result))
    return result


def layer_kinds(model: ModelSpec) -> list[tuple[tuple, ModelSpec, int]]:
    """(kind, homogeneous model of that kind with ``count`` layers, count) for each
    distinct (mixer, ffn) layer kind of ``model`` (one entry for a homogeneous model)."""
    if model.homogeneous:
        return [(model.layer_kind(0), model, model.layers)]
    return [(k, model.layer_view(k, n), n) for k, n in model.layer_groups().items()]


def _mean_layer(runs: Sequence[tuple[int, LayerResult]]) -> LayerResult:
    """Layer-count-weighted mean of the layers of several kinds: the stack's total is
    the layer count times it. The time is the mean of each kind's own time (each kind
    waits for its own slower side), the pieces the mean of each side's pieces."""
    L = sum(n for n, _ in runs)
    subl = {sl: {s: _sum_piece([lay.sublayers[sl][s] for _, lay in runs],
                               [n / L for n, _ in runs])
                 for s in runs[0][1].sublayers[sl]} for sl in runs[0][1].sublayers}

    def mean(f):
        return sum(n * f(lay) for n, lay in runs) / L

    return LayerResult(mean(lambda x: x.time_ns), subl,
                       {sl: mean(lambda x: x.boundary_ns[sl]) for sl in SUBLAYERS},
                       mean(lambda x: x.transfer_bytes),
                       {sl: mean(lambda x: x.interconnect_ns.get(sl, 0.0)) for sl in SUBLAYERS})


# ----------------------------------------------------------------------------- problem
def build_problem(system, model: ModelSpec, batch: int, seq_lens, dtype: str | None = None,
                  sides: Sequence[str] | None = None) -> Problem:
    """The mapping problem of (model, batch, lengths) on a two-sided system."""
    sides = tuple(sides or system.side_names)
    if len(sides) != 2:
        raise ConfigError("system.sides", f"a mapping needs two sides, got {len(sides)}")
    if not model.homogeneous:
        # one split for every layer: bytes add over the kinds, per-layer work is the mean
        parts = [(n, build_problem(system, view, batch, seq_lens, dtype, sides))
                 for _, view, n in layer_kinds(model)]
        L = model.layers
        p0 = parts[0][1]
        return dataclasses.replace(
            p0, layers=L,
            unit_bytes={sl: sum(p.unit_bytes[sl] for _, p in parts) for sl in SUBLAYERS},
            shared_bytes={sl: sum(p.shared_bytes[sl] for _, p in parts) for sl in SUBLAYERS},
            flops={sl: sum(n * p.flops[sl] for n, p in parts) / L for sl in SUBLAYERS},
            bytes_per_layer={sl: sum(n * p.bytes_per_layer[sl] for n, p in parts) / L
                             for sl in SUBLAYERS})
    batch, lens = normalize_batch(batch, seq_lens)
    fp = footprint(model, batch, lens, dtype=dtype)
    L = model.layers
    units = {sl: split_units(model, sl) for sl in SUBLAYERS}
    unit_bytes, shared, nbytes = {}, {}, {}
    for sl in SUBLAYERS:
        body = fp[sl]["weight"] + fp[sl]["kv"]
        unit_bytes[sl] = body * L / units[sl]
        shared[sl] = fp[sl]["activation"] * L
        nbytes[sl] = body + fp[sl]["activation"]
    G = build_layer_graph(model, batch, lens, dtype=dtype)
    flops = {sl: 0.0 for sl in SUBLAYERS}
    for k in kernels(G):
        flops[k.sublayer] += k.flops
    if model.moe_experts:
        # all experts are stored though a batch reads only the touched ones: the fc units
        # hold the untouched experts' bytes too (capacity, not traffic)
        eu = expected_experts(model.moe_experts, model.moe_top_k, batch)
        # stored as the graph stores weights: weight_dtype where set, else the run's dtype
        stored = model.weight_dtype or dtype or model.dtype
        idle = (model.moe_experts - eu) * model.expert_params * dtype_bytes(stored)
        unit_bytes["fc"] += idle * L / units["fc"]
    reserve = {s: system.mmu.table_bytes for s in sides}
    capacity = {s: system.side(s).capacity_bytes - reserve[s] for s in sides}
    peak = {s: system.side(s).chip.peak_tflops * 1e12 for s in sides}
    bw = {s: system.side(s).bandwidth_gbps * 1e9 for s in sides}
    chip = system.side(sides[0]).chip
    pre = -(-chip.mm_rows // chip.mm_preload_rows_per_cycle)
    util = min(1.0, batch / pre) if chip.mm_weight_double_buffer else \
        batch / (pre + batch + chip.mm_rows + chip.mm_cols - 2)
    return Problem(layers=L, sides=sides, units=units, unit_bytes=unit_bytes,
                   shared_bytes=shared, capacity=capacity, flops=flops,
                   bytes_per_layer=nbytes, peak_ops=peak, bandwidth=bw, mm_utilization=util,
                   interconnect=system.interconnect.bandwidth_gbps * 1e9,
                   barrier_ns=system.sync.barrier_ns)


def table_grid(N: int, points: int = 5) -> list[int]:
    """Unit counts at which a sublayer's time is simulated (the rest interpolated)."""
    grid = sorted({1, N} | {max(1, int(round(N * i / (points - 1)))) for i in range(points)})
    return grid


def sublayer_tables(system, model: ModelSpec, batch: int, seq_lens, problem: Problem,
                    dtype: str | None = None, fidelity: str = "sampled",
                    translate: str | None = None, cache: dict | None = None,
                    points: int = 5, attention: str = "per-request") -> SublayerTimes:
    """Per-sublayer, per-side time tables (ns per layer for 0..N units), simulated at a
    grid of unit counts and interpolated linearly in between (several layer kinds: the
    layer-count-weighted mean of each kind's tables)."""
    if _CAPTURE.get() is not None:      # a timeline draws the layers run, not the tables
        with capture_layers(None):
            return sublayer_tables(system, model, batch, seq_lens, problem, dtype,
                                   fidelity, translate, cache, points, attention)
    if not model.homogeneous:
        tabs = [(n, sublayer_tables(system, view, batch, seq_lens, problem, dtype, fidelity,
                                    translate, cache, points, attention))
                for _, view, n in layer_kinds(model)]
        L = model.layers
        table = {s: {sl: sum(n * np.asarray(t.table[s][sl]) for n, t in tabs) / L
                     for sl in SUBLAYERS} for s in problem.sides}
        return dataclasses.replace(tabs[0][1], table=table)
    table = {s: {} for s in problem.sides}
    first, second = problem.sides
    points_of, specs = {}, []
    for sl in SUBLAYERS:
        N = problem.units[sl]
        for side in problem.sides:
            for n in table_grid(N, points):
                # n units of this sublayer on `side`; the other sublayers do not matter
                split = {x: (N if x == sl else 0) for x in SUBLAYERS}
                split[sl] = n if side == first else N - n
                per, _ = layer_kernels(model, batch, seq_lens, split, problem.sides, dtype)
                ks = per.get((side, sl), [])
                points_of[(sl, side, n)] = len(specs) if ks else None
                if ks:
                    specs.append((system, side, ks))
    # all table points are independent simulations: run them on the run's threads
    pieces = _run_pieces(specs, fidelity, translate, cache, attention, "sublayer tables")
    for sl in SUBLAYERS:
        N = problem.units[sl]
        grid = table_grid(N, points)
        for side in problem.sides:
            ts = [0.0 if points_of[(sl, side, n)] is None else
                  pieces[points_of[(sl, side, n)]].time_ns for n in grid]
            full = np.interp(np.arange(N + 1), [0] + grid, [0.0] + ts)
            full[0] = 0.0
            table[side][sl] = full
    return SublayerTimes(table, barrier=system.sync.barrier_ns,
                         source=f"cycle-level ({fidelity}) at n = grid, linear in between")


@dataclasses.dataclass(frozen=True)
class IterationResult:
    """A decode iteration: ``iteration_ns`` = layers x the simulated layer (the
    layer-count-weighted mean of one layer per kind; said here rather than hidden)."""

    iteration_ns: float
    layer: LayerResult
    layers: int
    mapping: Mapping
    note: str = "one layer per kind simulated, scaled by that kind's layer count"


def run_iteration(system, model: ModelSpec, batch: int, seq_lens, mapping: Mapping,
                  sides: Sequence[str] | None = None, dtype: str | None = None,
                  fidelity: str = "sampled", translate: str | None = None,
                  cache: dict | None = None, attention: str = "per-request"
                  ) -> IterationResult:
    lay = run_layer(system, model, batch, seq_lens, mapping.split, sides, dtype, fidelity,
                    translate, cache, attention)
    return IterationResult(lay.time_ns * model.layers, lay, model.layers, mapping)

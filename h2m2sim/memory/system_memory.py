"""The memory of a whole system: one virtual address space, and per side a frame manager
and a flat page table (H2M2 Sec. 4.2).

A tensor gets one page-aligned virtual region; each of its pages is backed by a frame on
one side, or on several when duplicated (weights may live on both sides; the two page
tables then map the same virtual page to different frames). Migration moves pages to
another side; its cost comes from the interconnect and both sides' DRAM streaming rates.

Typical use::

    mem = SystemMemory(system)                       # page size from system.mmu
    w = mem.place("W_qkv", 150_994_944, "hbm", kind="weight")
    mem.duplicate("W_qkv", "lpddr")                  # -> TransferCost
    tr = mem.translation("hbm", w.vaddr, w.vaddr + w.nbytes, tick_ns)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError
from h2m2sim.system.mmu import PTE_BYTES, check_page_size

from .address_space import Region, VirtualAddressSpace
from .dram import stream_bandwidth_gbps
from .frames import FrameManager
from .mmu import make_translation
from .page_table import PageTable

__all__ = ["Tensor", "TransferCost", "SystemMemory", "KINDS"]

KINDS = ("weight", "activation", "kv", "other")


@dataclasses.dataclass
class Tensor:
    """A placed tensor: its virtual region and, per side, which of its pages are backed
    there (boolean array over the region's pages)."""

    name: str
    region: Region
    kind: str
    resident: dict[str, np.ndarray]

    @property
    def vaddr(self) -> int:
        return self.region.vaddr

    @property
    def nbytes(self) -> int:
        return self.region.nbytes

    @property
    def pages(self) -> int:
        return self.region.pages

    def sides(self) -> list[str]:
        """Sides holding at least one page."""
        return [s for s, r in self.resident.items() if r.any()]

    def on(self, side: str) -> bool:
        """All pages are backed on ``side``."""
        r = self.resident.get(side)
        return r is not None and bool(r.all())


@dataclasses.dataclass(frozen=True)
class TransferCost:
    """A page copy between sides: ``nbytes`` from ``src`` to ``dst`` in ``time_ns`` at
    ``rate_gbps`` (GB/s = bytes/ns), the minimum of the interconnect and both sides'
    streaming rates, plus one interconnect latency."""

    kind: str
    tensor: str
    src: str
    dst: str
    nbytes: int
    pages: int
    rate_gbps: float
    time_ns: float


class SystemMemory:
    """Virtual space + per-side frames and page tables of one system.

    ``page_size`` defaults to ``system.mmu.page_size``; ``policy`` is the default frame
    allocation policy (``contiguous`` or ``scattered``, seeded by ``seed``); ``rates``
    optionally gives ``{side: (read_gbps, write_gbps)}`` streaming rates for migration
    costs (default: measured once per side with the DRAM engine)."""

    def __init__(self, system: Any, page_size: int | None = None,
                 policy: str = "contiguous", seed: int = 0,
                 rates: Mapping[str, tuple[float, float]] | None = None):
        self.system = system
        mmu = system.mmu
        self.page_size = check_page_size(page_size or mmu.page_size)
        self.page_shift = self.page_size.bit_length() - 1
        if policy not in ("contiguous", "scattered"):
            raise ConfigError("policy", f"must be 'contiguous' or 'scattered', got {policy!r}")
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        vbytes = max(mmu.virtual_bytes // self.page_size, 2) * self.page_size
        self.vas = VirtualAddressSpace(vbytes, self.page_size)
        self.table_bytes = self.vas.n_pages * PTE_BYTES
        self.frames: dict[str, FrameManager] = {}
        self.tables: dict[str, PageTable] = {}
        for s in system.sides:
            self.frames[s.name] = FrameManager(s.name, s.capacity_bytes, self.page_size,
                                               reserved_bytes=self.table_bytes)
            self.tables[s.name] = PageTable(s.name, self.page_size)
        self.tensors: dict[str, Tensor] = {}
        self._rates = dict(rates or {})
        self.transfers: list[TransferCost] = []
        self.migrated_bytes = 0
        self.duplicated_bytes = 0

    # ---- helpers --------------------------------------------------------------------
    def _side(self, side: str) -> str:
        return self.system.side(side).name

    def tensor(self, name: str) -> Tensor:
        t = self.tensors.get(name)
        if t is None:
            raise ConfigError("tensor", f"no tensor {name!r} is placed"
                              + suggest(name, list(self.tensors)))
        return t

    def address(self, name: str) -> int:
        """Virtual address of tensor ``name``."""
        return self.tensor(name).vaddr

    def pte_base(self, side: str) -> int:
        """Physical address of the side's flat page table (in its reserved top frames)."""
        return self.frames[self._side(side)].reserved_base * self.page_size

    def _back(self, side: str, t: Tensor, pages: np.ndarray, policy: str | None) -> None:
        """Allocate and map frames on ``side`` for page indices ``pages`` of ``t``."""
        if len(pages) == 0:
            return
        fm = self.frames[side]
        frames = fm.allocate(len(pages), policy or self.policy, self.rng,
                             what=f"tensor '{t.name}'")
        # map runs of consecutive page indices
        brk = np.nonzero(np.diff(pages) != 1)[0] + 1
        for run_p, run_f in zip(np.split(pages, brk), np.split(frames, brk)):
            self.tables[side].map(t.region.vpn + int(run_p[0]), run_f)
        t.resident.setdefault(side, np.zeros(t.pages, dtype=bool))[pages] = True

    def _unback(self, side: str, t: Tensor, pages: np.ndarray) -> None:
        if len(pages) == 0:
            return
        brk = np.nonzero(np.diff(pages) != 1)[0] + 1
        for run in np.split(pages, brk):
            fr = self.tables[side].unmap(t.region.vpn + int(run[0]), len(run))
            self.frames[side].free(fr)
        t.resident[side][pages] = False

    # ---- placement ------------------------------------------------------------------
    def place(self, name: str, nbytes: int, side: str, kind: str = "activation",
              policy: str | None = None) -> Tensor:
        """A new tensor of ``nbytes`` backed on ``side``. Raises OutOfMemoryError
        (nothing allocated) if the side has too few free frames."""
        side = self._side(side)
        if kind not in KINDS:
            raise ConfigError("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
        region = self.vas.allocate(name, nbytes)
        t = Tensor(name, region, kind, {})
        try:
            self._back(side, t, np.arange(region.pages, dtype=np.int64), policy)
        except Exception:
            self.vas.free(name)
            raise
        self.tensors[name] = t
        return t

    def free(self, name: str) -> None:
        """Unmap and free every page of ``name`` on every side, and its virtual region."""
        t = self.tensor(name)
        for side, res in t.resident.items():
            self._unback(side, t, np.nonzero(res)[0])
        self.vas.free(name)
        del self.tensors[name]

    # ---- movement -------------------------------------------------------------------
    def rate_gbps(self, src: str, dst: str) -> float:
        """Copy rate from ``src`` to ``dst``: min(interconnect, src streaming read,
        dst streaming write), GB/s."""
        def rates(side):
            if side not in self._rates:
                s = self.system.side(side)
                self._rates[side] = (stream_bandwidth_gbps(s, False),
                                     stream_bandwidth_gbps(s, True))
            return self._rates[side]
        return min(self.system.interconnect.bandwidth_gbps, rates(src)[0], rates(dst)[1])

    def _cost(self, kind: str, t: Tensor, src: str, dst: str, pages: int) -> TransferCost:
        nbytes = pages * self.page_size
        # the tensor's last page only carries its used bytes
        nbytes = min(nbytes, t.nbytes)
        rate = self.rate_gbps(src, dst)
        time = self.system.interconnect.latency_ns + nbytes / rate
        c = TransferCost(kind, t.name, src, dst, int(nbytes), int(pages), rate, time)
        self.transfers.append(c)
        return c

    def _page_sel(self, t: Tensor, pages: slice | None) -> np.ndarray:
        sel = np.zeros(t.pages, dtype=bool)
        sel[pages if pages is not None else slice(None)] = True
        return sel

    def migrate(self, name: str, dst: str, pages: slice | None = None,
                policy: str | None = None) -> list[TransferCost]:
        """Move pages (default: all) of ``name`` to side ``dst``: pages not yet on
        ``dst`` get frames there, then every other side's copy of the selected pages is
        unmapped and freed. One TransferCost per source side (empty if nothing moved)."""
        dst = self._side(dst)
        t = self.tensor(name)
        sel = self._page_sel(t, pages)
        on_dst = t.resident.get(dst, np.zeros(t.pages, dtype=bool))
        need = np.nonzero(sel & ~on_dst)[0]
        costs = []
        # where each needed page comes from: the first other side holding it
        src_of = np.full(t.pages, -1, dtype=np.int64)
        others = [s for s in t.resident if s != dst]
        for i, s in enumerate(others):
            take = (src_of < 0) & t.resident[s]
            src_of[take] = i
        if len(need) and (src_of[need] < 0).any():
            raise ConfigError("tensor", f"'{name}': some pages are not backed anywhere")
        self._back(dst, t, need, policy)
        for i, s in enumerate(others):
            n = int((src_of[need] == i).sum())
            if n:
                costs.append(self._cost("migrate", t, s, dst, n))
                self.migrated_bytes += costs[-1].nbytes
            self._unback(s, t, np.nonzero(sel & t.resident[s])[0])
        return costs

    def duplicate(self, name: str, side: str, policy: str | None = None
                  ) -> TransferCost | None:
        """Back every page of ``name`` on ``side`` too (a copy; other sides keep theirs).
        None if it is already there."""
        side = self._side(side)
        t = self.tensor(name)
        have = t.resident.get(side, np.zeros(t.pages, dtype=bool))
        need = np.nonzero(~have)[0]
        if len(need) == 0:
            return None
        src = next((s for s in t.resident if s != side and t.resident[s][need].all()), None)
        if src is None:
            raise ConfigError("tensor", f"'{name}': no single side holds the pages to copy")
        self._back(side, t, need, policy)
        c = self._cost("duplicate", t, src, side, len(need))
        self.duplicated_bytes += c.nbytes
        return c

    def evict(self, name: str, side: str) -> None:
        """Drop ``side``'s copy of ``name``; every page must remain backed elsewhere."""
        side = self._side(side)
        t = self.tensor(name)
        res = t.resident.get(side)
        if res is None or not res.any():
            return
        elsewhere = np.zeros(t.pages, dtype=bool)
        for s, r in t.resident.items():
            if s != side:
                elsewhere |= r
        if not elsewhere[res].all():
            raise ConfigError("tensor", f"'{name}': evicting side '{side}' would lose pages "
                              "held nowhere else (migrate instead)")
        self._unback(side, t, np.nonzero(res)[0])

    # ---- translation ----------------------------------------------------------------
    def vpn_range(self, vaddr_lo: int, vaddr_hi: int) -> tuple[int, int]:
        return int(vaddr_lo) >> self.page_shift, ((int(vaddr_hi) - 1) >> self.page_shift) + 1

    def check_mapped(self, side: str, vaddr: np.ndarray, nbytes: np.ndarray,
                     what: str = "") -> None:
        """ConfigError naming the first range not fully backed on ``side``."""
        side = self._side(side)
        va = np.asarray(vaddr, dtype=np.int64)
        nb = np.asarray(nbytes, dtype=np.int64)
        if len(va) == 0:
            return
        first = va >> self.page_shift
        last = (va + nb - 1) >> self.page_shift
        pt = self.tables[side]
        bad_first = pt.lookup(first) < 0
        bad_last = pt.lookup(last) < 0
        bad = bad_first | bad_last
        if bad.any():
            i = int(np.nonzero(bad)[0][0])
            owner = next((t.name for t in self.tensors.values()
                          if t.vaddr <= va[i] < t.vaddr + t.pages * self.page_size), None)
            who = f"tensor '{owner}'" if owner else f"address {int(va[i]):#x}"
            raise ConfigError("placement", f"{who}{' (' + what + ')' if what else ''} is not "
                              f"resident on side '{side}' (place, duplicate or migrate it "
                              "there first)")

    def physical(self, side: str, vaddr: np.ndarray) -> np.ndarray:
        """Physical addresses on ``side`` of virtual addresses (all must be mapped)."""
        return self.tables[self._side(side)].translate(vaddr)

    def translation(self, side: str, vaddr_lo: int, vaddr_hi: int, tick_ns: float):
        """A dram_models ``Translation`` covering virtual ``[vaddr_lo, vaddr_hi)`` on
        ``side`` (dense slice of the flat table; PTE reads go to the real table)."""
        side = self._side(side)
        v0, v1 = self.vpn_range(vaddr_lo, vaddr_hi)
        pt = self.tables[side].dense(v0, v1)
        return make_translation(self.system.mmu, pt, v0,
                                self.pte_base(side) + PTE_BYTES * v0, tick_ns,
                                self.page_size)

    # ---- statistics -----------------------------------------------------------------
    def fragmentation(self, side: str | None = None) -> dict[str, int]:
        """Internal fragmentation of the placed tensors (on ``side``, or all):

        * ``eq2_bytes`` -- H2M2 Eq. 2 as printed: sum of (tensor_size mod page_size);
        * ``slack_bytes`` -- bytes allocated but unused in tensors' last pages (what is
          actually wasted: page_size - tensor_size mod page_size, when non-zero)."""
        eq2 = slack = 0
        for t in self.tensors.values():
            if side is not None and not t.resident.get(self._side(side),
                                                        np.zeros(1, bool)).any():
                continue
            if side is not None and not t.resident[self._side(side)][-1]:
                continue
            eq2 += t.nbytes % self.page_size
            slack += t.region.slack_bytes
        return {"eq2_bytes": int(eq2), "slack_bytes": int(slack)}

    def usage(self) -> dict[str, dict[str, float]]:
        """Per side: used/free bytes, occupancy, mapped pages, page-table version
        (number of page-table changes = TLB shootdowns to apply)."""
        out = {}
        for name, fm in self.frames.items():
            out[name] = {"used_bytes": fm.used_bytes, "free_bytes": fm.free_bytes,
                         "capacity_bytes": fm.usable_frames * self.page_size,
                         "occupancy": fm.occupancy(),
                         "page_table_bytes": fm.reserved_frames * self.page_size,
                         "mapped_pages": self.tables[name].mapped_pages,
                         "page_table_version": self.tables[name].version,
                         **{k: v for k, v in self.fragmentation(name).items()}}
        return out

"""Physical address -> DRAM coordinates (channel, pseudo-channel, rank, bank group, bank,
row, column).

A mapping is a *bit-order string* listing address fields from the most significant to
the least significant, e.g. ``RoBaRaCoCh``. Below the listed fields sit the bits of the
byte offset inside one burst. Field tokens:

====== ==================================  ====== ===============================
``Ro`` row                                  ``Bg`` bank group
``Ra`` rank (HBM: stack ID)                 ``Ba`` bank (within its group)
``Pc`` pseudo-channel                       ``Ch`` channel
``Co`` column (in bursts)
====== ==================================  ====== ===============================

Omitted levels are placed next to their parent, in hierarchy order from the least
significant bit, exactly as Ramulator 2's ``RoBaRaCoCh`` does: a missing ``Bg`` sits just
below ``Ba`` (``Ba`` = bank then bank group), a missing ``Pc`` just below ``Ra``. A token may
carry a bit count, ``Co:2``, to split a field: the occurrence nearer the least significant
end takes the field's low bits, and exactly one occurrence of a split field leaves its count
out and takes the rest. Address bits above the configured capacity are ignored (addresses
wrap). Appending ``+xor`` XORs the bank-group and bank bits with the low row bits
(permutation-based interleaving), which spreads strided and row-conflicting streams over
banks.

Named mappings:

* ``RoBaRaCoCh``  -- Ramulator 2's default: channel bits lowest, then the whole row's columns.
* ``RoRaBaChCo``, ``ChRaBaRoCo`` -- the classic bit orders of the same names.
* ``MOP4CL``      -- minimalist open page: 4 consecutive bursts per row, then channel,
  pseudo-channel, bank group, rank, bank, the remaining columns, row.
* ``MOP4CLXOR``   -- ``MOP4CL+xor``.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from .errors import ConfigError
from .spec import DramSpec

FIELDS = ("Ch", "Pc", "Ra", "Bg", "Ba", "Ro", "Co")
F_CH, F_PC, F_RA, F_BG, F_BA, F_RO, F_CO = range(7)

NAMED = {
    "RoBaRaCoCh": "RoBaRaCoCh",
    "RoRaBaChCo": "RoRaBaChCo",
    "ChRaBaRoCo": "ChRaBaRoCo",
    "MOP4CL": "RoCoBaRaBgPcChCo:2",
    "MOP4CLXOR": "RoCoBaRaBgPcChCo:2+xor",
}

_TOKEN_RE = re.compile(r"(Ro|Ra|Pc|Bg|Ba|Ch|Co)(?::(\d+))?")


@dataclasses.dataclass(frozen=True)
class AddressMapping:
    """A resolved mapping for one DramSpec.

    ``steps`` lists, from the least significant end of the burst index (the address
    without its in-burst offset), (field, radix, shift inside the field): each step takes
    ``index % radix`` as the next digits of that field and divides the index by ``radix``.
    Power-of-two radices are plain bit slices; a channel count that is not a power of two
    (e.g. 24 DDR5 sub-channels) becomes a modulo step. ``xor`` enables bank hashing with
    row bits."""

    name: str
    steps: tuple[tuple[int, int, int], ...]
    xor: bool
    sizes: tuple[int, ...]          # number of values of each field
    offset_bits: int

    def tables(self) -> tuple[np.ndarray, ...]:
        """Arrays for the Numba engine: field, radix, log2 radix (-1 if not a power of
        two), shift in the field, and the field sizes."""
        st = np.array(self.steps, dtype=np.int64).reshape(-1, 3)
        log2 = np.array([r.bit_length() - 1 if r & (r - 1) == 0 else -1
                         for r in st[:, 1].tolist()], dtype=np.int64)
        return (st[:, 0].copy(), st[:, 1].copy(), log2, st[:, 2].copy(),
                np.array(self.sizes, dtype=np.int64))

    def chunk_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Byte-wise lookup tables for the engine's fast decode, when every step is a bit
        slice: the decode is then a bit permutation of the burst index, so
        ``T[k, (index >> 8k) & 255]`` ORed over the bytes k gives all seven fields packed
        into one integer, field f at bit ``pos[f]``. Empty tables (use the step loop) if a
        step is a modulo or the packed fields need more than 63 bits."""
        widths = [s.bit_length() - 1 for s in self.sizes]
        empty = (np.zeros((0, 256), dtype=np.int64), np.zeros(len(FIELDS), dtype=np.int64))
        if any(r & (r - 1) for _, r, _ in self.steps) or sum(widths) > 63 or \
                any(s & (s - 1) for s in self.sizes):
            return empty
        pos = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        dest = []                       # packed bit of each burst-index bit, from bit 0
        for field, radix, dst in self.steps:
            for b in range(radix.bit_length() - 1):
                dest.append(int(pos[field]) + dst + b)
        nbytes = max(1, (len(dest) + 7) // 8)
        table = np.zeros((nbytes, 256), dtype=np.int64)
        vals = np.arange(256)
        for b, d in enumerate(dest):
            table[b // 8] |= ((vals >> (b % 8)) & 1) << d
        return table, pos

    def decode(self, addr: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorized decode of byte addresses into a dict of coordinate arrays."""
        v = np.asarray(addr, dtype=np.uint64) >> np.uint64(self.offset_bits)
        out = [np.zeros(v.shape, dtype=np.int64) for _ in FIELDS]
        for field, radix, dst in self.steps:
            r = np.uint64(radix)
            out[field] |= (v % r).astype(np.int64) << dst
            v = v // r
        if self.xor:
            _apply_xor(out, self.sizes)
        return dict(zip(COORDS, out))

    def encode(self, coords: dict[str, np.ndarray]) -> np.ndarray:
        """Inverse of :meth:`decode` (byte offset 0 inside the burst)."""
        vals = [np.asarray(coords[k], dtype=np.int64).copy() for k in COORDS]
        if self.xor:
            _apply_xor(vals, self.sizes)  # XOR is its own inverse
        v = np.zeros(vals[0].shape, dtype=np.uint64)
        for field, radix, dst in reversed(self.steps):
            digit = (vals[field] >> dst) % radix
            v = v * np.uint64(radix) + digit.astype(np.uint64)
        return v << np.uint64(self.offset_bits)


COORDS = ("channel", "pseudo_channel", "rank", "bank_group", "bank", "row", "column")


def _apply_xor(vals: list, sizes: tuple[int, ...]) -> None:
    g, b = sizes[F_BG], sizes[F_BA]
    gbits = g.bit_length() - 1
    vals[F_BG] = vals[F_BG] ^ (vals[F_RO] & (g - 1))
    vals[F_BA] = vals[F_BA] ^ ((vals[F_RO] >> gbits) & (b - 1))


def _expand(order: str, spec: DramSpec, key: str) -> list[tuple[int, int | None]]:
    pos, toks = 0, []
    while pos < len(order):
        m = _TOKEN_RE.match(order, pos)
        if not m:
            raise ConfigError(key, f"cannot parse mapping {order!r} at {order[pos:]!r}; "
                              f"tokens are {', '.join(FIELDS)} (optionally with :bits), "
                              f"or a named mapping: {', '.join(NAMED)}")
        toks.append((FIELDS.index(m.group(1)), int(m.group(2)) if m.group(2) else None))
        pos = m.end()
    present = {f for f, _ in toks}
    for need in (F_RO, F_CO, F_BA):
        if need not in present:
            raise ConfigError(key, f"mapping {order!r} lacks the {FIELDS[need]} field")
    if F_CH not in present:
        toks.insert(0, (F_CH, None))  # channel bits on top when not placed

    def insert_below(anchor: int, field: int) -> None:
        # the *last* occurrence (nearest the LSB) of the anchor gets the field below it
        idx = max(i for i, (f, _) in enumerate(toks) if f == anchor)
        toks.insert(idx + 1, (field, None))

    if F_BG not in present:
        insert_below(F_BA, F_BG)
    if F_RA not in present:
        insert_below(F_BG, F_RA)
    if F_PC not in present:
        insert_below(F_RA, F_PC)
    return toks


def resolve(mapping: str, spec: DramSpec, key: str = "mapping") -> AddressMapping:
    """Resolve a named mapping or bit-order string for ``spec``."""
    text = NAMED.get(mapping, mapping)
    xor = text.endswith("+xor")
    if xor:
        text = text[:-4]
    o = spec.organization
    sizes = (o.channels, o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group, o.rows,
             o.bursts_per_row)
    widths = [s.bit_length() - 1 if s & (s - 1) == 0 else 0 for s in sizes]
    toks = _expand(text.replace(" ", ""), spec, key)
    # assign bits from the least significant end
    used = [0] * len(FIELDS)
    open_count = [0] * len(FIELDS)
    for f, n in toks:
        if n is None:
            open_count[f] += 1
    for f in range(len(FIELDS)):
        explicit = sum(n for g, n in toks if g == f and n is not None)
        if open_count[f] > 1:
            raise ConfigError(key, f"field {FIELDS[f]} appears more than once without a bit "
                              "count in mapping " + repr(mapping))
        if f == F_CH and sizes[f] & (sizes[f] - 1):
            continue
        if explicit > widths[f] or (open_count[f] == 0 and explicit != widths[f]):
            raise ConfigError(key, f"mapping {mapping!r} gives {FIELDS[f]} {explicit} bits; "
                              f"{spec.name} with this organization has {widths[f]}")
    steps = []
    offset_bits = spec.burst_bytes.bit_length() - 1
    for f, n in reversed(toks):
        if f == F_CH and sizes[F_CH] & (sizes[F_CH] - 1):
            if n is not None:
                raise ConfigError(key, f"the channel field cannot be split when the channel "
                                  f"count ({sizes[F_CH]}) is not a power of two")
            steps.append((f, sizes[F_CH], 0))
            continue
        length = (widths[f] - sum(m for g, m in toks if g == f and m is not None)) \
            if n is None else n
        if length:
            steps.append((f, 1 << length, used[f]))
            used[f] += length
    return AddressMapping(mapping, tuple(steps), xor, sizes, offset_bits)

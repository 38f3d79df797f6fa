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
    """A resolved mapping for one DramSpec: segments of address bits, LSB first.

    ``segments`` holds (field, address bit position, number of bits, shift inside the
    field). ``xor`` enables bank hashing with row bits."""

    name: str
    segments: tuple[tuple[int, int, int, int], ...]
    xor: bool
    sizes: tuple[int, ...]          # number of values of each field
    offset_bits: int

    def tables(self) -> tuple[np.ndarray, ...]:
        """Arrays for the Numba engine: field, src bit, length, dst shift, plus sizes."""
        seg = np.array(self.segments, dtype=np.int64).reshape(-1, 4)
        return (seg[:, 0].copy(), seg[:, 1].copy(), seg[:, 2].copy(), seg[:, 3].copy(),
                np.array(self.sizes, dtype=np.int64))

    def decode(self, addr: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorized decode of byte addresses into a dict of coordinate arrays."""
        addr = np.asarray(addr, dtype=np.uint64)
        out = [np.zeros(addr.shape, dtype=np.int64) for _ in FIELDS]
        for field, src, length, dst in self.segments:
            bits = (addr >> np.uint64(src)) & np.uint64((1 << length) - 1)
            out[field] |= bits.astype(np.int64) << dst
        if self.xor:
            _apply_xor(out, self.sizes)
        return dict(zip(("channel", "pseudo_channel", "rank", "bank_group", "bank", "row",
                         "column"), out))

    def encode(self, coords: dict[str, np.ndarray]) -> np.ndarray:
        """Inverse of :meth:`decode` (byte offset 0 inside the burst)."""
        vals = [np.asarray(coords[k], dtype=np.int64).copy() for k in
                ("channel", "pseudo_channel", "rank", "bank_group", "bank", "row", "column")]
        if self.xor:
            _apply_xor(vals, self.sizes)  # XOR is its own inverse
        addr = np.zeros(vals[0].shape, dtype=np.uint64)
        for field, src, length, dst in self.segments:
            bits = (vals[field] >> dst) & ((1 << length) - 1)
            addr |= bits.astype(np.uint64) << np.uint64(src)
        return addr


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
    widths = [s.bit_length() - 1 for s in sizes]
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
        if explicit > widths[f] or (open_count[f] == 0 and explicit != widths[f]):
            raise ConfigError(key, f"mapping {mapping!r} gives {FIELDS[f]} {explicit} bits; "
                              f"{spec.name} with this organization has {widths[f]}")
    segments = []
    offset_bits = spec.burst_bytes.bit_length() - 1
    pos = offset_bits
    for f, n in reversed(toks):
        length = (widths[f] - sum(m for g, m in toks if g == f and m is not None)) \
            if n is None else n
        if length:
            segments.append((f, pos, length, used[f]))
            used[f] += length
            pos += length
    # explicit-count occurrences nearer the MSB must still take higher field bits: the
    # pass above walks LSB -> MSB, so shifts are already ascending.
    return AddressMapping(mapping, tuple(segments), xor, sizes, offset_bits)

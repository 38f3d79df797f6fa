"""From byte addresses to DRAM coordinates: the per-burst decode both controllers inline,
the bursts of each descriptor, and the channel of every address of a trace with the
trace's partition by channel."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", _nrt=False)
def _decode(addr, amap, xor, gbits, gmask, bmask, fields):
    """Address decode (of the burst index) into fields[0..6] with the tables ``amap``
    (:class:`~dram_models.engine.inputs.AddressMap`): byte-wise table lookups when the
    mapping is a bit permutation (see ``AddressMapping.chunk_tables``), else the
    mixed-radix steps from the least significant end (bit slices when the radix is a power
    of two); then the bank XOR, if ``xor``, with the row's low bits (``gbits`` bank-group
    bits, masks ``gmask`` and ``bmask``)."""
    m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos = amap
    if m_chunk.shape[0] > 0:
        packed = np.int64(0)
        for k in range(m_chunk.shape[0]):
            packed |= m_chunk[k, np.int64((addr >> np.uint64(8 * k)) & np.uint64(255))]
        for f in range(7):
            fields[f] = (packed >> m_pos[f]) & (m_sizes[f] - 1)
    else:
        for f in range(7):
            fields[f] = 0
        v = addr
        for k in range(m_field.shape[0]):
            lg = m_log2[k]
            if lg >= 0:
                val = np.int64(v & np.uint64(m_radix[k] - 1))
                v = v >> np.uint64(lg)
            else:
                r = np.uint64(m_radix[k])
                val = np.int64(v % r)
                v = v // r
            fields[m_field[k]] |= val << m_dst[k]
    if xor:
        fields[3] = fields[3] ^ (fields[5] & gmask)
        fields[4] = fields[4] ^ ((fields[5] >> gbits) & bmask)



@njit(cache=True, nogil=True)
def _burst_counts(addr, nbytes, shift):
    """Bursts of each descriptor (byte address ``addr``, ``nbytes`` bytes; bursts are
    2**shift bytes), in one pass: the counts (0 for a descriptor of no byte), their
    sum, their maximum and whether some descriptor has no byte."""
    n = addr.shape[0]
    nb = np.empty(n, dtype=np.int64)
    sh = np.uint64(shift)
    total = 0
    most = 0
    empty = False
    for i in range(n):
        if nbytes[i] <= 0:
            nb[i] = 0
            empty = True
            continue
        # from the offset in the first burst: a + nbytes - 1 would wrap past 2**64 - 1
        off = addr[i] & ((np.uint64(1) << sh) - np.uint64(1))
        v = np.int64((off + np.uint64(nbytes[i] - 1)) >> sh) + 1
        nb[i] = v
        total += v
        most = max(most, v)
    return nb, total, most, empty


@njit(cache=True, nogil=True)
def _channel_numbers(addr, offset_bits, m_field, m_radix, m_log2, m_dst, nch):
    """Channel of every byte address (the channel digits of the mapping's decode; the
    bank XOR never touches them) and the number of addresses per channel."""
    n = addr.shape[0]
    chan = np.empty(n, dtype=np.int32)
    counts = np.zeros(nch, dtype=np.int64)
    sh = np.uint64(offset_bits)
    nk = 0                          # steps up to the last channel step
    for k in range(m_field.shape[0]):
        if m_field[k] == 0:
            nk = k + 1
    for i in range(n):
        v = addr[i] >> sh
        c = 0
        for k in range(nk):
            lg = m_log2[k]
            if lg >= 0:
                val = np.int64(v & np.uint64(m_radix[k] - 1))
                v = v >> np.uint64(lg)
            else:
                r = np.uint64(m_radix[k])
                val = np.int64(v % r)
                v = v // r
            if m_field[k] == 0:
                c |= val << m_dst[k]
        chan[i] = c
        counts[c] += 1
    return chan, counts


@njit(cache=True, nogil=True)
def _partition(addr, is_write, arrival, offset_bits, m_field, m_radix, m_log2, m_dst,
               nch):
    """A trace's requests grouped by channel (:func:`_channel_numbers`) in a stable
    counting sort (trace order within a channel): the number per channel, the order
    (stream position -> trace index), and the addresses, write flags and arrivals in
    that order (no arrivals unless ``arrival`` has one per address: an open loop passes
    none, as its arrivals, all negative, need no reordering). One pass writes every
    column, so no gathers follow, and the channel numbers do not outlive the call."""
    n = addr.shape[0]
    chan, counts = _channel_numbers(addr, offset_bits, m_field, m_radix, m_log2, m_dst, nch)
    cursor = np.zeros(nch, dtype=np.int64)
    pos = 0
    for c in range(nch):
        cursor[c] = pos
        pos += counts[c]
    order = np.empty(n, dtype=np.int64)
    a_out = np.empty(n, dtype=addr.dtype)
    w_out = np.empty(n, dtype=is_write.dtype)
    timed = arrival.shape[0] == n
    r_out = np.empty(n if timed else 0, dtype=arrival.dtype)
    for i in range(n):
        c = chan[i]
        j = cursor[c]
        cursor[c] = j + 1
        order[j] = i
        a_out[j] = addr[i]
        w_out[j] = is_write[i]
        if timed:
            r_out[j] = arrival[i]
    return counts, order, a_out, w_out, r_out


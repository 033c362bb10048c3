"""Optional numba kernel for :func:`salience.text.hashing.group_spans`: one pass over the spans
with an open-addressing hash table, instead of the numpy path's hash mixing, sort and check.

It returns exactly what the numpy path returns (groups numbered by first appearance, each
group's first span), as every span is compared word by word with its group's first span: a
hash collision only costs a probe.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_PRIME = np.uint64(0x100000001B3)  # FNV's 64-bit prime
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@njit(cache=True, nogil=True)
def group_spans_table(values, start, length, keys):
    """(group of each span, numbered by first appearance; first span of each group) for spans
    ``values[start[i] : start[i] + length[i]]`` together with the row ``keys[i]``."""
    n = len(start)
    size = 1
    while size < 2 * n:  # at most half full: short probe chains
        size <<= 1
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int32)  # small, so that more of it stays in cache
    ids = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    n_groups = 0
    n_keys = keys.shape[1]
    for i in range(n):
        s, m = start[i], length[i]
        h = np.uint64(m)
        for c in range(n_keys):
            h = (h ^ np.uint64(keys[i, c])) * _PRIME
        for o in range(m):
            h = (h ^ np.uint64(values[s + o])) * _PRIME
        # splitmix64's finaliser, so that the low bits that pick a slot depend on every input
        h = (h ^ (h >> np.uint64(30))) * _MIX1
        h = (h ^ (h >> np.uint64(27))) * _MIX2
        h ^= h >> np.uint64(31)
        slot = h & mask
        while True:
            g = table[slot]
            if g < 0:  # a new group
                table[slot] = n_groups
                ids[i] = n_groups
                first[n_groups] = i
                n_groups += 1
                break
            r = first[g]
            same = length[r] == m
            c = 0
            while same and c < n_keys:
                same = keys[r, c] == keys[i, c]
                c += 1
            rs = start[r]
            o = 0
            while same and o < m:
                same = values[rs + o] == values[s + o]
                o += 1
            if same:
                ids[i] = g
                break
            slot = (slot + np.uint64(1)) & mask
    return ids, first[:n_groups].copy()

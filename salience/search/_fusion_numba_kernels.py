"""The compiled fusion of a hybrid's two sides, given as rows of index positions
(:meth:`salience.search.Hybrid.search_batch`): each query's candidates, normalised runs, weighted
additions and stable rank order computed as :class:`~salience.core.fusion.Fuser` computes them
with numpy, so the values and ties are the same to the bit. It serves the score fusions whose
normalisation needs no sum (none, ``minmax``, ``max``: a sum's rounding depends on its order)."""

from __future__ import annotations

import numpy as np
from numba import njit

#: normalisations the kernel computes (codes by position)
NORMALIZATIONS = (None, "minmax", "max")
_FLOOR = 1e-9  # salience.core.scores' floor of a denominator


@njit(inline="always")
def _scale(values, n, code):
    """``(offset, divisor)`` of a run's normalisation: ``(x - offset) / divisor`` is
    :func:`salience.core.scores.normalized_values` of its first ``n`` values (code 0: none)."""
    if code == 0 or n == 0:
        return 0.0, 1.0
    high = values[0]
    low = values[0]
    for i in range(1, n):
        high = max(high, values[i])
        low = min(low, values[i])
    if code == 1:
        return low, max(high - low, _FLOOR)
    return 0.0, max(high, _FLOOR)


@njit(inline="always")
def _normal(value, offset, divisor, code):
    if code == 0:
        return value
    if code == 1:
        return (value - offset) / divisor
    return value / divisor  # max: no offset subtracted, as numpy computes it


@njit(cache=True, nogil=True)
def fuse_rows(first_pos, first_val, first_count, second_pos, second_val, second_count, weight_first, weight_second,
              normalize_code, reduce_code, k, slots, out_pos, out_val, out_count):
    """Row ``q`` of the outputs: query ``q``'s fused top ``k`` (index positions, values) from
    its two rankings (the first ``first_count[q]`` of row ``q`` of the first, the same of the
    second, positions in one index). ``reduce_code``: 0 the weighted sum (CombSUM, wsum),
    1 CombMNZ, 2 CombMAX, 3 CombMIN. ``slots``: -1 over every position, left so."""
    size = first_pos.shape[1] + second_pos.shape[1]
    candidates = np.empty(size, dtype=np.int64)
    total = np.empty(size)
    held = np.empty(size, dtype=np.int64)
    largest = np.empty(size)
    smallest = np.empty(size)
    fused = np.empty(size)
    for q in range(len(first_count)):
        n1 = first_count[q]
        n2 = second_count[q]
        offset1, divisor1 = _scale(first_val[q], n1, normalize_code)
        offset2, divisor2 = _scale(second_val[q], n2, normalize_code)
        # candidates: the first ranking, then the documents of the second it lacks; each
        # candidate's sum starts at 0.0 and adds the runs in order, as numpy's does
        for i in range(n1):
            slots[first_pos[q, i]] = i
            candidates[i] = first_pos[q, i]
            v = weight_first * _normal(first_val[q, i], offset1, divisor1, normalize_code)
            total[i] = 0.0 + v
            held[i] = 1
            largest[i] = max(-np.inf, v)
            smallest[i] = min(np.inf, v)
        n = n1
        for j in range(n2):
            v = weight_second * _normal(second_val[q, j], offset2, divisor2, normalize_code)
            at = slots[second_pos[q, j]]
            if at < 0:
                at = n
                candidates[n] = second_pos[q, j]
                total[n] = 0.0
                held[n] = 0
                largest[n] = -np.inf
                smallest[n] = np.inf
                n += 1
            total[at] += v
            held[at] += 1
            largest[at] = max(largest[at], v)
            smallest[at] = min(smallest[at], v)
        for i in range(n1):
            slots[first_pos[q, i]] = -1
        for i in range(n):
            if reduce_code == 0:
                fused[i] = -total[i]
            elif reduce_code == 1:
                fused[i] = -(total[i] * held[i])
            elif reduce_code == 2:
                fused[i] = -largest[i]
            else:
                fused[i] = -smallest[i]
        order = np.argsort(fused[:n], kind="mergesort")  # stable: ties by candidate order, as rank_order
        m = min(k, n)
        for r in range(m):
            out_pos[q, r] = candidates[order[r]]
            out_val[q, r] = -fused[order[r]]
        out_count[q] = m

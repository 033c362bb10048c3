"""The compiled fusion of a hybrid's two sides, given as rows of index positions
(:meth:`salience.search.Hybrid.search_batch`), each row in any order: each query's candidates,
normalised runs and weighted additions computed as :class:`~salience.core.fusion.Fuser`
computes them with numpy, so the values are the same to the bit; numpy's vectorised sort then
ranks them and :func:`write_fused` puts ties in the order a stable sort of the Fuser's
candidates gives. It serves the score fusions whose normalisation needs no sum (none,
``minmax``, ``max``: a sum's rounding depends on its order)."""

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
def fused_candidates(first_pos, first_val, first_count, second_pos, second_val, second_count, weight_first,
                     weight_second, normalize_code, reduce_code, slots, keys, cand_pos, cand_val, cand_count):
    """Row ``q``: query ``q``'s candidates and their fused scores, from its two top-k rows (the
    first ``first_count[q]`` of row ``q`` of the first, the same of the second, positions in
    one index, each row in any order). The candidates are the first's documents, then those of
    the second it lacks; ``keys`` receives minus each fused score (``inf`` past
    ``cand_count[q]``, for numpy's sort), ``cand_pos`` the positions and ``cand_val`` each
    candidate's score in the ranking that brought it (what orders ties, see
    :func:`write_fused`). ``reduce_code``: 0 the weighted sum (CombSUM, wsum), 1 CombMNZ,
    2 CombMAX, 3 CombMIN. ``slots``: -1 over every position, left so."""
    size = keys.shape[1]
    total = np.empty(size)
    held = np.empty(size, dtype=np.int64)
    largest = np.empty(size)
    smallest = np.empty(size)
    for q in range(len(first_count)):
        n1 = first_count[q]
        n2 = second_count[q]
        offset1, divisor1 = _scale(first_val[q], n1, normalize_code)
        offset2, divisor2 = _scale(second_val[q], n2, normalize_code)
        # each candidate's sum starts at 0.0 and adds the runs in order, as numpy's does
        for i in range(n1):
            slots[first_pos[q, i]] = i
            cand_pos[q, i] = first_pos[q, i]
            cand_val[q, i] = first_val[q, i]
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
                cand_pos[q, n] = second_pos[q, j]
                cand_val[q, n] = second_val[q, j]
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
                keys[q, i] = -total[i]
            elif reduce_code == 1:
                keys[q, i] = -(total[i] * held[i])
            elif reduce_code == 2:
                keys[q, i] = -largest[i]
            else:
                keys[q, i] = -smallest[i]
        keys[q, n:] = np.inf
        cand_count[q] = n


@njit(inline="always")
def _before(a, b, n1, cand_pos, cand_val):
    """Whether candidate ``a`` comes before ``b`` among candidates of equal fused score: in the
    order :class:`~salience.core.fusion.Fuser` lists candidates (the first ranking's documents
    in its rank order, then the second's it lacks in the second's), a ranking's order being
    score descending, ties by lower position."""
    group_a = a >= n1
    group_b = b >= n1
    if group_a != group_b:
        return group_b
    if cand_val[a] != cand_val[b]:
        return cand_val[a] > cand_val[b]
    return cand_pos[a] < cand_pos[b]


#: a run of equal fused scores longer than this (many documents one side scores alike and the
#: other lacks) is ordered by three stable sorts rather than by insertion
_SHORT_RUN = 32


@njit(inline="always")
def _order_long_run(row, start, end, n1, cand_pos, cand_val):
    """``row[start:end]`` in the order of :func:`_before`: stable sorts by position, then by
    score descending, then by group."""
    run = row[start:end].copy()
    run = run[np.argsort(cand_pos[run], kind="mergesort")]
    run = run[np.argsort(-cand_val[run], kind="mergesort")]
    run = run[np.argsort((run >= n1).astype(np.int64), kind="mergesort")]
    row[start:end] = run


@njit(cache=True, nogil=True)
def write_fused(order, keys, cand_pos, cand_val, cand_count, first_count, k, out_pos, out_val, out_count):
    """Row ``q`` of the outputs: query ``q``'s fused top ``k`` (positions, values), from
    ``order`` (each row of ``keys`` sorted by numpy, ties in any order): each run of equal
    fused scores put in candidate order (:func:`_before`), so the ranking is a stable sort's of
    the candidates, as :func:`salience.core.scores.rank_order` gives."""
    for q in range(len(cand_count)):
        n = cand_count[q]
        m = min(k, n)
        n1 = first_count[q]
        row = order[q]
        start = 0
        while start < m:
            end = start + 1
            while end < n and keys[q, row[end]] == keys[q, row[start]]:
                end += 1
            if end - start > _SHORT_RUN:
                _order_long_run(row, start, end, n1, cand_pos[q], cand_val[q])
            else:
                for i in range(start + 1, end):  # insertion sort
                    c = row[i]
                    j = i - 1
                    while j >= start and _before(c, row[j], n1, cand_pos[q], cand_val[q]):
                        row[j + 1] = row[j]
                        j -= 1
                    row[j + 1] = c
            start = end
        for r in range(m):
            out_pos[q, r] = cand_pos[q, row[r]]
            out_val[q, r] = -keys[q, row[r]]
        out_count[q] = m

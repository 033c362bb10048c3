"""Masks of the lowest-scoring entries: exactly k per row or group, ties broken by position
(the selectors of pruning: weight masks, N:M patterns, evicted cache tokens, removed units)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, ShapeError, unknown_choice

__all__ = ["lowest_k_mask", "lowest_k_across", "parse_pattern", "prune_mask", "check_sparsity"]


def lowest_k_mask(values: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """For each row of ``values`` (2-D), a boolean mask of its ``k`` lowest entries: exactly ``k``
    (per row, or one ``k`` for all), ties broken by position (the earlier entry is taken first),
    so equal values give the same mask every time. O(n) per row (a partition, no sort)."""
    values = np.asarray(values)
    rows, cols = values.shape
    k = np.broadcast_to(np.asarray(k, dtype=np.int64), (rows,))
    if (k < 0).any() or (k > cols).any():
        raise InvalidParameterError(f"k must be within 0..{cols} per row; got {k.min()}..{k.max()}.")
    mask = np.zeros(values.shape, dtype=bool)
    if cols == 0 or not k.any():
        return mask
    if (k == k[0]).all():
        kth = np.partition(values, int(k[0]) - 1, axis=1)[:, int(k[0]) - 1 : int(k[0])]
    else:  # a different k per row: one partition each
        kth = np.array([[np.partition(row, kr - 1)[kr - 1] if kr else row.min()] for row, kr in zip(values, k)])
    below = values < kth
    tied = values == kth
    need = k[:, None] - below.sum(axis=1, keepdims=True)
    crowded = tied.sum(axis=1, keepdims=True) > need  # rows with more ties at the cut than places left
    if crowded.any():
        rows = np.flatnonzero(crowded[:, 0])
        if len(rows) <= 8:  # a few long rows (a whole layer): cut each row's tied positions directly
            for r in rows:
                tied[r, np.flatnonzero(tied[r])[need[r, 0]:]] = False
        else:
            tied[rows] &= np.cumsum(tied[rows], axis=1) <= need[rows]
    mask = below | tied
    mask[k == 0] = False
    return mask


def lowest_k_across(arrays: Sequence[np.ndarray], k: int) -> list[np.ndarray]:
    """Masks of the ``k`` lowest entries of several arrays taken as one group (a global
    comparison across layers): exactly ``k``, ties broken by position (the arrays in order,
    each row-major). One partition over all the values; no mask the size of all of them."""
    total = sum(int(np.size(a)) for a in arrays)
    if not 0 <= k <= total:
        raise InvalidParameterError(f"k must be within 0..{total}; got {k}.")
    if k == 0:
        return [np.zeros(np.shape(a), dtype=bool) for a in arrays]
    kth = np.partition(np.concatenate([np.asarray(a).ravel() for a in arrays]), k - 1)[k - 1]
    below = [np.asarray(a) < kth for a in arrays]
    need = k - sum(int(b.sum()) for b in below)
    masks = []
    for a, b in zip(arrays, below):
        tied = np.asarray(a) == kth
        flat = tied.reshape(-1)
        places = np.flatnonzero(flat)
        flat[places[max(need, 0):]] = False
        need -= min(len(places), max(need, 0))
        masks.append(b | tied)
    return masks


def parse_pattern(pattern) -> tuple[int, int] | None:
    """``"2:4"`` or ``(2, 4)`` -> (2, 4): keep N of every M consecutive weights; None -> None."""
    if pattern is None:
        return None
    try:
        n, m = (int(v) for v in (pattern.split(":") if isinstance(pattern, str) else pattern))
    except (TypeError, ValueError):
        raise InvalidParameterError(f"pattern must be N:M, e.g. '2:4'; got {pattern!r}.") from None
    if not 0 < n < m:
        raise InvalidParameterError(f"pattern N:M needs 0 < N < M; got {n}:{m}.")
    return n, m


def prune_mask(scores: np.ndarray, *, sparsity: float | None = None, group: str = "row", pattern=None) -> np.ndarray:
    """The entries of a 2-D score matrix to prune (True), the lowest-scoring first.

    ``group="row"``: each row is a comparison group and loses exactly ``floor(sparsity x
    columns)`` entries (Wanda's per-output comparison); ``"matrix"``: the matrix is one group
    (``floor(sparsity x size)``). ``pattern="N:M"``: every run of M consecutive entries of a row
    keeps its N best (semi-structured sparsity; ``sparsity`` is then 1 - N/M). Ties: the earlier
    entry (row-major) is pruned first.

    >>> prune_mask(np.array([[3.0, 1.0, 2.0, 1.0]]), sparsity=0.5).tolist()
    [[False, True, False, True]]
    >>> prune_mask(np.array([[4.0, 1.0, 2.0, 3.0, 0.0, 5.0, 1.0, 1.0]]), pattern="2:4").astype(int).tolist()
    [[0, 1, 1, 0, 1, 0, 1, 0]]
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ShapeError(f"prune_mask takes a 2-D score matrix; got shape {scores.shape}.")
    if np.isnan(scores).any():
        raise InvalidParameterError("the importance scores contain NaN: check the calibration data and the model.")
    nm = parse_pattern(pattern)
    if nm is not None:
        n, m = nm
        rows, cols = scores.shape
        if cols % m:
            raise InvalidParameterError(f"a {n}:{m} pattern needs a width divisible by {m}; this matrix has {cols} "
                                        "columns.")
        return lowest_k_mask(scores.reshape(-1, m), m - n).reshape(rows, cols)
    sparsity = check_sparsity(sparsity)
    if group == "row":
        return lowest_k_mask(scores, int(np.floor(sparsity * scores.shape[1] + 1e-9)))
    if group == "matrix":
        flat = scores.reshape(1, -1)
        return lowest_k_mask(flat, int(np.floor(sparsity * flat.shape[1] + 1e-9))).reshape(scores.shape)
    raise unknown_choice("comparison group", group, ("row", "matrix"))


def check_sparsity(sparsity) -> float:
    """A sparsity (the fraction removed) in [0, 1)."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float, np.floating)) or not 0.0 <= sparsity < 1.0:
        raise InvalidParameterError(f"sparsity must be a fraction in [0, 1) (the share of weights removed); got "
                                    f"{sparsity!r}.")
    return float(sparsity)

"""Selectors: turn ``Scores`` into a chosen subset.

Every selector takes ``Scores`` and returns ``Scores`` of the chosen items in rank order
(higher score first, ties by position), so selections compose with the rest of the core.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from salience.core.scores import Scores, rank_order
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["check_k", "select_top_k", "select_threshold", "select_budget"]

# Exact knapsack DP runs when n * (budget + 1) stays below this many cells.
_DP_MAX_CELLS = 20_000_000


def check_k(k: object, name: str = "k") -> int:
    """Validate a positive integer cut-off and return it as ``int``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameterError(f"{name} must be a positive integer; got {k!r} ({type(k).__name__}).")
    if k <= 0:
        raise InvalidParameterError(f"{name} must be a positive integer; got {k}. Use {name} >= 1.")
    return int(k)


def select_top_k(scores: Scores, k: int) -> Scores:
    """The ``k`` best items (``k`` above the number of items is clamped).

    >>> select_top_k(Scores([1, 3, 2], ids="abc"), 2).ids
    ['b', 'c']
    """
    return scores.top_k(k)


def select_threshold(scores: Scores, threshold: float, *, inclusive: bool = True) -> Scores:
    """Items whose score is ``>= threshold`` (or ``>`` with ``inclusive=False``).

    >>> select_threshold(Scores([1, 3, 2], ids="abc"), 2).ids
    ['b', 'c']
    """
    threshold = float(threshold)
    if np.isnan(threshold):
        raise InvalidParameterError("threshold must be a number; got NaN.")
    mask = scores.values >= threshold if inclusive else scores.values > threshold
    keep = np.flatnonzero(mask)
    return scores.take(keep[rank_order(scores.values[keep])])


def select_budget(scores: Scores, costs: Sequence[float], budget: float, *, method: str = "auto") -> Scores:
    """Best-value subset whose total cost is at most ``budget`` (0/1 knapsack).

    Parameters
    ----------
    costs : sequence of float
        One non-negative cost per item.
    budget : float
        Maximum total cost (>= 0).
    method : {"auto", "exact", "greedy"}
        ``exact`` is dynamic programming over integer costs (optimal); ``greedy`` takes items
        by score/cost and then compares with the best single item (a 1/2-approximation).
        ``auto`` is exact when all costs and the budget are integers and the table is small.

    Only items with a positive score are worth selecting; the result is in rank order.

    >>> select_budget(Scores([6, 10, 12], ids="abc"), [1, 2, 3], 5).ids
    ['c', 'b']
    """
    c = np.asarray(costs, dtype=np.float64)
    if c.shape != scores.values.shape:
        raise ShapeError(f"select_budget needs one cost per item; got {len(c)} costs for {len(scores)} items.")
    if not np.isfinite(c).all() or (c < 0).any():
        raise InvalidParameterError("costs must be finite and non-negative.")
    budget = float(budget)
    if not np.isfinite(budget) or budget < 0:
        raise InvalidParameterError(f"budget must be a finite number >= 0; got {budget}.")
    if method not in ("auto", "exact", "greedy"):
        from salience.exceptions import unknown_choice

        raise unknown_choice("budget method", method, ("auto", "exact", "greedy"))
    v = scores.values
    if not np.isfinite(v).all():
        raise InvalidParameterError("select_budget needs finite scores.")
    candidates = np.flatnonzero((v > 0) & (c <= budget))
    integral = np.all(c[candidates] == np.round(c[candidates])) and budget == np.floor(budget)
    cells = len(candidates) * (int(budget) + 1) if integral else np.inf
    if method == "exact" and not integral:
        raise InvalidParameterError("method='exact' needs integer costs and an integer budget.")
    if method == "exact" or (method == "auto" and cells <= _DP_MAX_CELLS):
        chosen = _knapsack_exact(v[candidates], c[candidates].astype(np.int64), int(budget))
    else:
        chosen = _knapsack_greedy(v[candidates], c[candidates], budget)
    keep = candidates[chosen]
    return scores.take(keep[rank_order(v[keep])])


def _knapsack_exact(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    n = len(values)
    best = np.zeros(budget + 1)
    took = np.zeros((n, budget + 1), dtype=bool)
    for i in range(n):
        w = costs[i]
        if w == 0:
            best += values[i]
            took[i, :] = True
            continue
        cand = best[: budget + 1 - w] + values[i]
        better = cand > best[w:]
        took[i, w:] = better
        best[w:] = np.where(better, cand, best[w:])
    chosen, cap = [], budget
    for i in range(n - 1, -1, -1):
        if took[i, cap]:
            chosen.append(i)
            cap -= costs[i]
    return np.array(sorted(chosen), dtype=np.int64)


def _knapsack_greedy(values: np.ndarray, costs: np.ndarray, budget: float) -> np.ndarray:
    if len(values) == 0:
        return np.array([], dtype=np.int64)
    with np.errstate(divide="ignore"):
        density = np.where(costs > 0, values / np.where(costs > 0, costs, 1), np.inf)
    chosen, spent = [], 0.0
    for i in np.argsort(-density, kind="stable"):
        if spent + costs[i] <= budget:
            chosen.append(i)
            spent += costs[i]
    best_single = int(np.argmax(values))
    if values[best_single] > values[chosen].sum():
        chosen = [best_single]
    return np.array(sorted(chosen), dtype=np.int64)

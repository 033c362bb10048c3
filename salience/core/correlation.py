"""Agreement between rankings: Kendall tau-b, Spearman rho, rank-biased overlap, Jaccard@k,
perfect-match ratio.

Score-based measures (tau-b, rho) take two :class:`~salience.Scores` (matched by id over the
items both hold) or two equal-length arrays. List-based measures (RBO, Jaccard@k) take two
rankings as id sequences, best first, which may differ in length and content.

References
----------
Kendall. The treatment of ties in ranking problems. Biometrika 1945 (tau-b).
Webber, Moffat and Zobel. A similarity measure for indefinite rankings. TOIS 2010 (RBO).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from salience.core.scores import Scores
from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["kendall_tau", "spearman_rho", "rank_biased_overlap", "jaccard_at_k", "perfect_match_ratio"]


def _paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(a, Scores) and isinstance(b, Scores):
        index = b._id_index()
        common = [i for i, item in enumerate(a.ids) if item in index]
        if not common and len(a) and len(b):
            from salience.exceptions import IdMismatchError

            raise IdMismatchError(f"the two Scores share no ids ({len(a)} and {len(b)} items, e.g. {a.ids[0]!r} and "
                                  f"{b.ids[0]!r}): there is nothing to correlate. Score the same items in both.")
        x = a.values[common]
        y = b.values[[index[a.ids[i]] for i in common]]
    else:
        x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1:
            raise ShapeError(f"need two one-dimensional arrays of equal length; got shapes {x.shape} and {y.shape}.")
    if np.isnan(x).any() or np.isnan(y).any():
        raise InvalidParameterError("rank correlation needs scores without NaN.")
    return x, y


def kendall_tau(a, b) -> float:
    """Kendall's tau-b (ties in either ranking handled as Kendall 1945); NaN when undefined.

    >>> kendall_tau([1, 2, 3, 4], [1, 3, 2, 4])
    0.6666666666666666
    """
    x, y = _paired(a, b)
    n = len(x)
    if n < 2:
        return float("nan")
    concordance = 0.0
    pairs_x = pairs_y = 0.0
    block = max(1, 2_000_000 // n)  # bound the pairwise sign matrices' memory
    for start in range(0, n, block):
        sx = np.sign(x[start : start + block, None] - x[None, :])
        sy = np.sign(y[start : start + block, None] - y[None, :])
        concordance += float((sx * sy).sum())
        pairs_x += float(np.abs(sx).sum())
        pairs_y += float(np.abs(sy).sum())
    if pairs_x == 0 or pairs_y == 0:
        return float("nan")
    return float(concordance / np.sqrt(pairs_x * pairs_y))


def _average_ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    sorted_v = v[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_v)) + 1))
    ends = np.concatenate((starts[1:], [len(v)]))
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return ranks


def spearman_rho(a, b) -> float:
    """Spearman's rho: Pearson correlation of average ranks; NaN when a side is constant.

    >>> spearman_rho([1, 2, 3, 4], [1, 3, 2, 4])
    0.8
    """
    x, y = _paired(a, b)
    if len(x) < 2:
        return float("nan")
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def _ranking(r, name: str) -> list:
    if isinstance(r, Scores):
        return r.ranked_ids()
    if isinstance(r, (str, bytes)) or not isinstance(r, Sequence):
        raise InvalidParameterError(f"{name} must be a sequence of ids (best first) or Scores.")
    r = list(r)
    if len(set(r)) != len(r):
        raise InvalidParameterError(f"{name} lists an item twice.")
    return r


def rank_biased_overlap(a: Sequence[Hashable] | Scores, b: Sequence[Hashable] | Scores, p: float = 0.9) -> float:
    """Extrapolated rank-biased overlap (Webber et al. 2010, eq. 32) of two rankings that may
    differ in length and content; 1 for identical rankings, 0 for disjoint ones. ``p`` sets
    the top-weightedness (the top ``1 / (1 - p)`` ranks carry most weight).

    >>> rank_biased_overlap(["a", "b", "c"], ["a", "b", "c"])
    1.0
    """
    if not 0.0 < p < 1.0:
        raise InvalidParameterError(f"p must be in (0, 1); got {p}.")
    S, L = _ranking(a, "first ranking"), _ranking(b, "second ranking")
    if len(S) > len(L):
        S, L = L, S
    s, l = len(S), len(L)
    if l == 0:
        return 1.0
    if s == 0:
        return 0.0
    seen_s, seen_l = set(), set()
    overlap = 0
    X = np.zeros(l + 1)
    for d in range(1, l + 1):
        if d <= s:
            x = S[d - 1]
            if x in seen_l:
                overlap += 1
            seen_s.add(x)
        y = L[d - 1]
        if y in seen_s:
            overlap += 1
        seen_l.add(y)
        X[d] = overlap
    d = np.arange(1, l + 1)
    total = float((X[1:] / d * p**d).sum())
    tail = d > s
    total += float((X[s] * (d[tail] - s) / (s * d[tail]) * p ** d[tail]).sum())
    return float((1 - p) / p * total + ((X[l] - X[s]) / l + X[s] / s) * p**l)


def jaccard_at_k(a, b, *, k: int) -> float:
    """|top-k(a) ∩ top-k(b)| / |top-k(a) ∪ top-k(b)| (1 when both are empty)."""
    k = check_k(k)
    A, B = set(_ranking(a, "first ranking")[:k]), set(_ranking(b, "second ranking")[:k])
    return len(A & B) / len(A | B) if A | B else 1.0


def perfect_match_ratio(predicted: Sequence[Sequence[Hashable]], gold: Sequence[Sequence[Hashable]]) -> float:
    """Share of rankings predicted exactly (PMR, as in sentence ordering).

    >>> perfect_match_ratio([["a", "b"], ["c", "d"]], [["a", "b"], ["d", "c"]])
    0.5
    """
    if len(predicted) != len(gold):
        raise ShapeError(f"{len(predicted)} predicted rankings for {len(gold)} gold ones.")
    if not gold:
        raise InvalidParameterError("perfect_match_ratio needs at least one ranking.")
    return sum(list(p) == list(g) for p, g in zip(predicted, gold)) / len(gold)

"""Selectors: turn ``Scores`` into a chosen subset.

Every selector takes ``Scores`` and returns ``Scores`` of the chosen items in rank order
(higher score first, ties by position), so selections compose with the rest of the core.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from salience.core.base import FunctionMethod, function_method, register
from salience.core.checks import check_k
from salience.core.params import SEED, Interval, Options, validate_params
from salience.core.scores import Scores, rank_order
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = [
    "check_k",
    "select_top_k",
    "select_threshold",
    "select_fraction",
    "select_budget",
    "select_mmr",
    "select_facility_location",
    "select_coverage",
    "select_cutoff",
    "expected_f1",
    "sample_positions",
    "select_sample",
    "SAMPLING",
    "expected_dcg_gain",
]

SAMPLING = ("gumbel", "topk", "replacement")

# Exact knapsack DP runs when n * (budget + 1) stays below this many cells.
_DP_MAX_CELLS = 20_000_000


@validate_params({"k": [Interval("int", 1)]})
def select_top_k(scores: Scores, *, k: int) -> Scores:
    """The ``k`` best items (``k`` above the number of items is clamped).

    >>> select_top_k(Scores([1, 3, 2], ids="abc"), k=2).ids
    ['b', 'c']
    """
    return scores.top_k(k)


@validate_params({"threshold": [Interval("real")], "inclusive": [bool]})
def select_threshold(scores: Scores, *, threshold: float, inclusive: bool = True) -> Scores:
    """Items whose score is ``>= threshold`` (or ``>`` with ``inclusive=False``).

    >>> select_threshold(Scores([1, 3, 2], ids="abc"), threshold=2).ids
    ['b', 'c']
    """
    threshold = float(threshold)
    mask = scores.values >= threshold if inclusive else scores.values > threshold
    keep = np.flatnonzero(mask)
    return scores.take(keep[rank_order(scores.values[keep])])


@validate_params({"budget": [Interval("real", 0)], "method": [Options(("auto", "exact", "greedy"))]})
def select_budget(scores: Scores, costs: Sequence[float], *, budget: float, method: str = "auto") -> Scores:
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

    >>> select_budget(Scores([6, 10, 12], ids="abc"), [1, 2, 3], budget=5).ids
    ['c', 'b']
    """
    c = np.asarray(costs, dtype=np.float64)
    if c.shape != scores.values.shape:
        raise ShapeError(f"select_budget needs one cost per item; got {len(c)} costs for {len(scores)} items.")
    if not np.isfinite(c).all() or (c < 0).any():
        raise InvalidParameterError("costs must be finite and non-negative.")
    budget = float(budget)
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


@validate_params({"fraction": [Interval("real", 0, 1, closed="right")]})
def select_fraction(scores: Scores, *, fraction: float) -> Scores:
    """The best ``ceil(fraction * n)`` items (``0 < fraction <= 1``).

    >>> select_fraction(Scores([1, 3, 2, 0], ids="abcd"), fraction=0.5).ids
    ['b', 'c']
    """
    fraction = float(fraction)
    if len(scores) == 0:
        return scores.take([])
    return scores.top_k(max(1, int(np.ceil(fraction * len(scores) - 1e-12))))


def _similarity_matrix(similarity, n: int, name: str = "similarity") -> np.ndarray:
    S = np.asarray(similarity, dtype=np.float64)
    if S.shape != (n, n):
        raise ShapeError(f"{name} must be an {n}x{n} matrix (one row and column per item); got shape {S.shape}.")
    if not np.isfinite(S).all():
        raise InvalidParameterError(f"{name} holds NaN or inf.")
    return S


@validate_params({"k": [Interval("int", 1)], "diversity": [Interval("real", 0, 1)],
                  "normalize": [None, str]})
def select_mmr(scores: Scores, similarity, *, k: int, diversity: float = 0.3, normalize: str | None = None) -> Scores:
    """Maximal marginal relevance (Carbonell and Goldstein, 1998): greedily add the item
    maximising ``(1 - diversity) * relevance - diversity * max similarity to those chosen``.

    Relevance is ``scores`` as given, so put them on the similarity's scale (cosine
    similarities to the query, say) or pass ``normalize="minmax"``. The result's values are the
    marginal relevance of each item when it was chosen: they never increase along the selection
    (an item's marginal relevance only falls as the chosen set grows), so the Scores rank in
    selection order.

    >>> S = [[1, .9, 0], [.9, 1, 0], [0, 0, 1]]
    >>> select_mmr(Scores([1.0, 0.9, 0.5], ids="abc"), S, k=2, diversity=0.5).ids
    ['a', 'c']
    """
    n = len(scores)
    S = _similarity_matrix(similarity, n)
    relevance = scores.normalize(normalize).values if normalize and n else scores.values
    chosen: list[int] = []
    gains: list[float] = []
    max_sim = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        gain = (1 - diversity) * relevance - diversity * penalty
        gain[~available] = -np.inf
        best = int(np.argmax(gain))  # first maximum: ties by position
        chosen.append(best)
        gains.append(float(gain[best]))
        available[best] = False
        max_sim = np.maximum(max_sim, S[:, best])
    # rounding can lift a later gain a hair above an earlier one: keep the values non-increasing
    values = np.minimum.accumulate(np.array(gains)) if gains else np.zeros(0)
    return Scores(values, ids=[scores.ids[i] for i in chosen]) if chosen else scores.take([])


@validate_params({"k": [Interval("int", 1)]})
def select_facility_location(similarity, *, k: int, ids=None, weights=None) -> Scores:
    """Facility location: ``k`` items that best represent all, maximising
    ``sum_i w_i max_{j in S} sim(i, j)`` (similarities >= 0), by lazy greedy ((1 - 1/e)-optimal).

    Values are the marginal gains, in selection order.
    """
    S = np.asarray(similarity, dtype=np.float64)
    n = S.shape[0] if S.ndim == 2 else -1
    S = _similarity_matrix(S, n)
    if (S < 0).any():
        raise InvalidParameterError("facility location needs non-negative similarities (shift or clip them).")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
        raise InvalidParameterError(f"weights needs {n} finite, non-negative numbers.")
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ShapeError(f"{len(ids)} ids for {n} items.")
    coverage = np.zeros(n)

    def gain(j, chosen):
        return float((w * np.maximum(S[:, j] - coverage, 0.0)).sum())

    order: list[int] = []
    gains: list[float] = []
    for j in _lazy_greedy_with_state(n, k, gain, order, gains):
        coverage[:] = np.maximum(coverage, S[:, j])
    return Scores(gains, ids=[ids[j] for j in order])


def _lazy_greedy_with_state(n, k, gain_of, order, gains):
    """Lazy greedy maximisation of a monotone submodular function (Minoux, 1978).

    ``gain_of(i, order)`` is the marginal gain of item ``i``; stale upper bounds sit in a heap
    and are refreshed only when they reach the top. Yields each choice so the caller can update
    its state before the next gain is asked.
    """
    import heapq

    heap = [(-gain_of(i, order), i, 0) for i in range(n)]
    heapq.heapify(heap)
    while heap and len(order) < k:
        neg, i, stamp = heapq.heappop(heap)
        if stamp == len(order):
            if -neg <= 0:
                return
            order.append(i)
            gains.append(-neg)
            yield i
        else:
            heapq.heappush(heap, (-gain_of(i, order), i, len(order)))


@validate_params({"k": [Interval("int", 1)]})
def select_coverage(concepts, *, k: int, ids=None, concept_weights=None) -> Scores:
    """Weighted coverage: ``k`` items covering the most concept weight, by lazy greedy.

    ``concepts`` is one iterable of concept keys per item (or a 0/1 items x concepts matrix).
    Values are the marginal gains, in selection order.

    >>> select_coverage([{"a", "b"}, {"b"}, {"c"}], k=2, ids=["x", "y", "z"]).ids
    ['x', 'z']
    """
    if isinstance(concepts, np.ndarray):
        if concepts.ndim != 2:
            raise ShapeError(f"a coverage matrix must be items x concepts; got shape {concepts.shape}.")
        sets = [set(np.flatnonzero(row).tolist()) for row in concepts]
    else:
        sets = [set(c) for c in concepts]
    n = len(sets)
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ShapeError(f"{len(ids)} ids for {n} items.")
    weight = dict(concept_weights or {})
    covered: set = set()

    def gain(j, chosen):
        return float(sum(weight.get(c, 1.0) for c in sets[j] - covered))

    order: list[int] = []
    gains: list[float] = []
    for j in _lazy_greedy_with_state(n, k, gain, order, gains):
        covered |= sets[j]
    return Scores(gains, ids=[ids[j] for j in order])


def _poisson_binomial(p: np.ndarray) -> np.ndarray:
    """Distribution of the number of successes of independent Bernoulli(p_i)."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for i, q in enumerate(p):
        dist[1 : i + 2] = dist[1 : i + 2] * (1 - q) + dist[: i + 1] * q
        dist[0] *= 1 - q
    return dist


def expected_f1(probabilities: Sequence[float]) -> np.ndarray:
    """Exact expected F1 of returning the top ``k`` items, for ``k = 0..n``, given independent
    relevance probabilities in rank order (F1 is taken as 1 when nothing is relevant and nothing
    is returned)."""
    p = np.asarray(probabilities, dtype=np.float64)
    n = len(p)
    # suffix[k]: distribution of relevant items among positions k..n-1
    suffix = [None] * (n + 1)
    suffix[n] = np.array([1.0])
    for k in range(n - 1, -1, -1):
        prev = suffix[k + 1]
        cur = np.zeros(len(prev) + 1)
        cur[:-1] += prev * (1 - p[k])
        cur[1:] += prev * p[k]
        suffix[k] = cur
    out = np.zeros(n + 1)
    out[0] = suffix[0][0]  # F1 = 1 only when nothing is relevant
    prefix = np.array([1.0])
    for k in range(1, n + 1):
        nxt = np.zeros(len(prefix) + 1)
        nxt[:-1] += prefix * (1 - p[k - 1])
        nxt[1:] += prefix * p[k - 1]
        prefix = nxt
        a = np.arange(len(prefix))[:, None]  # relevant among the returned
        b = np.arange(len(suffix[k]))[None, :]  # relevant among the rest
        f1 = 2 * a / (k + a + b)
        out[k] = float((prefix[:, None] * suffix[k][None, :] * f1).sum())
    return out


def expected_dcg_gain(probabilities: Sequence[float]) -> np.ndarray:
    """Expected truncated DCG for ``k = 0..n`` when a relevant item gains +1 and a non-relevant
    one costs 1 (the truncation objective of Lien et al., 2019): ``sum_{i<=k} (2 p_i - 1) / log2(i + 1)``."""
    p = np.asarray(probabilities, dtype=np.float64)
    gains = (2 * p - 1) / np.log2(np.arange(2, len(p) + 2))
    return np.concatenate(([0.0], np.cumsum(gains)))


@validate_params({"objective": [Options(("f1", "dcg"))]})
def select_cutoff(scores: Scores, *, objective: str = "f1") -> Scores:
    """Keep the top ``k`` items, ``k`` chosen to maximise the expected ``objective`` given
    per-item relevance probabilities (the scores, which must lie in [0, 1]).

    ``f1``: exact expected F1 (Poisson-binomial dynamic programme, O(n^2) memory, O(n^3) time).
    ``dcg``: expected DCG with -1 gain for non-relevant items (so the list can end early).
    """
    ranked = scores.sorted()
    p = ranked.values
    if ((p < 0) | (p > 1)).any():
        raise InvalidParameterError("select_cutoff needs relevance probabilities in [0, 1]; calibrate the scores first.")
    curve = expected_f1(p) if objective == "f1" else expected_dcg_gain(p)
    k = int(np.argmax(curve))  # first maximum: the shortest best list
    return ranked.take(np.arange(k))


@validate_params({"k": [None, Interval("int", 0)], "sampling": [Options(SAMPLING)], "seed": SEED})
def sample_positions(log_weights: np.ndarray, *, k: int | None = None, sampling: str = "gumbel", seed: int | None = 0,
             eligible: np.ndarray | None = None, groups: np.ndarray | None = None,
             quotas: Mapping[object, int] | None = None) -> np.ndarray:
    """Positions of the selected documents (each once, except with ``sampling="replacement"``).

    ``gumbel``: add Gumbel(0, 1) noise to the log weights and keep the top ``k`` — a sample
    without replacement with probability proportional to the weights; ``topk``: the ``k``
    largest weights (ties by position); ``replacement``: ``k`` independent draws in proportion
    to the weights. ``eligible`` masks documents out (too short, say). ``groups`` with
    ``quotas`` ({group: count}) selects within each group; groups without a quota get none.

    >>> sample_positions(np.log([1.0, 5.0, 3.0]), k=2, sampling="topk").tolist()
    [1, 2]
    """
    w = np.asarray(log_weights, dtype=np.float64)
    if w.ndim != 1:
        raise InvalidParameterError(f"log_weights must be one-dimensional; got shape {w.shape}.")
    bad = np.flatnonzero(np.isnan(w) | (w == np.inf))
    if len(bad):  # -inf is a weight of zero (never drawn); NaN and +inf are no weight at all
        raise InvalidParameterError(f"log_weights holds {w[bad[0]]} at position {bad[0]} ({len(bad)} such values); "
                                    "give finite log weights, or -inf for a document never to draw.")
    mask = np.isfinite(w) if eligible is None else (np.asarray(eligible, dtype=bool) & np.isfinite(w))
    if quotas is not None:
        if groups is None:
            raise InvalidParameterError("quotas need groups: one group label per document.")
        groups = np.asarray(groups)
        if len(groups) != len(w):
            raise InvalidParameterError(f"groups has {len(groups)} labels for {len(w)} documents.")
        rng = np.random.default_rng(seed)
        chosen = []
        for label, quota in quotas.items():
            if quota <= 0:
                continue
            members = np.flatnonzero(mask & (groups == label))
            picked = _resample(w[members], int(quota), sampling, rng, f"group {label!r}")
            chosen.append(members[picked])
        return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
    k = check_k(k)
    members = np.flatnonzero(mask)
    picked = _resample(w[members], int(k), sampling, np.random.default_rng(seed), "the pool")
    return members[picked] if sampling == "replacement" else np.sort(members[picked])


def _resample(w: np.ndarray, k: int, sampling: str, rng: np.random.Generator, what: str) -> np.ndarray:
    n = len(w)
    if sampling != "replacement" and k > n:
        raise InvalidParameterError(f"k={k} is larger than {what} ({n} eligible documents); without replacement "
                                    "at most that many can be selected. Lower k or use sampling='replacement'.")
    if n == 0:
        raise InvalidParameterError(f"{what} has no eligible documents to sample from.")
    if sampling == "replacement":
        p = np.exp(w - w.max())
        return rng.choice(n, size=k, replace=True, p=p / p.sum())
    keys = w + rng.gumbel(size=n) if sampling == "gumbel" else w
    if k == n:
        return np.arange(n)
    top = np.argpartition(-keys, k - 1)[:k]
    return top[np.lexsort((top, -keys[top]))]


@validate_params({"k": [None, Interval("int", 0)], "sampling": [Options(SAMPLING)], "seed": SEED,
                  "quotas": [None, dict]})
def select_sample(scores: Scores, *, k: int | None = None, sampling: str = "gumbel", seed: int | None = 0,
                  groups=None, quotas=None) -> Scores:
    """Importance resampling as a selector: ``k`` items drawn in proportion to ``exp(score)``
    (scores are log weights; ``-inf`` marks an ineligible item). ``gumbel`` samples without
    replacement (Gumbel top-k), ``topk`` keeps the best, ``replacement`` draws independently (an
    item drawn twice appears once, its value the number of draws). ``groups`` with ``quotas``
    samples within each group. The result is in rank order of the drawn keys' items.

    >>> select_sample(Scores(np.log([1.0, 5.0, 3.0]), ids="abc"), k=2, sampling="topk").ids
    ['b', 'c']
    """
    positions = sample_positions(scores.values, k=k, sampling=sampling, seed=seed, groups=groups, quotas=quotas)
    if sampling == "replacement":
        counts = np.bincount(positions, minlength=len(scores))
        drawn = np.flatnonzero(counts)
        return Scores(counts[drawn].astype(float), ids=[scores.ids[i] for i in drawn]).sorted()
    return scores.take(positions[rank_order(scores.values[positions])])



class Selector(FunctionMethod):
    """Base of the selectors: one subclass per selection function, its parameters the
    function's; ``score(scores)`` is the selection (``groups`` is given per call).

    >>> from salience.core.base import create
    >>> create("select", "top_k", k=2).score(Scores([1, 3, 2], ids="abc")).ids
    ['b', 'c']
    """

    per_call = ("groups",)


for _method, _function, _class, _description in (
    ("top_k", select_top_k, "TopK", "the k best items, ties by position"),
    ("threshold", select_threshold, "Threshold", "items scoring at least a threshold"),
    ("fraction", select_fraction, "Fraction", "the best ceil(fraction * n) items"),
    ("cutoff", select_cutoff, "Cutoff",
     "the top k with k maximising expected F1 or DCG of calibrated probabilities (Lien et al., 2019)"),
    ("sample", select_sample, "Sample",
     "importance resampling: Gumbel top-k, top-k or with replacement, optional per-group quotas"),
):
    register("select", _method, function_method(Selector, _function, _class), _description)

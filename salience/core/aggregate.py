"""Rank aggregation: one consensus ranking from many full or partial rankings, or from
pairwise wins.

Positional and majority methods take ``rankings`` (sequences of item ids, best first; a
partial ranking places its items above the items it leaves out). Matrix methods take a win
matrix ``W`` with ``W[i, j]`` the (weighted) number of times item ``i`` beat item ``j``;
:func:`pairwise_wins` builds it from rankings, as JointRank derives implicit comparisons from
block rankings. Every method returns :class:`~salience.Scores` (higher is better).

References
----------
Dwork, Kumar, Naor and Sivakumar. Rank aggregation methods for the web. WWW 2001 (MC4, Kemeny).
Ailon, Charikar and Newman. Aggregating inconsistent information: ranking and clustering. JACM 2008 (KwikSort).
Hunter. MM algorithms for generalized Bradley-Terry models. Annals of Statistics 2004.
Davidson. On extending the Bradley-Terry model to accommodate ties. JASA 1970.
Page, Brin, Motwani and Winograd. The PageRank citation ranking. 1999.
Dedov. JointRank: rank large sets with single queries. 2025.
"""

from __future__ import annotations

import abc
from typing import Any, Hashable, Sequence

import numpy as np

from salience.core.graph import pagerank_scores
from salience.core.base import Scorer, register_method
from salience.core.params import Interval, Options
from salience.core.scores import Scores, first_duplicate
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError, unknown_choice

__all__ = [
    "aggregate",
    "pairwise_wins",
    "borda",
    "copeland",
    "kemeny",
    "kemeny_distance",
    "markov_chain",
    "pagerank",
    "win_rate",
    "bradley_terry",
]



def _universe(rankings: Sequence[Sequence[Hashable]], items: Sequence[Hashable] | None) -> tuple[list, dict]:
    if isinstance(rankings, (str, bytes)) or not isinstance(rankings, Sequence):
        raise InvalidParameterError("rankings must be a list of rankings, each a list of item ids (best first).")
    for r, ranking in enumerate(rankings):
        if isinstance(ranking, (str, bytes)):
            raise InvalidParameterError(f"ranking {r} is a string; pass a list of item ids.")
        dup = first_duplicate(ranking)
        if dup is not None:
            raise IdMismatchError(f"ranking {r} lists item {dup!r} twice.")
    if items is None:
        items = list(dict.fromkeys(i for ranking in rankings for i in ranking))
    else:
        items = list(items)
        known = set(items)
        for r, ranking in enumerate(rankings):
            unknown = [i for i in ranking if i not in known]
            if unknown:
                raise IdMismatchError(f"ranking {r} holds item {unknown[0]!r}, which is not among the {len(items)} items.")
    return items, {item: i for i, item in enumerate(items)}


def _weights(weights, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
        raise InvalidParameterError(f"weights needs one finite, non-negative number per ranking ({n}).")
    return w


def pairwise_wins(
    rankings: Sequence[Sequence[Hashable]],
    items: Sequence[Hashable] | None = None,
    weights: Sequence[float] | None = None,
    *,
    unranked: str = "below",
) -> tuple[list, np.ndarray]:
    """``(items, W)`` with ``W[i, j]`` = weight of rankings placing item ``i`` above item ``j``.

    ``unranked="below"`` reads each ranking as a top list: an item it holds beats every item it
    leaves out. ``unranked="ignore"`` reads it as a ranking of its own items only (a JointRank
    block): items it leaves out are not compared. Two left-out items are never compared.

    >>> items, W = pairwise_wins([["a", "b", "c"], ["b", "a"]])
    >>> W.tolist()
    [[0.0, 1.0, 2.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0]]
    """
    if unranked not in ("below", "ignore"):
        raise unknown_choice("unranked", unranked, ("below", "ignore"))
    items, index = _universe(rankings, items)
    w = _weights(weights, len(rankings))
    n = len(items)
    W = np.zeros((n, n))
    for weight, ranking in zip(w, rankings):
        pos = np.array([index[i] for i in ranking], dtype=np.int64)
        if len(pos) == 0:
            continue
        upper = np.triu(np.ones((len(pos), len(pos)), dtype=bool), k=1)
        rows, cols = np.nonzero(upper)
        W[pos[rows], pos[cols]] += weight
        left_out = np.setdiff1d(np.arange(n), pos) if unranked == "below" else np.zeros(0, dtype=np.int64)
        if len(left_out):
            W[np.repeat(pos, len(left_out)), np.tile(left_out, len(pos))] += weight
    return items, W


def borda(rankings, items=None, *, weights=None, unranked: str = "below") -> Scores:
    """Borda count: the item at 0-based position ``i`` gets ``n - i`` points; items a ranking
    leaves out share its remaining points equally, ``(n - len + 1) / 2`` each.

    With ``unranked="ignore"`` (rankings of subsets, such as JointRank blocks) an item scores
    the mean of ``1 - i / m`` over the rankings that hold it (``m`` items each).

    >>> borda([["a", "b", "c"], ["b", "a", "c"], ["b", "c"]]).ranked_ids()
    ['b', 'a', 'c']
    """
    if unranked not in ("below", "ignore"):
        raise unknown_choice("unranked", unranked, ("below", "ignore"))
    items, index = _universe(rankings, items)
    w = _weights(weights, len(rankings))
    n = len(items)
    points = np.zeros(n)
    held = np.zeros(n)
    for weight, ranking in zip(w, rankings):
        pos = [index[i] for i in ranking]
        if unranked == "ignore":
            m = len(ranking)
            points[pos] += weight * (1 - np.arange(m) / max(m, 1))
            held[pos] += weight
            continue
        contribution = np.full(n, (n - len(ranking) + 1) / 2)
        contribution[pos] = n - np.arange(len(ranking))
        points += weight * contribution
    if unranked == "ignore":
        points = np.where(held > 0, points / np.where(held > 0, held, 1.0), 0.0)
    return Scores(points, ids=items)


def _check_matrix(W, ids) -> tuple[np.ndarray, list]:
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ShapeError(f"a win matrix must be square; got shape {W.shape}.")
    if not np.isfinite(W).all() or (W < 0).any():
        raise InvalidParameterError("a win matrix must hold finite, non-negative counts.")
    ids = list(range(len(W))) if ids is None else list(ids)
    if len(ids) != len(W):
        raise ShapeError(f"win matrix has {len(W)} rows but {len(ids)} ids were given.")
    W = W.copy()
    np.fill_diagonal(W, 0.0)
    return W, ids


def copeland(rankings, items=None, *, weights=None) -> Scores:
    """Copeland: pairwise majority wins plus half the majority ties (over compared pairs)."""
    items, W = pairwise_wins(rankings, items, weights)
    return _copeland_from_matrix(W, items)


def _copeland_from_matrix(W: np.ndarray, items: list) -> Scores:
    compared = (W + W.T) > 0
    score = ((W > W.T) & compared).sum(axis=1) + 0.5 * ((W == W.T) & compared).sum(axis=1)
    return Scores(score, ids=items)


def kemeny_distance(order: Sequence[int], W: np.ndarray) -> float:
    """Total weight of pairwise preferences ``order`` (positions into ``W``) disagrees with."""
    order = np.asarray(order)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    after = rank[:, None] > rank[None, :]  # after[i, j]: i is placed after j
    return float(W[after].sum())


def _kemeny_exact(W: np.ndarray) -> list[int]:
    n = len(W)
    full = (1 << n) - 1
    cost = np.full(1 << n, np.inf)
    choice = np.zeros(1 << n, dtype=np.int64)
    cost[0] = 0.0
    # penalty[j][mask]: preferences for j over the items already placed in mask
    penalty = np.zeros((n, 1 << n))
    for mask in range(1, 1 << n):
        low = (mask & -mask).bit_length() - 1
        penalty[:, mask] = penalty[:, mask & (mask - 1)] + W[:, low]
    for mask in range(1 << n):
        if not np.isfinite(cost[mask]):
            continue
        for j in range(n):
            if mask >> j & 1:
                continue
            nxt = mask | (1 << j)
            c = cost[mask] + penalty[j, mask]
            if c < cost[nxt]:
                cost[nxt], choice[nxt] = c, j
    order, mask = [], full
    while mask:
        j = int(choice[mask])
        order.append(j)
        mask &= ~(1 << j)
    return order[::-1]


def _kwiksort(W: np.ndarray, members: list[int], rng: np.random.Generator) -> list[int]:
    if len(members) <= 1:
        return members
    pivot = members[rng.integers(len(members))]
    left = [i for i in members if i != pivot and W[i, pivot] > W[pivot, i]]
    right = [i for i in members if i != pivot and W[i, pivot] <= W[pivot, i]]
    return _kwiksort(W, left, rng) + [pivot] + _kwiksort(W, right, rng)


def _improve_by_insertion(W: np.ndarray, order: list[int]) -> list[int]:
    """Move single items to their best position while that lowers the Kemeny cost."""
    order = list(order)
    improved = True
    while improved:
        improved = False
        for pos in range(len(order)):
            item = order[pos]
            rest = order[:pos] + order[pos + 1 :]
            # cost of placing item at slot s: preferences for item over rest[:s] + for rest[s:] over item
            before = np.concatenate(([0.0], np.cumsum(W[item, rest])))
            after = np.concatenate((np.cumsum(W[rest, item][::-1])[::-1], [0.0]))
            slot = int(np.argmin(before + after))
            current = before[pos] + after[pos]
            if before[slot] + after[slot] < current - 1e-12:
                order = rest[:slot] + [item] + rest[slot:]
                improved = True
    return order


def kemeny(rankings, items=None, *, weights=None, exact_max: int = 10, restarts: int = 8, seed: int = 0) -> Scores:
    """Kemeny-Young consensus: the order minimising total pairwise disagreement.

    Exact (dynamic programming over subsets) up to ``exact_max`` items; beyond, the best of
    ``restarts`` KwikSort runs, each refined by single-item insertion moves.
    """
    items, W = pairwise_wins(rankings, items, weights)
    return _kemeny_from_matrix(W, items, exact_max, restarts, seed)


def _kemeny_from_matrix(W, items, exact_max=10, restarts=8, seed=0) -> Scores:
    n = len(items)
    if n <= exact_max:
        order = _kemeny_exact(W) if n else []
    else:
        rng = np.random.default_rng(seed)
        start = list(np.argsort(-(W.sum(axis=1) - W.sum(axis=0)), kind="stable"))  # Copeland-like seed
        candidates = [start] + [_kwiksort(W, list(range(n)), rng) for _ in range(restarts)]
        refined = [_improve_by_insertion(W, c) for c in candidates]
        order = min(refined, key=lambda o: kemeny_distance(o, W))
    values = np.empty(n)
    values[np.asarray(order, dtype=np.int64)] = n - np.arange(n)
    return Scores(values, ids=items)


def _stationary(P: np.ndarray, tol: float = 1e-12, max_iter: int = 10_000) -> np.ndarray:
    n = len(P)
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        nxt = x @ P
        if np.abs(nxt - x).sum() < tol:
            return nxt
        x = nxt
    return x


def markov_chain(rankings, items=None, *, weights=None, teleport: float = 0.05) -> Scores:
    """MC4 (Dwork et al.): from item ``i`` pick ``j`` uniformly and move there if a majority of
    the rankings that compare them put ``j`` above ``i``; the stationary probability is the score.
    ``teleport`` mixes in a uniform jump so the chain is ergodic."""
    items, W = pairwise_wins(rankings, items, weights)
    return _markov_chain_from_matrix(W, items, teleport=teleport)


def _markov_chain_from_matrix(W: np.ndarray, items: list, *, teleport: float = 0.05) -> Scores:
    if not 0.0 <= teleport < 1.0:
        raise InvalidParameterError(f"teleport must be in [0, 1); got {teleport}.")
    n = len(items)
    if n == 0:
        return Scores([], ids=[])
    move = (W.T > W).astype(float) / n  # move[i, j]: j beats i by majority
    np.fill_diagonal(move, 0.0)
    P = move + np.diag(1.0 - move.sum(axis=1))
    P = (1 - teleport) * P + teleport / n
    return Scores(_stationary(P), ids=items)


def pagerank(W, ids=None, *, damping: float = 0.85) -> Scores:
    """PageRank over the comparison graph: each loser links to its winners, weighted by wins."""
    W, ids = _check_matrix(W, ids)
    n = len(W)
    if n == 0:
        return Scores([], ids=[])
    if not 0.0 <= damping < 1.0:
        raise InvalidParameterError(f"damping must be in [0, 1); got {damping}.")
    # each loser links to its winners: edge i -> j weighted by the wins of j over i
    return Scores(pagerank_scores(W.T, damping), ids=ids)


def win_rate(W, ids=None) -> Scores:
    """Share of an item's comparisons that it won (0.5 for an item never compared)."""
    W, ids = _check_matrix(W, ids)
    games = W.sum(axis=1) + W.sum(axis=0)
    return Scores(np.where(games > 0, W.sum(axis=1) / np.where(games > 0, games, 1.0), 0.5), ids=ids)


def bradley_terry(W, ids=None, *, ties=None, prior: float = 0.1, max_iter: int = 500) -> Scores:
    """Bradley-Terry maximum likelihood: ``P(i beats j) = p_i / (p_i + p_j)``; returns ``log p``.

    ``ties[i, j]`` (symmetric) counts draws, modelled as in Davidson (1970):
    ``P(tie) = nu sqrt(p_i p_j) / (p_i + p_j + nu sqrt(p_i p_j))`` with ``nu`` fitted too.
    ``prior`` adds that many virtual wins and losses against an average item, so the estimate
    exists when an item never lost (or never won). Log-strengths are centred on 0.
    """
    from scipy.optimize import minimize

    W, ids = _check_matrix(W, ids)
    n = len(W)
    if n == 0:
        return Scores([], ids=[])
    T = np.zeros_like(W) if ties is None else np.asarray(ties, dtype=np.float64)
    if T.shape != W.shape or not np.isfinite(T).all() or (T < 0).any() or not np.allclose(T, T.T):
        raise InvalidParameterError("ties must be a symmetric, non-negative matrix shaped like W.")
    T = np.triu(T, k=1)  # each draw once
    has_ties = T.sum() > 0

    games = W + T  # pairs whose outcome depends on the shared denominator

    def objective(params):
        theta = params[:n]
        mid = 0.5 * (theta[:, None] + theta[None, :])
        stack = [np.broadcast_to(theta[:, None], (n, n)), np.broadcast_to(theta[None, :], (n, n))]
        if has_ties:
            stack.append(params[n] + mid)
        log_den = np.logaddexp.reduce(np.stack(stack), axis=0)
        p_first = np.exp(theta[:, None] - log_den)  # P(i beats j)
        p_second = np.exp(theta[None, :] - log_den)  # P(j beats i)
        p_tie = np.exp(params[n] + mid - log_den) if has_ties else np.zeros((n, n))
        nll = -(W * theta[:, None]).sum() + (games * log_den).sum()
        grad = -W.sum(axis=1)
        grad += (games * (p_first + 0.5 * p_tie)).sum(axis=1) + (games * (p_second + 0.5 * p_tie)).sum(axis=0)
        if has_ties:
            nll -= (T * (params[n] + mid)).sum()
            grad -= 0.5 * (T.sum(axis=1) + T.sum(axis=0))
        # prior: `prior` wins and `prior` losses of every item against a virtual item of strength 0
        soft = np.logaddexp(theta, 0.0)
        nll += -prior * theta.sum() + 2 * prior * soft.sum()
        grad += -prior + 2 * prior / (1.0 + np.exp(-theta))
        if has_ties:
            grad = np.append(grad, -T.sum() + (games * p_tie).sum())
        return nll, grad

    x0 = np.zeros(n + (1 if has_ties else 0))
    result = minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    theta = result.x[:n]
    return Scores(theta - theta.mean(), ids=ids)


def aggregate(rankings, *, method: str = "borda", items=None, weights=None, unranked: str = "below", **params: Any) -> Scores:
    """Consensus of ``rankings`` by ``method`` (a registered ``aggregate`` method: ``salience methods --domain aggregate``).

    ``unranked`` says how pairwise methods read partial rankings (see :func:`pairwise_wins`);
    Borda always shares a ranking's remaining points among the items it leaves out.

    >>> aggregate([["a", "b", "c"], ["a", "c", "b"], ["b", "a", "c"]], method="kemeny").ranked_ids()
    ['a', 'b', 'c']
    """
    from salience.core.base import create

    return create("aggregate", method, weights=weights, unranked=unranked, **params).score(rankings, items=items)


class Aggregator(Scorer, abc.ABC):
    """Base of the rank-aggregation methods; ``score(rankings, items=None)`` is the consensus.

    >>> from salience.core.base import create
    >>> create("aggregate", "borda").score([["a", "b"], ["b", "a"], ["a", "b"]]).ranked_ids()
    ['a', 'b']
    """

    _parameter_constraints = {"unranked": [Options(("below", "ignore"))], "weights": [None, "array-like"]}

    def __init__(self, *, weights=None, unranked: str = "below"):
        self.weights, self.unranked = weights, unranked
        self._validate_params()

    @abc.abstractmethod
    def score(self, rankings, *, items=None) -> Scores:
        """The subclass's part (see the class docstring)."""

    def score_batch(self, batch) -> list[Scores]:
        return [self.score(rankings) for rankings in batch]


class _PairwiseAggregator(Aggregator):
    """An aggregator that reads the rankings' pairwise win matrix (:func:`pairwise_wins`)."""

    def score(self, rankings, *, items=None) -> Scores:
        ids, W = pairwise_wins(rankings, items, self.weights, unranked=self.unranked)
        return self.from_matrix(W, ids)

    @abc.abstractmethod
    def from_matrix(self, W: np.ndarray, ids: list) -> Scores:
        """The subclass's part (see the class docstring)."""


@register_method("aggregate", "borda", "Borda count over (partial) rankings")
class Borda(Aggregator):
    def score(self, rankings, *, items=None) -> Scores:
        return borda(rankings, items, weights=self.weights, unranked=self.unranked)


@register_method("aggregate", "copeland", "Copeland: pairwise wins minus losses")
class Copeland(_PairwiseAggregator):
    def from_matrix(self, W, ids) -> Scores:
        return _copeland_from_matrix(W, ids)


@register_method("aggregate", "kemeny",
                 "Kemeny consensus: fewest pairwise disagreements (exact DP up to 10 items, KwikSort beyond)")
class Kemeny(_PairwiseAggregator):
    _parameter_constraints = {"exact_max": [Interval("int", 0)], "restarts": [Interval("int", 1)],
                              "seed": [Interval("int", 0)]}

    def __init__(self, *, weights=None, unranked: str = "below", exact_max: int = 10, restarts: int = 8,
                 seed: int = 0):
        self.exact_max, self.restarts, self.seed = exact_max, restarts, seed
        super().__init__(weights=weights, unranked=unranked)

    def from_matrix(self, W, ids) -> Scores:
        return _kemeny_from_matrix(W, ids, exact_max=self.exact_max, restarts=self.restarts, seed=self.seed)


@register_method("aggregate", "mc4", "MC4 Markov chain over pairwise majorities (Dwork et al., 2001)")
class MC4(_PairwiseAggregator):
    _parameter_constraints = {"teleport": [Interval("real", 0, 1, closed="left")]}

    def __init__(self, *, weights=None, unranked: str = "below", teleport: float = 0.05):
        self.teleport = teleport
        super().__init__(weights=weights, unranked=unranked)

    def from_matrix(self, W, ids) -> Scores:
        return _markov_chain_from_matrix(W, ids, teleport=self.teleport)


@register_method("aggregate", "pagerank", "PageRank over the pairwise-win graph")
class PageRank(_PairwiseAggregator):
    _parameter_constraints = {"damping": [Interval("real", 0, 1, closed="left")]}

    def __init__(self, *, weights=None, unranked: str = "below", damping: float = 0.85):
        self.damping = damping
        super().__init__(weights=weights, unranked=unranked)

    def from_matrix(self, W, ids) -> Scores:
        return pagerank(W, ids, damping=self.damping)


@register_method("aggregate", "winrate", "share of pairwise comparisons won")
class WinRate(_PairwiseAggregator):
    def from_matrix(self, W, ids) -> Scores:
        return win_rate(W, ids)


@register_method("aggregate", "bradley_terry", "Bradley-Terry maximum likelihood strengths, Davidson ties")
class BradleyTerry(_PairwiseAggregator):
    _parameter_constraints = {"prior": [Interval("real", 0)], "max_iter": [Interval("int", 1)]}

    def __init__(self, *, weights=None, unranked: str = "below", prior: float = 0.1, max_iter: int = 500):
        self.prior, self.max_iter = prior, max_iter
        super().__init__(weights=weights, unranked=unranked)

    def from_matrix(self, W, ids) -> Scores:
        return bradley_terry(W, ids, prior=self.prior, max_iter=self.max_iter)

"""Cooperative games: how much each player adds to the worth of the coalitions it joins.

A game has ``m`` players and a value function ``v(S)`` over coalitions S; a batch of coalitions
is a boolean matrix, one row per coalition (``masks[r, i]``: player i is in coalition r). The
explain domain's players are an input's features (``v``: the model's output with the others
replaced by background values); the data domain's are training examples (``v``: a model's test
score after training on the coalition). Both reach these estimators:

* **semivalues** ``phi_i = sum over S without i of w(|S|) [v(S + i) - v(S)]``, exact over all
  2^m coalitions (:func:`exact_semivalues`) with the weights of :func:`semivalue_weights`:
  Shapley's ``|S|! (m - |S| - 1)! / m!``, Banzhaf's ``1 / 2^(m-1)``, and Beta(alpha, beta)
  Shapley's ``B(|S| + beta, m - 1 - |S| + alpha) / B(alpha, beta)`` (Kwon and Zou, 2022;
  Beta(1, 1) is Shapley);
* **permutation walks** (:func:`permutation_contributions`): players added one at a time in a
  random order, each addition's change of ``v`` its marginal contribution; averaged they give
  Shapley values, reweighted by position any semivalue (:func:`position_weights`); a walk may
  stop early once ``v`` is within a tolerance of the grand coalition's (truncated Monte Carlo,
  Ghorbani and Zou, 2019), the rest counted as zero;
* **maximum sample reuse** (:func:`msr_banzhaf`): random coalitions, each player in with
  probability 1/2; a player's Banzhaf value is the mean value of the coalitions holding it less
  the mean of those without it, every sample used for every player (Wang and Jia, 2023); or,
  from the same samples, the least-squares linear fit of the values on membership
  (:func:`banzhaf_regression`);
* :class:`RunningMean`: per-player running means and standard errors (Welford), and the
  stopping rule the samplers share (a budget of evaluations, a standard-error tolerance).
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np

from salience.exceptions import InvalidParameterError

__all__ = ["Game", "all_coalitions", "semivalue_weights", "exact_semivalues", "position_weights",
           "random_orders", "permutation_contributions", "msr_banzhaf", "banzhaf_regression", "RunningMean", "MAX_EXACT_PLAYERS"]

#: a value function over a batch of coalitions: boolean masks (n, m) -> values (n,)
Game = Callable[[np.ndarray], np.ndarray]
#: exact enumeration is refused past this many players (2^m coalitions)
MAX_EXACT_PLAYERS = 20


def all_coalitions(m: int) -> np.ndarray:
    """Every coalition of ``m`` players as rows of a boolean matrix (row s holds bit i of s)."""
    if m > MAX_EXACT_PLAYERS:
        raise InvalidParameterError(f"exact enumeration of 2^{m} coalitions is limited to {MAX_EXACT_PLAYERS} "
                                    "players: sample instead (permutations or maximum sample reuse).")
    return ((np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1).astype(bool)


def semivalue_weights(m: int, kind: str = "shapley", *, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """``w[k]``: the weight of one coalition of ``k`` other players (k = 0..m-1) in a player's
    semivalue; ``kind``: ``shapley``, ``banzhaf`` or ``beta`` (``alpha``, ``beta``)."""
    sizes = np.arange(m, dtype=np.float64)
    if kind == "shapley":
        if m <= 64:  # exact ratios of integers: an additive game's values come out exact
            return np.array([math.factorial(k) * math.factorial(m - k - 1) / math.factorial(m) for k in range(m)])
        return np.exp(_log_beta(sizes + 1, m - sizes))
    if kind == "banzhaf":
        return np.full(m, 2.0 ** -(m - 1))
    if kind == "beta":
        if not (alpha > 0 and beta > 0):
            raise InvalidParameterError(f"Beta Shapley's alpha and beta must be > 0; got {alpha!r}, {beta!r}.")
        return np.exp(_log_beta(sizes + beta, m - 1 - sizes + alpha) - _log_beta(np.array(alpha), np.array(beta)))
    raise InvalidParameterError(f"semivalue kind must be shapley, banzhaf or beta; got {kind!r}.")


def _log_beta(a, b):
    from scipy.special import gammaln

    return gammaln(a) + gammaln(b) - gammaln(a + b)


def exact_semivalues(values: np.ndarray, m: int, weights: np.ndarray) -> np.ndarray:
    """Every player's semivalue from ``values`` of all 2^m coalitions (``values[s]``: the
    coalition with bits s, as :func:`all_coalitions` orders them) and ``weights`` by size."""
    values = np.asarray(values, dtype=np.float64)
    subsets = np.arange(2**m)
    sizes = np.bitwise_count(subsets) if hasattr(np, "bitwise_count") else np.array([bin(s).count("1") for s in subsets])
    phi = np.zeros(m)
    for i in range(m):
        without = subsets[(subsets >> i) & 1 == 0]
        phi[i] = np.sum(weights[sizes[without]] * (values[without | (1 << i)] - values[without]))
    return phi


def position_weights(m: int, weights: np.ndarray) -> np.ndarray:
    """Importance weights of a permutation walk's marginal contributions by position (k players
    before): ``m C(m-1, k) w[k]``, so that walks averaged estimate the semivalue of ``weights``
    (all ones for Shapley)."""
    from scipy.special import gammaln

    k = np.arange(m)
    log_choose = gammaln(m) - gammaln(k + 1) - gammaln(m - k)
    return m * np.exp(log_choose + np.log(weights))


def random_orders(rng: np.random.Generator, m: int, *, antithetic: bool = True) -> Iterator[np.ndarray]:
    """Endless uniformly random orders of ``m`` players; ``antithetic``: each followed by its
    reverse (Strumbelj and Kononenko, 2014; Mitchell et al., 2022), so a player late in one walk
    is early in the next: the pair's contributions are negatively correlated and their mean
    varies less, and under truncation every player is seen near the front."""
    while True:
        order = rng.permutation(m)
        yield order
        if antithetic:
            yield order[::-1].copy()


def permutation_contributions(game: Game, orders: np.ndarray, *, empty_value: float | None = None,
                              full_value: float | None = None, truncation: float | None = None,
                              max_evaluations: int | None = None) -> tuple[np.ndarray, int, np.ndarray]:
    """Marginal contributions along each permutation in ``orders`` (walks x m player indexes):
    ``(out, evaluated, reached)`` with ``out[w, player]`` the contribution, ``evaluated`` the
    coalitions evaluated (the empty and grand coalitions once, when not given) and
    ``reached[w, player]`` whether walk w determined that player's contribution.

    Without ``truncation`` or ``max_evaluations`` every walk's coalitions go to ``game`` in one
    batch. With ``truncation`` (a tolerance), a walk stops once ``|v(S) - v(full)| <=
    truncation * |v(full)|`` and its later players contribute zero (TMC, counted as reached).
    With ``max_evaluations``, evaluation stops when that many coalitions are spent, the walks
    not finished leaving their later players unreached. Either way walks advance position by
    position, one batch across the walks still running."""
    orders = np.asarray(orders)
    walks, m = orders.shape
    evaluated = 0
    ends = [(0, empty_value), (1, full_value)]
    missing = [which for which, value in ends if value is None]
    if missing:
        values = np.asarray(game(np.array([np.full(m, bool(which)) for which in missing])), dtype=np.float64)
        known = dict(zip(missing, values.tolist()))
        empty_value, full_value = (known.get(0, empty_value), known.get(1, full_value))
        evaluated += len(missing)
    rows = np.arange(walks)[:, None]
    out = np.zeros((walks, m))
    if truncation is None and max_evaluations is None:
        masks = np.zeros((walks, m + 1, m), dtype=bool)
        for position in range(m):
            masks[:, position + 1] = masks[:, position]
            masks[np.arange(walks), position + 1, orders[:, position]] = True
        inner = np.asarray(game(masks[:, 1:m].reshape(-1, m)), dtype=np.float64).reshape(walks, m - 1) \
            if m > 1 else np.zeros((walks, 0))
        evaluated += walks * (m - 1)
        v = np.concatenate([np.full((walks, 1), empty_value), inner, np.full((walks, 1), full_value)], axis=1)
        out[rows, orders] = np.diff(v, axis=1)
        return out, evaluated, np.ones((walks, m), dtype=bool)
    reached = np.zeros((walks, m), dtype=bool)
    previous = np.full(walks, float(empty_value))
    masks = np.zeros((walks, m), dtype=bool)
    running = np.ones(walks, dtype=bool)  # still walking
    truncated = np.zeros(walks, dtype=bool)  # stopped by truncation: the rest count as zero
    for position in range(m):
        masks[np.arange(walks), orders[:, position]] = True
        live = np.flatnonzero(running)
        if live.size == 0:
            break
        if position == m - 1:
            values = np.full(live.size, float(full_value))
        else:
            if max_evaluations is not None:
                room = max(0, int(max_evaluations) - evaluated)
                running[live[room:]] = False  # out of budget: these walks end here, unfinished
                live = live[:room]
                if live.size == 0:
                    break
            values = np.asarray(game(masks[live]), dtype=np.float64)
            evaluated += live.size
        out[live, orders[live, position]] = values - previous[live]
        reached[live, orders[live, position]] = True
        previous[live] = values
        if truncation is not None:
            close = live[np.abs(values - full_value) <= truncation * abs(full_value)]
            running[close] = False
            truncated[close] = True
    for w in np.flatnonzero(truncated):
        reached[w] = True  # the players after the cut contribute zero: determined
    return out, evaluated, reached


def msr_banzhaf(masks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Banzhaf values by maximum sample reuse from coalitions sampled uniformly (each player in
    with probability 1/2) and their values: per player, the mean value of the samples holding
    it less the mean of those without it (0 for a side never sampled)."""
    masks = np.asarray(masks, dtype=bool)
    values = np.asarray(values, dtype=np.float64)
    inside = masks.sum(axis=0)
    outside = len(masks) - inside
    sum_in = values @ masks
    sum_out = values.sum() - sum_in
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = np.where(inside > 0, sum_in / np.maximum(inside, 1), 0.0)
        mean_out = np.where(outside > 0, sum_out / np.maximum(outside, 1), 0.0)
    return mean_in - mean_out


def banzhaf_regression(masks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Banzhaf values as the coefficients of the least-squares linear fit of ``values`` on the
    coalitions' membership (with an intercept), from coalitions sampled uniformly: the Banzhaf
    values are exactly the best linear approximation of a game under the uniform distribution
    (Hammer and Holzman, 1992), and the fit corrects each player's difference of means for the
    other players' chance imbalance between its two sides. Needs more samples than players."""
    masks = np.asarray(masks, dtype=np.float64)
    design = np.hstack([np.ones((len(masks), 1)), masks])
    coefficients, *_ = np.linalg.lstsq(design, np.asarray(values, dtype=np.float64), rcond=None)
    return coefficients[1:]


class RunningMean:
    """Per-player running means and variances (Welford's update over batches of samples), the
    standard errors, and the samplers' stopping rule: stop when ``budget`` evaluations are spent
    or, after ``min_samples`` samples, every player's standard error is at most ``tolerance``
    times the largest absolute mean."""

    def __init__(self, m: int, *, budget: int, tolerance: float | None = None, min_samples: int = 8):
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
            raise InvalidParameterError(f"budget must be a whole number of evaluations >= 1; got {budget!r}.")
        if tolerance is not None and not tolerance > 0:
            raise InvalidParameterError(f"tolerance must be > 0 or None; got {tolerance!r}.")
        self.budget, self.tolerance, self.min_samples = int(budget), tolerance, min_samples
        self.count = np.zeros(m)
        self.mean = np.zeros(m)
        self._m2 = np.zeros(m)
        self.evaluations = 0

    def update(self, samples: np.ndarray, evaluations: int, counted: np.ndarray | None = None) -> None:
        """Add ``samples`` (rows x players) after ``evaluations`` more game evaluations;
        ``counted`` (same shape, boolean) marks which entries are samples of their player
        (default: all)."""
        samples = np.atleast_2d(np.asarray(samples, dtype=np.float64))
        counted = np.ones_like(samples, dtype=bool) if counted is None else np.asarray(counted, dtype=bool)
        for row, keep in zip(samples, counted):
            self.count += keep
            delta = np.where(keep, row - self.mean, 0.0)
            self.mean += np.where(keep, delta / np.maximum(self.count, 1), 0.0)
            self._m2 += np.where(keep, delta * (row - self.mean), 0.0)
        self.evaluations += int(evaluations)

    @property
    def standard_errors(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            variance = np.where(self.count > 1, self._m2 / np.maximum(self.count - 1, 1), np.inf)
            return np.sqrt(variance / np.maximum(self.count, 1))

    def done(self) -> bool:
        if self.evaluations >= self.budget:
            return True
        if self.tolerance is None or not self.count.size or self.count.min() < self.min_samples:
            return False
        scale = max(float(np.abs(self.mean).max(initial=0.0)), np.finfo(float).tiny)
        return bool(np.all(self.standard_errors <= self.tolerance * scale))

    @property
    def converged(self) -> bool:
        """Stopped by the tolerance rather than the budget."""
        return self.done() and self.evaluations < self.budget

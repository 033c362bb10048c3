"""Model-agnostic attribution by coalitions of features: exact Shapley values, KernelSHAP,
permutation Shapley, Banzhaf values and occlusion.

Every method explains ``f(x)`` against background rows ``B`` (``baselines``): a coalition S of
features keeps ``x`` on S and takes the background's values elsewhere, and its value is the
mean model output over the background rows (the interventional value function of
Lundberg and Lee, 2017; Janzing et al., 2020)::

    v(S) = mean_b f(x_S, b_{not S})

The Shapley value of feature i is the average of its marginal contributions
``v(S + i) - v(S)`` over coalitions, weighted by ``|S|! (M - |S| - 1)! / M!``; they add up to
``f(x) - v(empty)`` (efficiency). Banzhaf weights every coalition alike. The model is called
on batches of hybrid rows, never one row at a time.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from salience.core.base import register
from salience.core.games import (all_coalitions, exact_semivalues, permutation_contributions, random_orders,
                                 semivalue_weights)
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError
from salience.explain.base import CoalitionExplainer, Explainer, coalition_values
from salience.explain.kernel_shap import KernelShap

__all__ = ["Explainer", "CoalitionExplainer", "ExactShapley", "Banzhaf", "KernelShap", "PermutationShapley", "Occlusion", "Lime",
           "ShapleyInteraction", "coalition_values"]

#: exact enumeration is refused past this many features (2^M coalitions)
MAX_EXACT_FEATURES = 16


def _check_exact(m: int, method: str) -> None:
    if m > MAX_EXACT_FEATURES:
        raise InvalidParameterError(f"{method} enumerates 2^{m} coalitions for {m} features; it is limited to "
                                    f"{MAX_EXACT_FEATURES} features: use KernelShap or PermutationShapley (sampling).")


class ExactShapley(CoalitionExplainer):
    """Shapley values by enumerating all 2^M coalitions (M <= 16): exact, and the reference the
    sampling methods are measured against.

    >>> f = lambda X: 2 * X[:, 0] + X[:, 0] * X[:, 1]
    >>> a = ExactShapley(f).attribute([[1.0, 1.0]])
    >>> a.values.tolist(), a.base_value.tolist()
    ([[2.5, 0.5]], [0.0])
    """

    model_agnostic = True

    name = "exact_shapley"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "ExactShapley")
        v = coalition_values(calls, x, background, all_coalitions(m))
        return _shapley_from_values(v, m), v[0]


def _shapley_from_values(v: np.ndarray, m: int) -> np.ndarray:
    """Shapley values from v over every coalition (v[s] for the coalition with bits s)."""
    return exact_semivalues(v, m, semivalue_weights(m, "shapley"))


class ShapleyInteraction(CoalitionExplainer):
    """Pairwise Shapley interaction values by enumerating every coalition (M <= 16): for each
    row an M x M matrix. Off the diagonal, half the Shapley interaction index (Grabisch and
    Roubens, 1999) of i and j,

        I_ij = sum over S without i, j of |S|! (M - |S| - 2)! / (M - 1)! x
               [v(S + i + j) - v(S + i) - v(S + j) + v(S)],

    and on the diagonal the main effect, the Shapley value less the row's interactions: each
    row adds up to the feature's Shapley value and the matrix to ``f(x) - v(empty)`` (the SHAP
    interaction values of Lundberg et al., 2020). ``to_scores`` ranks the pairs i < j by
    their interaction.

    >>> f = lambda X: X[:, 0] * X[:, 1] + X[:, 2]
    >>> ShapleyInteraction(f).attribute([[1.0, 2.0, 3.0]]).values[0].tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]]
    """

    name = "shapley_interaction"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "ShapleyInteraction")
        v = coalition_values(calls, x, background, all_coalitions(m))
        subsets = np.arange(2**m)
        sizes = np.array([bin(s).count("1") for s in subsets])
        phi = np.zeros((m, m))
        if m == 1:
            return np.array([[v[1] - v[0]]]), v[0]
        weight = np.array([math.factorial(s) * math.factorial(m - s - 2) / math.factorial(m - 1) for s in range(m - 1)])
        for i in range(m):
            for j in range(i + 1, m):
                without = subsets[((subsets >> i) & 1 == 0) & ((subsets >> j) & 1 == 0)]
                delta = v[without | (1 << i) | (1 << j)] - v[without | (1 << i)] - v[without | (1 << j)] + v[without]
                phi[i, j] = phi[j, i] = np.sum(weight[sizes[without]] * delta) / 2
        shapley = _shapley_from_values(v, m)
        phi[np.diag_indices(m)] = shapley - (phi.sum(axis=1) - np.diag(phi))
        return phi, v[0]


class Banzhaf(CoalitionExplainer):
    """Banzhaf values: marginal contributions averaged over all coalitions alike (exact, M <= 16)."""

    model_agnostic = True

    name = "banzhaf"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "Banzhaf")
        v = coalition_values(calls, x, background, all_coalitions(m))
        return exact_semivalues(v, m, semivalue_weights(m, "banzhaf")), v[0]


class PermutationShapley(CoalitionExplainer):
    """Shapley values sampled over random feature orders, each order walked forward and then
    backward (antithetic sampling, as shap's Permutation explainer): every walk adds features
    one at a time, and each addition's change of v is that feature's contribution. Exact in
    expectation; efficiency holds for every sample. ``n_samples``: coalitions evaluated per
    row (2 M of them per pair of walks; default 10 pairs)."""

    model_agnostic = True

    name = "permutation_shapley"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        pairs = max(1, (n_samples if n_samples is not None else 20 * m) // (2 * m))
        orders = list(itertools.islice(random_orders(rng, m), 2 * pairs))

        def game(masks):
            return coalition_values(calls, x, background, masks)

        # the empty and full coalitions are the same for every walk: evaluated once
        ends = game(np.array([np.zeros(m, bool), np.ones(m, bool)]))
        contributions, _, _ = permutation_contributions(game, np.array(orders), empty_value=ends[0],
                                                        full_value=ends[1])
        return contributions.mean(axis=0), ends[0]


class Occlusion(CoalitionExplainer):
    """Occlusion (feature ablation): each feature, or each group of ``feature_groups`` (a list
    of lists of feature indexes), replaced by the background; its attribution is the drop of
    the output, ``f(x) - v(all but it)``. Not additive: the values need not add up."""

    model_agnostic = True

    name = "occlusion"

    _parameter_constraints = {"feature_groups": [None, "array-like"]}

    def __init__(self, model: Callable, *, feature_names=None, feature_groups=None):
        self.feature_groups = feature_groups
        super().__init__(model, feature_names=feature_names)

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        groups = self.feature_groups if self.feature_groups is not None else [[i] for i in range(m)]
        seen = [i for g in groups for i in g]
        if any(not isinstance(i, (int, np.integer)) or not 0 <= i < m for i in seen) or len(set(seen)) != len(seen):
            raise InvalidParameterError(f"feature_groups must be disjoint lists of feature indexes in [0, {m}).")
        masks = np.ones((len(groups) + 2, m), dtype=bool)
        masks[0] = False  # v(empty), the base value
        for g, members in enumerate(groups):
            masks[g + 2, list(members)] = False
        v = coalition_values(calls, x, background, masks)
        phi = np.zeros(m)
        for g, members in enumerate(groups):
            phi[list(members)] = (v[1] - v[g + 2]) / len(members)  # a group's drop, shared by its members
        return phi, v[0]


class Lime(CoalitionExplainer):
    """LIME (Ribeiro et al., 2016) over coalitions: random coalitions (each feature kept with
    probability 1/2), weighted by an exponential kernel of their cosine distance to the whole
    input (width ``kernel_width`` x 100, as lime's text explainer), fitted by a weighted
    ridge regression with an intercept; ``n_features`` keeps the surrogate sparse: the
    features with the largest coefficients, refitted alone (lime's "highest weights").
    ``n_samples`` default: 1000 (lime's default 5000 is for larger inputs)."""

    model_agnostic = True

    name = "lime"

    _parameter_constraints = {"n_features": [None, Interval("int", 1)], "kernel_width": [Interval("real", 0, closed="neither")],
                              "alpha": [Interval("real", 0)]}

    def __init__(self, model: Callable, *, feature_names=None, n_features: int | None = None, kernel_width: float = 0.25,
                 alpha: float = 1.0):
        self.n_features, self.kernel_width, self.alpha = n_features, kernel_width, alpha
        super().__init__(model, feature_names=feature_names)

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        n = n_samples if n_samples is not None else 1000
        masks = rng.random((n, m)) < 0.5
        masks[0] = True  # the input itself, as lime includes it
        v = coalition_values(calls, x, background, masks)
        kept = masks.sum(axis=1)
        distance = 1.0 - np.sqrt(kept / m)  # cosine distance of a 0/1 coalition to all ones
        weight = np.exp(-((distance * 100) ** 2) / (self.kernel_width * 100) ** 2)
        chosen = np.arange(m)
        coef, intercept = _ridge(masks.astype(float), v, weight, self.alpha)
        if self.n_features is not None and self.n_features < m:
            chosen = np.sort(np.argsort(-np.abs(coef), kind="stable")[: self.n_features])
            coef_chosen, intercept = _ridge(masks[:, chosen].astype(float), v, weight, self.alpha)
            coef = np.zeros(m)
            coef[chosen] = coef_chosen
        return coef, intercept


def _ridge(Z: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Weighted ridge regression with an unpenalised intercept: (coefficients, intercept)."""
    mean_z = np.average(Z, axis=0, weights=w)
    mean_y = np.average(y, weights=w)
    Zc, yc = Z - mean_z, y - mean_y
    gram = (Zc * w[:, None]).T @ Zc + alpha * np.eye(Z.shape[1])
    coef = np.linalg.solve(gram, (Zc * w[:, None]).T @ yc)
    return coef, float(mean_y - mean_z @ coef)


_DESCRIPTIONS = {
    "exact_shapley": (ExactShapley, "Shapley values by enumerating every coalition (up to 16 features)"),
    "kernel_shap": (KernelShap, "KernelSHAP: efficiency-constrained weighted regression over coalitions (Lundberg and Lee, 2017)"),
    "permutation_shapley": (PermutationShapley, "Shapley values sampled over feature orders, antithetic (Strumbelj and Kononenko, 2014)"),
    "shapley_interaction": (ShapleyInteraction, "pairwise Shapley interaction values, exact (Grabisch and Roubens, 1999; "
                                                "Lundberg et al., 2020)"),
    "banzhaf": (Banzhaf, "Banzhaf values: marginal contributions over all coalitions alike (exact)"),
    "occlusion": (Occlusion, "occlusion / feature ablation: the output's drop when a feature or group is removed"),
    "lime": (Lime, "LIME: a weighted, optionally sparse, linear surrogate over random coalitions (Ribeiro et al., 2016)"),
}
for _name, (_cls, _description) in _DESCRIPTIONS.items():
    register("explain", _name, _cls, _description)


def model_agnostic_methods() -> tuple[str, ...]:
    """The registered ``explain`` methods that explain any black box from its outputs on
    coalitions (texts, prompts, search results use these)."""
    from salience.core.base import registered

    return tuple(m.name for m in registered("explain") if getattr(m.factory, "model_agnostic", False))

"""Global importance: which features matter for a model over a whole dataset, not one row.

* :func:`permutation_importance`: the drop of a quality metric (or, without labels, the mean
  change of the output) when one feature's column is shuffled, repeated over shuffles
  (Breiman, 2001; Fisher et al., 2019's model reliance).
* :func:`mean_abs_attribution`: the mean magnitude of local attributions over rows (the
  global bar chart of SHAP).
* The pairwise Shapley interaction index is :class:`~salience.explain.ShapleyInteraction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from salience.core.checks import check_k
from salience.core.calls import ModelCalls, check_inputs
from salience.core.base import Scorer, register
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, ShapeError
from salience.explain.attribution import Attribution, feature_names_of

__all__ = ["GlobalImportance", "permutation_importance", "mean_abs_attribution"]


@dataclass
class GlobalImportance:
    """Importances of the features over a dataset: ``importances`` holds one row per repeat
    (shuffle), one column per feature; ``mean`` and ``std`` summarise the repeats."""

    importances: np.ndarray
    method: str
    model_calls: int
    feature_names: list | None = None

    @property
    def mean(self) -> np.ndarray:
        return self.importances.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        return self.importances.std(axis=0)

    def to_scores(self) -> Scores:
        """The mean importances as the core's :class:`~salience.Scores` over the features."""
        return Scores(self.mean, ids=self.feature_names)


def permutation_importance(model: Callable, inputs, labels=None, *, metric: Callable | None = None, n_repeats: int = 5,
                           seed: int | None = 0, target: int | None = None, batch_size: int | None = None,
                           feature_names=None) -> GlobalImportance:
    """Permutation importance of every feature of ``inputs`` (rows x features) for ``model``.

    With ``labels``, a feature's importance is ``metric(labels, f(X)) - metric(labels,
    f(X with the feature's column shuffled))``, averaged over ``n_repeats`` shuffles;
    ``metric`` is higher-is-better (default: the negative mean squared error, so the
    importance is the rise of the error). Without labels it is the mean absolute change of
    the output, ``mean |f(X_shuffled) - f(X)|``: how much the model relies on the feature.
    All shuffled copies are scored in batched calls.

    >>> X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    >>> float(permutation_importance(lambda rows: 2 * rows[:, 0], X, n_repeats=3, seed=0).mean[1])
    0.0
    """
    x = check_inputs(inputs)
    names = feature_names_of(feature_names, x.shape[1])
    n_repeats = check_k(n_repeats, "n_repeats")
    if len(x) < 2:
        raise InvalidParameterError(f"permutation importance needs at least 2 rows to shuffle; got {len(x)}.")
    y = None
    if labels is not None:
        y = np.asarray(labels)
        if y.shape[0] != len(x):
            raise ShapeError(f"labels has {y.shape[0]} entries for {len(x)} rows of inputs.")
    if metric is not None and y is None:
        raise InvalidParameterError("metric needs labels: pass labels=, or drop metric to measure the output's change.")
    score = metric if metric is not None else (lambda truth, predicted: -float(np.mean((truth - predicted) ** 2)))
    calls = ModelCalls(model, target, batch_size)
    reference = calls(x)
    rng = np.random.default_rng(seed)
    n, m = x.shape
    outputs = np.empty((n_repeats, m, n))
    for r in range(n_repeats):  # one repeat's copies at a time: memory m x n x m, not times n_repeats
        shuffled = np.repeat(x[None], m, axis=0)  # feature j's copy has column j shuffled
        for j in range(m):
            shuffled[j, :, j] = x[rng.permutation(n), j]
        outputs[r] = calls(shuffled.reshape(-1, m)).reshape(m, n)
    if y is None:
        importances = np.abs(outputs - reference).mean(axis=2)
    else:
        base = score(y, reference)
        importances = np.array([[base - score(y, outputs[r, j]) for j in range(m)] for r in range(n_repeats)], dtype=float)
    return GlobalImportance(importances, "permutation_importance", calls.calls, names)


class PermutationImportance(Scorer):
    """Permutation importance as a method of the ``global`` family (importance of features over
    a whole dataset): ``score(inputs, labels=None)`` gives :class:`~salience.Scores` over the
    features (the mean over ``n_repeats``), ``importance(inputs, labels=None)`` the
    :class:`GlobalImportance` with every repeat (see :func:`permutation_importance`)."""

    _parameter_constraints = {"feature_names": [None, "array-like"], "model": [callable], "metric": [None, callable],
                              "n_repeats": [Interval("int", 1)],
                              "seed": [None, Interval("int", 0)], "target": [None, Interval("int", 0)],
                              "batch_size": [None, Interval("int", 1)]}

    def __init__(self, model: Callable, *, metric: Callable | None = None, n_repeats: int = 5, seed: int | None = 0,
                 target: int | None = None, batch_size: int | None = None, feature_names=None):
        self.model, self.metric, self.n_repeats, self.seed = model, metric, n_repeats, seed
        self.target, self.batch_size, self.feature_names = target, batch_size, feature_names
        self._validate_params()

    def importance(self, inputs, labels=None) -> GlobalImportance:
        return permutation_importance(self.model, inputs, labels, **{k: v for k, v in self.get_params().items()
                                                                        if k != "model"})

    def score(self, inputs, labels=None) -> Scores:
        return self.importance(inputs, labels).to_scores()

    def score_batch(self, batch) -> list[Scores]:
        """``score`` of each (inputs, labels) or inputs of ``batch``."""
        return [self.score(*(item if isinstance(item, tuple) else (item,))) for item in batch]


register("global", "permutation_importance", PermutationImportance,
         "permutation importance: the metric's drop (or the output's change) when a feature's column is shuffled "
         "(Breiman, 2001)")


def mean_abs_attribution(attribution: Attribution) -> Scores:
    """The mean magnitude of each feature's attribution over the explained rows: a global
    importance from local explanations (rows x features, or rows x M x M interactions,
    giving the pairs)."""
    if not isinstance(attribution, Attribution):
        raise InvalidParameterError(f"mean_abs_attribution takes an Attribution; got {type(attribution).__name__}.")
    summary = Attribution(np.abs(np.atleast_2d(attribution.values)).mean(axis=0, keepdims=True), np.zeros(1),
                          attribution.method, attribution.model_calls, attribution.feature_names)
    return summary.to_scores()

"""Was the importance real? Deletion and insertion curves, comprehensiveness and sufficiency:
for any scores over the features of an input and any model of that input.

A model is a callable from a 2-D array of rows to one output per row (as the explainers
take; see :class:`salience.core.calls.ModelCalls`). Removing a feature sets it to its
``baseline`` value. The features are taken in the order of the scores, best first (ties by
position).

* Deletion (Petsiuk et al., 2018, RISE): remove the features one step at a time, the most
  important first, and record the output; a faithful ranking makes it fall fast: a low area
  under the curve.
* Insertion: start from the baseline and add the features back, most important first; a high
  area is good.
* Comprehensiveness and sufficiency (DeYoung et al., 2020, ERASER): the drop of the output
  when the top fraction of features is removed, and when only it is kept; averaged over
  fractions (default 1%, 5%, 10%, 20%, 50%).
* Remove and retrain (Hooker et al., 2019, ROAR): the top fraction of each row's features
  is replaced by an uninformative value in the training and the test data, a fresh copy of
  the estimator is trained, and its test score recorded. Without retraining, a removed
  feature is out of the model's distribution and any ranking looks faithful; retraining
  tells an informative ranking (the score falls fast) from a random one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from salience.core.checks import check_k
from salience.core.calls import ModelCalls, check_baselines, check_inputs
from salience.exceptions import InvalidParameterError, ShapeError
from salience.extras import require

__all__ = ["Curve", "deletion_curve", "insertion_curve", "comprehensiveness", "sufficiency", "RetrainCurve",
           "remove_and_retrain"]


@dataclass
class Curve:
    """Outputs of a model as features are removed (deletion) or added (insertion), at
    ``fractions`` of the features (0 to 1), and the normalised area under it (trapezoids)."""

    fractions: np.ndarray
    outputs: np.ndarray
    auc: float
    model_calls: int


def _order(scores, n_features: int) -> np.ndarray:
    from salience.core.scores import Scores

    values = scores.values if isinstance(scores, Scores) else np.asarray(scores, dtype=np.float64)
    if values.shape != (n_features,):
        raise ShapeError(f"scores must hold one value per feature ({n_features}); got shape {values.shape}.")
    if not np.isfinite(values).all():
        raise InvalidParameterError("scores must be finite to order the features.")
    return np.argsort(-values, kind="stable")


def prepare_row(model: Callable, x, baseline) -> tuple[np.ndarray, np.ndarray]:
    """(the row, its baseline) of one input and the value each removed feature takes, checked."""
    if not callable(model):
        raise InvalidParameterError(f"model must be a callable from a 2-D array of rows to outputs; got {type(model).__name__}.")
    row = check_inputs(x, "x")
    if len(row) != 1:
        raise ShapeError(f"x must be one row; got {len(row)}.")
    base = check_baselines(baseline, row.shape[1])
    if len(base) != 1:
        raise ShapeError("baseline must be one row (the value of each removed feature).")
    return row[0], base[0]


def _steps(n_features: int, steps: int | None) -> np.ndarray:
    if steps is None:
        return np.arange(n_features + 1)
    steps = check_k(steps, "steps")
    return np.unique(np.round(np.linspace(0, n_features, min(steps, n_features) + 1)).astype(int))


def _curve(model, x, scores, baseline, steps, insert: bool, batch_size) -> Curve:
    row, base = prepare_row(model, x, baseline)
    m = len(row)
    order = _order(scores, m)
    counts = _steps(m, steps)
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    taken = rank[None, :] < counts[:, None]  # the first `count` features of the order, per step
    rows = np.where(taken, base, row) if not insert else np.where(taken, row, base)
    calls = ModelCalls(model, batch_size=batch_size)
    outputs = calls(rows)
    fractions = counts / m
    return Curve(fractions, outputs, _area(fractions, outputs), calls.calls)


def _area(fractions: np.ndarray, outputs: np.ndarray) -> float:
    """Area under a curve by trapezoids, over its span of fractions (1 for a full curve)."""
    span = fractions[-1] - fractions[0]
    if span <= 0:
        return float(outputs[0])
    return float(np.sum((outputs[1:] + outputs[:-1]) / 2 * np.diff(fractions)) / span)



def deletion_curve(model: Callable, x, scores, *, baseline=None, steps: int | None = None,
                   batch_size: int | None = None) -> Curve:
    """The model's output as the features of ``x`` are removed, best-scored first.

    >>> f = lambda X: X.sum(axis=1)
    >>> curve = deletion_curve(f, [3.0, 1.0], [0.9, 0.1])
    >>> curve.outputs.tolist(), curve.auc
    ([4.0, 1.0, 0.0], 1.5)
    """
    return _curve(model, x, scores, baseline, steps, False, batch_size)


def insertion_curve(model: Callable, x, scores, *, baseline=None, steps: int | None = None,
                    batch_size: int | None = None) -> Curve:
    """The model's output as the features of ``x`` are added to the baseline, best-scored first.

    >>> f = lambda X: X.sum(axis=1)
    >>> insertion_curve(f, [3.0, 1.0], [0.9, 0.1]).outputs.tolist()
    [0.0, 3.0, 4.0]
    """
    return _curve(model, x, scores, baseline, steps, True, batch_size)


def _top_fraction_rows(row, base, order, fractions, keep: bool) -> np.ndarray:
    m = len(row)
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    counts = np.maximum(1, np.ceil(np.asarray(fractions) * m)).astype(int)
    top = rank[None, :] < counts[:, None]
    return np.where(top, row, base) if keep else np.where(top, base, row)


def _check_fractions(fractions: Sequence[float]) -> np.ndarray:
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.ndim != 1 or not len(fractions) or not ((fractions > 0) & (fractions <= 1)).all():
        raise InvalidParameterError(f"fractions must be a list of values in (0, 1]; got {fractions.tolist()}.")
    return fractions


DEFAULT_FRACTIONS = (0.01, 0.05, 0.1, 0.2, 0.5)


def comprehensiveness(model: Callable, x, scores, *, baseline=None, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> float:
    """Mean drop of the output when the top fraction of features is removed (higher: the
    top features carry the output). At least one feature per fraction.

    >>> f = lambda X: X.sum(axis=1)
    >>> comprehensiveness(f, [3.0, 1.0], [0.9, 0.1], fractions=[0.5, 1.0])
    3.5
    """
    row, base = prepare_row(model, x, baseline)
    calls = ModelCalls(model)
    rows = _top_fraction_rows(row, base, _order(scores, len(row)), _check_fractions(fractions), keep=False)
    outputs = calls(np.vstack([row[None, :], rows]))
    return float(np.mean(outputs[0] - outputs[1:]))


def sufficiency(model: Callable, x, scores, *, baseline=None, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> float:
    """Mean drop of the output when only the top fraction of features is kept (lower: the
    top features suffice).

    >>> f = lambda X: X.sum(axis=1)
    >>> sufficiency(f, [3.0, 1.0], [0.9, 0.1], fractions=[0.5, 1.0])
    0.5
    """
    row, base = prepare_row(model, x, baseline)
    calls = ModelCalls(model)
    rows = _top_fraction_rows(row, base, _order(scores, len(row)), _check_fractions(fractions), keep=True)
    outputs = calls(np.vstack([row[None, :], rows]))
    return float(np.mean(outputs[0] - outputs[1:]))


@dataclass
class RetrainCurve:
    """Test scores of an estimator retrained with the top ``fractions`` of every row's
    features removed (or, with ``keep``, only those kept), and the area under the curve
    (trapezoids over the fractions; lower is better for removal)."""

    fractions: np.ndarray
    scores: np.ndarray
    auc: float
    keep: bool


def remove_and_retrain(estimator, train_inputs, train_labels, test_inputs, test_labels, train_scores, test_scores, *,
                       fractions: Sequence[float] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9), keep: bool = False,
                       metric: Callable | None = None, absolute: bool = True) -> RetrainCurve:
    """ROAR (``keep=False``) or KAR (``keep=True``, keep and retrain) for a scikit-learn
    estimator: for each fraction, each row's top features by its scores (``train_scores`` and
    ``test_scores``, shaped like the inputs; by magnitude when ``absolute``) are replaced by
    the training mean of the feature, a clone of ``estimator`` is fitted on the training rows
    and scored on the test rows (``metric(labels, predictions)``, default the estimator's own
    ``score``). Compare against random scores: a ranking that carries information falls
    below them."""
    clone = require("sklearn.base", "scikit-learn", "remove_and_retrain (it retrains scikit-learn estimators)").clone
    x_train, x_test = check_inputs(train_inputs, "train_inputs"), check_inputs(test_inputs, "test_inputs")
    if x_train.shape[1] != x_test.shape[1]:
        raise ShapeError(f"train_inputs has {x_train.shape[1]} features, test_inputs {x_test.shape[1]}.")
    y_train, y_test = np.asarray(train_labels), np.asarray(test_labels)
    if len(y_train) != len(x_train) or len(y_test) != len(x_test):
        raise ShapeError(f"labels must have one entry per row: {len(y_train)} for {len(x_train)} training rows, "
                         f"{len(y_test)} for {len(x_test)} test rows.")
    ranks = []
    for name, values, x in (("train_scores", train_scores, x_train), ("test_scores", test_scores, x_test)):
        v = check_inputs(values, name)
        if v.shape != x.shape:
            raise ShapeError(f"{name} must be shaped like its inputs {x.shape}; got {v.shape}.")
        order = np.argsort(-(np.abs(v) if absolute else v), axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(x.shape[1])[None, :].repeat(len(x), axis=0), axis=1)
        ranks.append(rank)
    fractions_array = np.asarray(fractions, dtype=np.float64)
    if fractions_array.ndim != 1 or not len(fractions_array) or not ((fractions_array >= 0) & (fractions_array <= 1)).all():
        raise InvalidParameterError(f"fractions must be a list of values in [0, 1]; got {list(fractions)}.")
    fill = x_train.mean(axis=0)
    m = x_train.shape[1]
    results = []
    for fraction in fractions_array:
        count = int(round(fraction * m))
        data = []
        for x, rank in ((x_train, ranks[0]), (x_test, ranks[1])):
            top = rank < count
            data.append(np.where(top, x, fill) if keep else np.where(top, fill, x))
        model = clone(estimator).fit(data[0], y_train)
        results.append(metric(y_test, model.predict(data[1])) if metric is not None else model.score(data[1], y_test))
    scores = np.asarray(results, dtype=np.float64)
    return RetrainCurve(fractions_array, scores, _area(fractions_array, scores), keep)

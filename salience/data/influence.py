"""Influence functions in closed form for L2-regularised logistic regression (Koh and Liang, 2017).

One fit of scikit-learn's ``LogisticRegression`` (objective ``C sum_i loss_i + |w|^2 / 2``, the
intercept not penalised); a training row's value is how much the test loss would rise were it
removed, to first order:

    value_i = C grad L_test^T H^-1 grad loss_i

with ``H`` the objective's Hessian at the fitted parameters and ``L_test`` the mean test loss
(cross-entropy). Binary problems have one weight vector; more classes the multinomial model's
one per class (its Hessian is ``C sum_i (diag(p_i) - p_i p_i^T) kron x_i x_i^T`` plus the
penalty). Positive values help the model on the test set; negative ones hurt it (mislabelled
rows, mostly).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.data.utility import require_sklearn
from salience.data.valuation import Valuation

__all__ = ["Influence", "logistic_influence"]


@register_method("valuation", "influence", "influence functions, closed form for logistic regression: the test loss a "
                                      "row's removal would add (Koh and Liang, 2017)")
class Influence(Valuation):
    """Influence of each training row on the test loss of an L2 logistic regression (``C``:
    scikit-learn's inverse regularisation strength; ``damping`` added to the Hessian's
    diagonal); one fit. After ``score``, ``model_`` is the fitted regression."""

    _parameter_constraints = {"C": [Interval("real", 0, closed="neither")], "damping": [Interval("real", 0)],
                              "max_iter": [Interval("int", 1)]}
    uses_model = False

    def __init__(self, *, C: float = 1.0, damping: float = 1e-6, max_iter: int = 1000, show_progress: bool = False):
        self.C, self.damping, self.max_iter = C, damping, max_iter
        super().__init__(show_progress=show_progress)

    def _values(self, utility):
        LogisticRegression = require_sklearn("linear_model", "Influence of logistic regression").LogisticRegression

        train, test = utility.train, utility.test
        # a tight optimum: the closed form holds at the minimum, not near it
        self.model_ = LogisticRegression(C=self.C, max_iter=self.max_iter, tol=1e-10).fit(train.X, train.codes)
        utility.fits += 1
        test_codes = train.codes_of(test.y)
        known = test_codes >= 0
        return logistic_influence(self.model_, train.X, train.codes, test.X[known], test_codes[known],
                                  damping=self.damping)


def _augmented(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((len(X), 1))])


def _gradients(model: Any, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per-row gradients of the cross-entropy with respect to the parameters (weights, then
    intercept; class by class for a multinomial model)."""
    Xa = _augmented(X)
    probabilities = model.predict_proba(X)
    if probabilities.shape[1] == 2 and model.coef_.shape[0] == 1:
        return (probabilities[:, 1] - (codes == 1))[:, None] * Xa
    residual = probabilities.copy()
    residual[np.arange(len(codes)), codes] -= 1.0
    return (residual[:, :, None] * Xa[:, None, :]).reshape(len(codes), -1)


def _hessian(model: Any, X: np.ndarray, C: float, damping: float) -> np.ndarray:
    Xa = _augmented(X)
    d = Xa.shape[1]
    probabilities = model.predict_proba(X)
    penalty = np.ones(d)
    penalty[-1] = 0.0  # the intercept is not penalised
    if probabilities.shape[1] == 2 and model.coef_.shape[0] == 1:
        weight = probabilities[:, 1] * probabilities[:, 0]
        return C * (Xa * weight[:, None]).T @ Xa + np.diag(penalty + damping)
    k = probabilities.shape[1]
    hessian = np.zeros((k * d, k * d))
    for a in range(k):
        for b in range(a, k):
            weight = probabilities[:, a] * ((a == b) - probabilities[:, b])
            block = C * (Xa * weight[:, None]).T @ Xa
            hessian[a * d : (a + 1) * d, b * d : (b + 1) * d] = block
            hessian[b * d : (b + 1) * d, a * d : (a + 1) * d] = block.T
    return hessian + np.diag(np.tile(penalty, k) + damping)


def logistic_influence(model: Any, X_train: np.ndarray, train_codes: np.ndarray, X_test: np.ndarray,
                       test_codes: np.ndarray, *, damping: float = 1e-6) -> np.ndarray:
    """Each training row's first-order rise of the mean test loss on its removal, for a fitted
    scikit-learn ``LogisticRegression`` (labels coded 0..K-1)."""
    if len(X_test) == 0:
        return np.zeros(len(X_train))
    hessian = _hessian(model, X_train, model.C, damping)
    test_gradient = _gradients(model, X_test, test_codes).mean(axis=0)
    direction = np.linalg.solve(hessian, test_gradient)
    return model.C * (_gradients(model, X_train, train_codes) @ direction)

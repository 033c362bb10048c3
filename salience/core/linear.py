"""L2-penalised binary logistic regression by L-BFGS, on dense or sparse features: the one
linear classifier the data filters and the text classifiers share."""

from __future__ import annotations

import numpy as np

from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["fit_logistic_regression"]


def fit_logistic_regression(X, labels, *, l2: float = 1e-4, sample_weight=None, max_iter: int = 200
                            ) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) minimising ``sum_i w_i log(1 + exp(-y_i (x_i . coef + b))) +
    l2 / 2 |coef|^2`` for labels ``y`` in {0, 1} (or booleans), ``w`` the ``sample_weight``
    (default: 1 / rows each). The intercept is not penalised."""
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != X.shape[0]:
        raise ShapeError(f"labels must hold one label per row ({X.shape[0]}); got shape {y.shape}.")
    y = np.where(y.astype(bool), 1.0, -1.0)
    if len(np.unique(y)) < 2:
        raise InvalidParameterError("logistic regression needs rows of both classes; all labels are the same.")
    weight = np.full(len(y), 1.0 / len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)

    def loss(params):
        w, b = params[:-1], params[-1]
        margin = y * (X @ w + b)
        value = np.sum(weight * np.logaddexp(0.0, -margin)) + 0.5 * l2 * (w @ w)
        g = -weight * y * 0.5 * (1.0 - np.tanh(margin / 2.0))  # d/dz log(1 + e^-yz) = -y sigmoid(-yz)
        return value, np.concatenate([X.T @ g + l2 * w, [g.sum()]])

    from scipy.optimize import minimize  # imported here: it costs half a second

    result = minimize(loss, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    return result.x[:-1], float(result.x[-1])

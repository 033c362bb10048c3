"""The ``examples`` verifier: were the data values real for the model they value?

OpenDataVal's point-removal experiment under the core's protocol: the training rows are removed
in steps, the top-valued first, the model refitted on the rest and scored on the test rows,
against random orders of removal; the low-valued-first curve (the scores reversed) is drawn
beside it, as OpenDataVal draws it. The model is the one the values are for (KNN-Shapley
values are verified with a k-nearest-neighbours refit): a model that does not move at all when
rows go is reported ``undetermined``, and a refit that fails on a tiny coalition leaves its step
out of every curve, counted (:func:`salience.core.verify.verify`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Exempt, Interval
from salience.core.verify import Verification, Verifier
from salience.data.utility import ModelUtility, check_refittable, labelled
from salience.data.valuation import _EXECUTOR

__all__ = ["ExampleVerifier"]


@register_method("verify", "examples", "training examples: the test score of the model refitted without the "
                                       "top-valued rows, against random orders (OpenDataVal's point removal)")
class ExampleVerifier(Verifier):
    """``model``: the scikit-learn-style estimator the values are for (default: logistic
    regression, as the valuation methods'); ``scoring``: the test metric (None: the model's own
    ``score``); ``max_fraction``: the largest share of rows removed (default 0.5, as point-removal
    plots run); ``n_jobs`` and ``executor`` spread the refits."""

    unit = "examples"
    _parameter_constraints = {"model": [None, Exempt("a scikit-learn estimator, checked when it is fitted")],
                              "scoring": [None, str, callable],
                              "max_fraction": [Interval("real", 0, 1, closed="right")],
                              "n_jobs": [Interval("int", 1)], "executor": [_EXECUTOR]}

    def __init__(self, *, model: Any = None, scoring: Any = None, max_fraction: float = 0.5, n_jobs: int = 1,
                 executor: Any = "local", steps: int = 10, n_random: int = 20, seed: int | None = 0,
                 alpha: float = 0.01):
        self.model, self.scoring, self.max_fraction = model, scoring, max_fraction
        self.n_jobs, self.executor = n_jobs, executor
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, train, test, ids: Sequence | None = None) -> Verification:
        """Verify the values ``scores`` of ``train``'s rows (``(X, y)``; ``ids``: the rows' ids
        when the scores carry ids) by refitting on what is left and scoring on ``test``."""
        train = labelled(train, "train")
        test = labelled(test, "test", classes=False)
        if ids is not None and len(ids) != len(train):
            from salience.exceptions import ShapeError

            raise ShapeError(f"ids name {len(ids)} rows for {len(train)} training rows.")
        model = check_refittable(self.model)
        utility = ModelUtility(model, train, test, scoring=self.scoring, default=np.nan, executor=self.executor,
                               n_jobs=self.n_jobs)
        with utility:
            return self._run(scores, utility, units=ids, max_fraction=self.max_fraction,
                             costs=lambda: {"fits": utility.fits, "failed_fits": utility.failed_fits})

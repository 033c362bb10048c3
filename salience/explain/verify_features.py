"""The ``features`` verifier: was a feature attribution real for the model it explains?

The model's output on one input as the top-scored features are set to their baseline value
(deletion, RISE's curve) or added to the baseline (insertion), against random orders of the
features: :func:`salience.core.verify.verify`. The scores' curve is
:func:`~salience.core.faithfulness.deletion_curve`'s (``insertion_curve``'s) at the same steps.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from salience.core.base import register_method
from salience.core.calls import ModelCalls
from salience.core.faithfulness import prepare_row
from salience.core.params import Interval
from salience.core.verify import Verification, Verifier, check_unit_scores
from salience.exceptions import ShapeError

__all__ = ["FeatureVerifier"]


@register_method("verify", "features", "input features: the model's output as the top-scored features take their "
                                       "baseline value (or are inserted into it), against random orders (RISE, "
                                       "Quantus' deletion / insertion)")
class FeatureVerifier(Verifier):
    """``insertion``: add the features to the baseline instead of removing them; ``batch_size``:
    rows per model call (None: all of a curve at once). The outcome is the model's output, which
    removing the important features should lower (``worse="lower"``); explain a model's
    probability of the class the scores are for."""

    unit = "features"
    _parameter_constraints = {"insertion": [bool], "batch_size": [None, Interval("int", 1)]}

    def __init__(self, *, insertion: bool = False, batch_size: int | None = None, steps: int = 10,
                 n_random: int = 20, seed: int | None = 0, alpha: float = 0.01):
        self.insertion, self.batch_size = insertion, batch_size
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, model: Callable, x, baseline=None, worse: str = "lower") -> Verification:
        """Verify ``scores`` (one per feature of the row ``x``) against ``model`` (rows -> one
        output each); removed features take ``baseline`` (default zeros)."""
        row, base = prepare_row(model, x, baseline)
        values = check_unit_scores(scores)
        if len(values) != len(row):
            raise ShapeError(f"scores hold {len(values)} values for the {len(row)} features of x: one per feature.")
        calls = ModelCalls(model, batch_size=self.batch_size)

        def outcome(kept: np.ndarray) -> np.ndarray:
            return calls(np.where(np.atleast_2d(kept), row, base))

        return self._run(values, outcome, insertion=self.insertion, worse=worse, keep_at_least=0,
                         costs=lambda: {"model_calls": calls.calls})

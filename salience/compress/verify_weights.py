"""The ``weights`` verifier: did the weights scored most important matter most to the model?

The units are the weights of some linear layers (``modules``, by name); a weight is removed by
setting it to zero, as unstructured pruning does. The outcome is the log perplexity of held-out
windows as the top-scored weights are zeroed, against random orders of removal, up to
``max_fraction`` of them (:func:`salience.core.verify.verify`, ``worse="higher"``): a weight
criterion (``magnitude``, ``wanda``, ...) is faithful when the weights it would keep are the
ones whose loss hurts. Scores come per module (a weight-shaped array, as
:meth:`~salience.compress.WeightCriterion.importance` gives them) and are ranked across all the
modules given. At most ``max_units`` weights (each removal step is a mask over all of them).
The model is left as it was.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from salience.compress.evaluate import held_out_log_perplexity, restored_weights
from salience.compress.weights import check_calibration, prunable_linears
from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.verify import Verification, Verifier, check_unit_scores
from salience.exceptions import InvalidParameterError, ShapeError
from salience.extras import require_torch

__all__ = ["WeightVerifier"]


@register_method("verify", "weights", "weights of linear layers: held-out log perplexity as the top-scored weights "
                                      "are zeroed, against random orders")
class WeightVerifier(Verifier):
    """``batch_size``: windows per forward pass; ``max_fraction``: the largest share of the
    weights zeroed; ``max_units``: the most weights verified at once."""

    unit = "weights"
    _parameter_constraints = {"batch_size": [Interval("int", 1)],
                              "max_fraction": [Interval("real", 0, 1, closed="right")],
                              "max_units": [Interval("int", 1)]}

    def __init__(self, *, batch_size: int = 4, max_fraction: float = 0.5, max_units: int = 5_000_000, steps: int = 10,
                 n_random: int = 20, seed: int | None = 0, alpha: float = 0.01):
        self.batch_size, self.max_fraction, self.max_units = batch_size, max_fraction, max_units
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores: Mapping, *, model, windows) -> Verification:
        """Verify ``scores`` (module name -> one score per weight, shaped like its weight) on
        ``windows`` of token ids (samples x seqlen, held out from the scores' calibration)."""
        torch = require_torch("Verifying weight importance")
        windows = check_calibration(windows)
        if not isinstance(scores, Mapping) or not scores:
            raise InvalidParameterError("scores must map linear layers' names to their weights' scores "
                                        "({'model.layers.0.mlp.down_proj': array, ...}).")
        linears = dict(prunable_linears(model))
        unknown = [name for name in scores if name not in linears]
        if unknown:
            raise InvalidParameterError(f"{unknown[0]!r} is not a linear layer of the model's decoder blocks (e.g. "
                                        f"{next(iter(linears))!r}).")
        modules = [linears[name] for name in scores]
        parts = []
        for name, module in zip(scores, modules):
            value = np.asarray(scores[name], dtype=np.float64)
            if value.shape != tuple(module.weight.shape):
                raise ShapeError(f"scores of {name!r} have shape {value.shape}; its weight has "
                                 f"{tuple(module.weight.shape)}.")
            parts.append(check_unit_scores(value.ravel(), what=f"scores of {name!r}"))
        values = np.concatenate(parts)
        if len(values) > self.max_units:
            raise InvalidParameterError(f"{len(values)} weights exceed max_units={self.max_units}: verify fewer "
                                        "modules at a time (or raise max_units; every step is a mask over all).")
        bounds = np.cumsum([0] + [p.size for p in parts])
        passes = [0]

        with restored_weights(modules) as originals:
            def outcome(kept: np.ndarray):
                if kept.ndim == 2:  # a batch of sets: one after another
                    return np.array([outcome(row) for row in kept])
                with torch.no_grad():
                    for module, original, lo, hi in zip(modules, originals, bounds[:-1], bounds[1:]):
                        mask = torch.as_tensor(kept[lo:hi].reshape(original.shape), dtype=original.dtype)
                        module.weight.copy_(original * mask)
                value, n = held_out_log_perplexity(model, windows, batch_size=self.batch_size)
                passes[0] += n
                return value

            return self._run(values, outcome, worse="higher", max_fraction=self.max_fraction,
                             costs=lambda: {"forward_passes": passes[0]})

"""The ``layers`` verifier: did the layers scored most important matter most to the model?

The outcome is the log perplexity of held-out windows as the top-scored decoder layers are
removed (ShortGPT's experiment), against random orders of removal, up to ``max_fraction`` of the
layers (:func:`salience.core.verify.verify`; removing a layer raises perplexity, so
``worse="higher"``). Beside the curves, ``extras["one_removed"]``: each layer's measured
perplexity change when it alone is removed, and its Spearman correlation with the scores (how
well the scores predict what removing one layer does). The model is left as it was.
"""

from __future__ import annotations

import numpy as np

from salience.compress.evaluate import perplexity
from salience.compress.layers import _set_layers, perplexity_change, restored_layers
from salience.models.lm import decoder_layers
from salience.compress.weights import check_calibration
from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.verify import Verification, Verifier, check_unit_scores

__all__ = ["LayerVerifier"]


@register_method("verify", "layers", "decoder layers: held-out log perplexity as the top-scored layers are removed, "
                                     "against random orders; the scores' rank correlation with each layer's "
                                     "one-removed change")
class LayerVerifier(Verifier):
    """``batch_size``: windows per forward pass; ``max_fraction``: the largest share of the
    layers removed (default 0.5: past it every order wrecks the model alike); ``one_removed``:
    also measure each layer alone removed (one perplexity per layer) and correlate."""

    unit = "layers"
    _parameter_constraints = {"batch_size": [Interval("int", 1)],
                              "max_fraction": [Interval("real", 0, 1, closed="right")], "one_removed": [bool]}

    def __init__(self, *, batch_size: int = 4, max_fraction: float = 0.5, one_removed: bool = True, steps: int = 10,
                 n_random: int = 20, seed: int | None = 0, alpha: float = 0.01):
        self.batch_size, self.max_fraction, self.one_removed = batch_size, max_fraction, one_removed
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, model, windows) -> Verification:
        """Verify ``scores`` (one per decoder layer of ``model``) on ``windows`` of token ids
        (samples x seqlen, held out from whatever the scores were computed on)."""
        windows = check_calibration(windows)
        ids, seqlen = windows.ravel(), windows.shape[1]
        n_layers = len(decoder_layers(model))
        passes = [0]

        with restored_layers(model) as layers:
            def outcome(kept: np.ndarray):
                if kept.ndim == 2:  # a batch of sets: one after another
                    return np.array([outcome(row) for row in kept])
                _set_layers(model, layers, np.flatnonzero(kept).tolist())
                passes[0] += -(-len(windows) // self.batch_size)
                return float(np.log(perplexity(model, ids, seqlen=seqlen, batch_size=self.batch_size)))

            result = self._run(scores, outcome, units=[str(i) for i in range(n_layers)], worse="higher",
                               max_fraction=self.max_fraction, costs=lambda: {"forward_passes": passes[0]})
        if self.one_removed:
            from salience.core.correlation import spearman_rho

            measured = perplexity_change(model, windows, batch_size=self.batch_size).values
            values = check_unit_scores(scores, [str(i) for i in range(n_layers)])
            result.extras["one_removed"] = {"perplexity_change": measured.tolist(),
                                            "spearman": float(spearman_rho(values, measured))}
            result.costs["forward_passes"] += (n_layers + 1) * -(-len(windows) // self.batch_size)
        return result

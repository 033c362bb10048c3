"""The ``structures`` verifier: did the FFN channels or attention heads scored most important
matter most to the model?

A unit is removed by zeroing what it writes to the residual stream: its column of ``down_proj``
(an FFN channel) or its key/value group's columns of ``o_proj`` (an attention head group), the
same as cutting it out (:func:`~salience.compress.structured.remove_structures`) for the
model's output. The outcome is the log perplexity of held-out windows as the top-scored units
are removed, across every decoder layer at once, against random orders of removal, up to
``max_fraction`` of the units (:func:`salience.core.verify.verify`, ``worse="higher"``). With
``one_removed`` (and at most ``max_one_removed`` units), each unit's measured change when it
alone is removed and its Spearman correlation with the scores. The model is left as it was.
"""

from __future__ import annotations

import numpy as np

from salience.compress.evaluate import held_out_log_perplexity, restored_weights
from salience.compress.structured import STRUCTURE_UNITS, _blocks, _unit_groups
from salience.compress.weights import check_calibration
from salience.core.base import register_method
from salience.core.params import Interval, Options
from salience.core.verify import Verification, Verifier, check_unit_scores
from salience.extras import require_torch

__all__ = ["StructureVerifier"]


@register_method("verify", "structures", "FFN channels or attention head groups: held-out log perplexity as the "
                                         "top-scored units stop writing to the residual stream, against random "
                                         "orders; the scores' rank correlation with each unit's one-removed change")
class StructureVerifier(Verifier):
    """``structure``: ``ffn_channels`` or ``attention_heads`` (the units the ``structure`` criteria score,
    ids ``"layer:unit"`` as its scores give them); ``batch_size``: windows per forward pass;
    ``max_fraction``: the largest share of units removed; ``one_removed``: also measure each
    unit alone removed, when there are at most ``max_one_removed`` units."""

    unit = "structures"
    _parameter_constraints = {"structure": [Options(STRUCTURE_UNITS)], "batch_size": [Interval("int", 1)],
                              "max_fraction": [Interval("real", 0, 1, closed="right")], "one_removed": [bool],
                              "max_one_removed": [Interval("int", 1)]}

    def __init__(self, *, structure: str = "attention_heads", batch_size: int = 4, max_fraction: float = 0.5,
                 one_removed: bool = True, max_one_removed: int = 256, steps: int = 10, n_random: int = 20,
                 seed: int | None = 0, alpha: float = 0.01):
        self.structure, self.batch_size, self.max_fraction = structure, batch_size, max_fraction
        self.one_removed, self.max_one_removed = one_removed, max_one_removed
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, model, windows) -> Verification:
        """Verify ``scores`` (one per unit, ids ``"layer:unit"``) on ``windows`` of token ids
        (samples x seqlen, held out from whatever the scores were computed on)."""
        torch = require_torch("Verifying structure importance")
        windows = check_calibration(windows)
        layers = _blocks(model)
        outputs, widths, ids = [], [], []
        for i, layer in enumerate(layers):
            _, (out_proj,), _, n_units = _unit_groups(layer, self.structure)
            outputs.append(out_proj)
            widths.append(out_proj.in_features // n_units)  # columns per unit (a kv group's query heads)
            ids += [f"{i}:{u}" for u in range(n_units)]
        bounds = np.cumsum([0] + [m.in_features // w for m, w in zip(outputs, widths)])
        passes = [0]

        with restored_weights(outputs) as originals:
            def outcome(kept: np.ndarray):
                if kept.ndim == 2:  # a batch of sets: one after another
                    return np.array([outcome(row) for row in kept])
                with torch.no_grad():
                    for module, original, width, lo, hi in zip(outputs, originals, widths, bounds[:-1], bounds[1:]):
                        columns = torch.as_tensor(np.repeat(kept[lo:hi], width), dtype=original.dtype)
                        module.weight.copy_(original * columns[None, :])
                value, n = held_out_log_perplexity(model, windows, batch_size=self.batch_size)
                passes[0] += n
                return value

            result = self._run(scores, outcome, units=ids, worse="higher", max_fraction=self.max_fraction,
                               costs=lambda: {"forward_passes": passes[0]})
            if self.one_removed and len(ids) <= self.max_one_removed:
                from salience.core.correlation import spearman_rho

                values = check_unit_scores(scores, ids)
                whole = outcome(np.ones(len(ids), dtype=bool))
                measured = np.array([outcome(np.arange(len(ids)) != u) - whole for u in range(len(ids))])
                result.extras["one_removed"] = {"log_perplexity_change": measured.tolist(),
                                                "spearman": float(spearman_rho(values, measured))}
                result.costs["forward_passes"] = passes[0]
            elif self.one_removed:
                result.notes.append(f"one-removed changes not measured: {len(ids)} units > max_one_removed="
                                    f"{self.max_one_removed}")
        return result

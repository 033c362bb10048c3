"""``contextcite``: ContextCite's surrogate (Cohen-Wang et al., 2024; ``context-cite`` 0.0.4).

``n_ablations`` random ablation masks keep each source with probability ``keep_probability``
(mask i drawn as context-cite draws it: ``RandomState(seed + i)``); the response's
log-probability under each masked context (one forward pass per mask) becomes ContextCite's
output, the response's logit-probability ``log P - log(1 - P)`` divided by its tokens; a Lasso
(``lasso_alpha``) on standardised masks fits it, and its weights, rescaled to the masks' scale
and multiplied back by the tokens, are the sources' scores: how much each source adds to the
response's logit-probability.
"""

from __future__ import annotations

import numpy as np

from salience.core.base import register_method
from salience.core.params import SEED, Interval
from salience.exceptions import InvalidParameterError
from salience.explain.context_base import ContextAttribution
from salience.models.answering import CONTEXT_TEMPLATE

__all__ = ["ContextCite", "ablation_masks"]


def ablation_masks(n_sources: int, n_ablations: int, keep_probability: float, seed: int = 0) -> np.ndarray:
    """context-cite's masks: row i kept by ``RandomState(seed + i)``'s draw of each source with
    probability ``keep_probability``."""
    return np.stack([np.random.RandomState(seed + i).choice([False, True], size=n_sources,
                                                            p=[1 - keep_probability, keep_probability])
                     for i in range(n_ablations)])


@register_method("context", "contextcite", "ContextCite: a Lasso surrogate of the response's logit-probability over "
                                           "random ablations of the sources (Cohen-Wang et al., 2024)")
class ContextCite(ContextAttribution):
    """``n_ablations``: masked contexts (forward passes), at least the number of sources;
    ``keep_probability``: of each source in a mask; ``lasso_alpha``: the surrogate's L1 weight;
    ``seed``: of the masks."""

    _parameter_constraints = {"n_ablations": [Interval("int", 1)],
                              "keep_probability": [Interval("real", 0, 1, closed="neither")],
                              "lasso_alpha": [Interval("real", 0, closed="neither")], "seed": SEED}

    def __init__(self, model, *, tokenizer, n_ablations: int = 64, keep_probability: float = 0.5,
                 lasso_alpha: float = 0.01, seed: int | None = 0, template: str = CONTEXT_TEMPLATE,
                 separator: str = "\n\n", chat: "bool | str" = "auto", max_new_tokens: int = 64):
        self.n_ablations, self.keep_probability, self.lasso_alpha, self.seed = (n_ablations, keep_probability,
                                                                                lasso_alpha, seed)
        super().__init__(model, tokenizer=tokenizer, template=template, separator=separator, chat=chat,
                         max_new_tokens=max_new_tokens)

    def _attribute(self, asked) -> np.ndarray:
        from salience.extras import require

        Lasso = require("sklearn.linear_model", "valuation", "ContextCite's surrogate").Lasso
        StandardScaler = require("sklearn.preprocessing", "valuation", "ContextCite's surrogate").StandardScaler

        n = len(asked.sources)
        if self.n_ablations < n:
            raise InvalidParameterError(f"n_ablations={self.n_ablations} is below the {n} sources: the surrogate needs "
                                        f"at least {n} ablations (ContextCite uses 32 to 256).")
        masks = ablation_masks(n, self.n_ablations, self.keep_probability, 0 if self.seed is None else self.seed)
        log_probs = asked.log_probs(masks)
        # ContextCite's output: the response's logit-probability, log P - log(1 - P)
        outputs = log_probs - np.log(-np.expm1(np.minimum(log_probs, -1e-12)))
        tokens = len(asked.response_ids)
        X = masks.astype(np.float32)
        scaler = StandardScaler().fit(X)
        lasso = Lasso(alpha=self.lasso_alpha, random_state=0, fit_intercept=True).fit(scaler.transform(X),
                                                                                       outputs / tokens)
        self.surrogate_ = {"masks": masks, "outputs": outputs, "bias": float(
            (lasso.intercept_ - (scaler.mean_ / scaler.scale_) @ lasso.coef_) * tokens)}
        return lasso.coef_ / scaler.scale_ * tokens

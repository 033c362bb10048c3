"""``kernel_shap``: Shapley values of the sources for the response's log-probability, estimated
by the explain domain's Kernel SHAP (``n_samples`` masked contexts, one forward pass each; with
few sources, every coalition); the values sum to the response's log-probability with every
source less with none."""

from __future__ import annotations

import numpy as np

from salience.core.base import create, register_method
from salience.core.params import SEED, Interval
from salience.explain.context_base import ContextAttribution
from salience.models.answering import CONTEXT_TEMPLATE

__all__ = ["ContextShap"]


@register_method("context", "kernel_shap", "Kernel SHAP over the sources: Shapley values of the response's "
                                           "log-probability (the explain domain's estimator)")
class ContextShap(ContextAttribution):
    """``n_samples``: masked contexts (forward passes; None: the estimator's default);
    ``seed``: of the sampled coalitions."""

    _parameter_constraints = {"n_samples": [None, Interval("int", 1)], "seed": SEED}

    def __init__(self, model, *, tokenizer, n_samples: int | None = 64, seed: int | None = 0,
                 template: str = CONTEXT_TEMPLATE, separator: str = "\n\n", chat: "bool | str" = "auto",
                 max_new_tokens: int = 64):
        self.n_samples, self.seed = n_samples, seed
        super().__init__(model, tokenizer=tokenizer, template=template, separator=separator, chat=chat,
                         max_new_tokens=max_new_tokens)

    def _attribute(self, asked) -> np.ndarray:
        n = len(asked.sources)
        explainer = create("explain", "kernel_shap", model=lambda masks: asked.log_probs(np.asarray(masks) > 0.5))
        result = explainer.attribute(np.ones(n), baselines=np.zeros(n), n_samples=self.n_samples, seed=self.seed)
        return result.values[0]

"""``attention``: the attention the response's tokens pay each source's tokens, in one forward
pass over the prompt and the response (eager attention, the attention weights returned):
summed over the source's tokens and the response's, averaged over ``layers`` (default all) and
every head. A model that cannot return its attention weights is refused, naming the methods
that need none.
"""

from __future__ import annotations

import numpy as np

from salience.core.base import register_method
from salience.core.params import Check
from salience.exceptions import InvalidParameterError
from salience.explain.context_base import ContextAttribution
from salience.extras import require_torch
from salience.models.answering import CONTEXT_TEMPLATE

__all__ = ["AttentionAttribution"]


def _is_layers(value) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                                      for v in value) and len(value) > 0)


@register_method("context", "attention", "attention from the response's tokens to each source's, layers and heads "
                                         "averaged: one forward pass")
class AttentionAttribution(ContextAttribution):
    """``layers``: the decoder layers whose attention counts (None: all)."""

    _parameter_constraints = {"layers": [Check(_is_layers, "None or a non-empty list of layer indices")]}

    def __init__(self, model, *, tokenizer, layers: list | None = None, template: str = CONTEXT_TEMPLATE,
                 separator: str = "\n\n", chat: "bool | str" = "auto", max_new_tokens: int = 64):
        self.layers = layers
        super().__init__(model, tokenizer=tokenizer, template=template, separator=separator, chat=chat,
                         max_new_tokens=max_new_tokens)

    def _attribute(self, asked) -> np.ndarray:
        torch = require_torch("Attention context attribution")
        prompt = asked.prompt_ids(np.ones(len(asked.sources), dtype=bool))
        spans = asked.source_spans()
        ids = torch.tensor([prompt + list(asked.response_ids)])
        setter = getattr(self.model, "set_attn_implementation", None)
        before = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        try:
            if setter is not None and before != "eager":
                setter("eager")
            with torch.no_grad():
                attentions = self.model(input_ids=ids, output_attentions=True).attentions
        finally:
            if setter is not None and before not in (None, "eager"):
                setter(before)
        asked.forward_passes += 1
        if not attentions or any(a is None for a in attentions):
            raise InvalidParameterError("this model returns no attention weights: use the context methods that need "
                                        "none (contextcite, loo, kernel_shap).")
        chosen = range(len(attentions)) if self.layers is None else self.layers
        if any(not -len(attentions) <= i < len(attentions) for i in chosen):
            raise InvalidParameterError(f"layers {list(chosen)} are not all among the model's {len(attentions)} layers.")
        # rows: the response's tokens; columns: the prompt's
        stacked = torch.stack([attentions[i][0, :, len(prompt):, :len(prompt)] for i in chosen]).double()
        per_token = stacked.sum(dim=2).mean(dim=(0, 1)).numpy()  # attention each prompt token receives
        return np.array([per_token[a:b].sum() for a, b in spans])

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
from salience.explain.context_base import ContextAttribution
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
        return asked.source_attention(reader="response", layers=self.layers)

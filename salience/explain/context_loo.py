"""``loo``: exact leave-one-out over the sources: each source's score is the response's
log-probability with every source less without that one (one forward pass per source).

With ``prefix_cache`` (default), the whole context is read once into a key/value cache, and
each ablated context reuses the cache of the tokens it shares with the whole one (everything
before the left-out source), reading only the rest: AttriBoT's caching of the unchanged prefix
(Liu et al., 2024), the same log-probabilities as recomputing every context.
"""

from __future__ import annotations

import numpy as np

from salience.core.base import register_method
from salience.explain.context_base import ContextAttribution
from salience.models.answering import CONTEXT_TEMPLATE

__all__ = ["LeaveOneOut"]


@register_method("context", "loo", "exact leave-one-out: the response's log-probability drop without each source "
                                   "(the unchanged prefix's key/value cache reused, as AttriBoT)")
class LeaveOneOut(ContextAttribution):
    """``prefix_cache``: reuse the whole context's key/value cache for the prefix each ablated
    context shares with it (False: every context read in full)."""

    _parameter_constraints = {"prefix_cache": [bool]}

    def __init__(self, model, *, tokenizer, prefix_cache: bool = True, template: str = CONTEXT_TEMPLATE,
                 separator: str = "\n\n", chat: "bool | str" = "auto", max_new_tokens: int = 64):
        self.prefix_cache = prefix_cache
        super().__init__(model, tokenizer=tokenizer, template=template, separator=separator, chat=chat,
                         max_new_tokens=max_new_tokens)

    @property
    def _reuses_prefix(self) -> bool:
        return self.prefix_cache

    def _attribute(self, asked) -> np.ndarray:
        n = len(asked.sources)
        whole = float(asked.log_probs(np.ones(n, dtype=bool), reuse_prefix=self.prefix_cache)[0])
        return whole - asked.log_probs(~np.eye(n, dtype=bool), reuse_prefix=self.prefix_cache)

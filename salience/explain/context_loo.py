"""``loo``: exact leave-one-out over the sources: each source's score is the response's
log-probability with every source less without that one (one forward pass per source).

With ``prefix_cache`` (default), the whole context is read once into a key/value cache, and
each ablated context reuses the cache of the tokens it shares with the whole one (everything
before the left-out source), reading only the rest: AttriBoT's caching of the unchanged prefix
(Liu et al., 2024), the same log-probabilities as recomputing every context.
"""

from __future__ import annotations

import copy

import numpy as np

from salience.core.base import register_method
from salience.explain.context_base import ContextAttribution
from salience.extras import require_torch
from salience.models.answering import CONTEXT_TEMPLATE, continuation_logits, target_log_probs
from salience.models.kv import cache_argument, returned_cache

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

    def _attribute(self, asked) -> np.ndarray:
        n = len(asked.sources)
        masks = ~np.eye(n, dtype=bool)
        whole = float(asked.log_probs(np.ones(n, dtype=bool))[0]) if not self.prefix_cache else None
        if not self.prefix_cache:
            return whole - asked.log_probs(masks)
        torch = require_torch("Leave-one-out context attribution")
        response = list(asked.response_ids)
        target = torch.tensor(response)
        full = asked.prompt_ids(np.ones(n, dtype=bool)) + response
        argument = cache_argument(self.model)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([full]), use_cache=True)
            cache = returned_cache(out)
            whole = float(target_log_probs(torch, out.logits[:, -len(response) - 1 : -1], target, wide=True)[0])
            asked.forward_passes += 1
            drops = np.empty(n)
            for i, kept in enumerate(masks):
                ids = asked.prompt_ids(kept) + response
                shared = 0
                while shared < min(len(ids), len(full)) - 1 and ids[shared] == full[shared]:
                    shared += 1
                shared = min(shared, len(ids) - len(response) - 1)  # the rest holds every position read
                prefix = copy.deepcopy(cache)
                for layer in prefix.layers:  # the shared prefix alone (crop's meaning differs across versions)
                    layer.keys, layer.values = layer.keys[:, :, :shared], layer.values[:, :, :shared]
                rest = torch.tensor([ids[shared:]])
                logits = continuation_logits(self.model, n_keep=len(response) + 1, input_ids=rest,
                                             position_ids=torch.arange(shared, len(ids))[None], use_cache=True,
                                             **{argument: prefix})[:, :-1]
                drops[i] = whole - float(target_log_probs(torch, logits, target, wide=True)[0])
                asked.forward_passes += 1
        return drops

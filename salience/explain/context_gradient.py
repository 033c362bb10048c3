"""``gradient``: gradient x input of the response's log-probability with respect to the prompt's
token embeddings, summed over the embedding dimensions and over each source's tokens (one
forward and one backward pass): a first-order estimate of what removing the source's tokens
would change.
"""

from __future__ import annotations

import numpy as np

from salience.core.base import register_method
from salience.explain.context_base import ContextAttribution
from salience.extras import require_torch
from salience.models.answering import target_log_probs

__all__ = ["GradientAttribution"]


@register_method("context", "gradient", "gradient x input of the response's log-probability over each source's token "
                                        "embeddings: one forward and one backward pass")
class GradientAttribution(ContextAttribution):
    def _attribute(self, asked) -> np.ndarray:
        torch = require_torch("Gradient context attribution")
        prompt = asked.prompt_ids(np.ones(len(asked.sources), dtype=bool))
        spans = asked.source_spans()
        response = list(asked.response_ids)
        ids = torch.tensor([prompt + response])
        embeddings = self.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = self.model(inputs_embeds=embeddings).logits[:, len(prompt) - 1 : -1]
        log_prob = target_log_probs(logits, torch.tensor(response))[0]
        (gradient,) = torch.autograd.grad(log_prob, embeddings)
        asked.forward_passes += 1
        per_token = (gradient * embeddings.detach())[0].sum(dim=-1).double().numpy()
        return np.array([per_token[a:b].sum() for a, b in spans])

"""The ``passages`` verifier: did the passages scored highest make the language model's answer?

For a question answered by a causal LM from retrieved passages (or documents), the outcome is
the answer's log-probability as the top-scored passages are taken out of the context
(ContextCite's top-k log-probability drop, Cohen-Wang et al., 2024), against random orders of
removal (:func:`salience.core.verify.verify`). Any passage scorer can be verified: BM25, dense,
hybrid, a reranker, an LM judge, a context attribution. The prompt is ContextCite's
(:class:`~salience.models.answering.SourcedQuestion`); the answer is given or generated
greedily from every passage. The context may be emptied (the model then answers from what it
knows), so a curve runs to every passage removed; one forward pass per distinct set of kept
passages. ``extras``: the answer, its log-probability with every passage, and ContextCite's
top-k drop (k = 1, 3, 5 where there are that many): how much it falls without the k passages
scored highest.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval, Options
from salience.core.verify import Verification, Verifier, check_unit_scores
from salience.models.answering import CONTEXT_TEMPLATE, SourcedQuestion, source_texts

__all__ = ["PassageVerifier"]


@register_method("verify", "passages", "passages or documents in an LM's context: the answer's log-probability as the "
                                       "top-scored passages are taken out (ContextCite's top-k drop), against random "
                                       "orders")
class PassageVerifier(Verifier):
    """``template``: the prompt, with ``{context}`` and ``{query}`` (ContextCite's by default);
    ``separator``: between passages; ``chat``: send the prompt as a user turn of the tokenizer's
    chat template (``auto``: when it has one); ``max_new_tokens``: of a generated answer."""

    unit = "passages"
    _parameter_constraints = {"template": [str], "separator": [str], "chat": [bool, Options(("auto",))],
                              "max_new_tokens": [Interval("int", 1)]}

    def __init__(self, *, template: str = CONTEXT_TEMPLATE, separator: str = "\n\n", chat: "bool | str" = "auto",
                 max_new_tokens: int = 64, steps: int = 10, n_random: int = 20, seed: int | None = 0,
                 alpha: float = 0.01):
        self.template, self.separator, self.chat, self.max_new_tokens = template, separator, chat, max_new_tokens
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, passages: "Mapping[str, str] | Sequence[str]", question: str, model, tokenizer,
               response=None) -> Verification:
        """Verify ``scores`` over ``passages`` (id -> text, or texts whose ids are their
        positions; the context shows them in this order) for ``question`` answered by ``model``:
        ``response`` (a text or token ids) or, when None, its greedy answer."""
        ids, texts = source_texts(passages)
        asked = SourcedQuestion(model, tokenizer, texts, question, response=response, template=self.template,
                                separator=self.separator, chat=self.chat, max_new_tokens=self.max_new_tokens)
        known: dict[bytes, float] = {}

        def outcome(kept: np.ndarray) -> np.ndarray:
            kept = np.atleast_2d(kept)
            keys = [np.packbits(k).tobytes() for k in kept]
            todo = [i for i, key in enumerate(keys) if key not in known]
            if todo:
                for i, value in zip(todo, asked.log_probs(kept[todo])):
                    known[keys[i]] = float(value)
            return np.array([known[key] for key in keys])

        result = self._run(scores, outcome, units=ids, keep_at_least=0,
                           costs=lambda: {"forward_passes": asked.forward_passes})
        n = len(ids)
        full = float(outcome(np.ones(n, dtype=bool))[0])
        values = check_unit_scores(scores, ids)
        order = np.argsort(-values, kind="stable")
        drops = {}
        for k in (1, 3, 5):
            if k <= n:
                kept = np.ones(n, dtype=bool)
                kept[order[:k]] = False
                drops[str(k)] = full - float(outcome(kept)[0])
        result.extras.update({"response": asked.response, "log_prob": full, "top_k_drop": drops})
        result.costs["forward_passes"] = asked.forward_passes
        return result

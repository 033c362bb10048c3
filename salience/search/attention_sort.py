"""Attention sorting (Peysakhovich and Lerer, 2023): reorder a packed context so that the
passages the model attends to most sit nearest the question, where a language model reads best.

Each round reads the prompt once (the passages in the current order, then the question) and
sorts the passages by the attention the question's tokens pay them, ascending: the most attended
passage ends last, next to the question. Further rounds re-read the new order.
"""

from __future__ import annotations

import numpy as np

from salience.core.checks import check_k
from salience.models.answering import CONTEXT_TEMPLATE, SourcedQuestion, source_texts

__all__ = ["attention_sort"]


def attention_sort(passages, question: str, *, model, tokenizer, rounds: int = 1, layers=None,
                   template: str = CONTEXT_TEMPLATE, separator: str = "\n\n", chat: "bool | str" = "auto") -> list[str]:
    """The passages' ids (a dict of id -> text, or a list: ids its positions) in the order the
    context should show them, after ``rounds`` of attention sorting (one forward pass each)."""
    rounds = check_k(rounds, "rounds")
    ids, texts = source_texts(passages)
    order = list(range(len(ids)))
    for _ in range(rounds):
        asked = SourcedQuestion(model, tokenizer, [texts[i] for i in order], question, template=template,
                                separator=separator, chat=chat, answered=False)
        received = asked.source_attention(reader="question", layers=layers)
        order = [order[i] for i in np.argsort(received, kind="stable")]
    return [ids[i] for i in order]

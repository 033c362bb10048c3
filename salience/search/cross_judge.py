"""A cross-encoder as a relevance judge (the ``judge`` family's ``cross``): the transformer reads
the query and each passage together (:class:`salience.models.cross_encoder.CrossEncoder`; make
one with ``salience search train-reranker``)."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Exempt, Interval, Options
from salience.exceptions import InvalidParameterError
from salience.models.cross_encoder import BACKENDS, PRECISIONS
from salience.search.lm_judges import Judge

__all__ = ["CrossJudge"]


@register_method("judge", "cross", "cross-encoder judge: a transformer reads the query and the passage together "
                                   "(salience search train-reranker makes one)")
class CrossJudge(Judge):
    """``model``: a cross-encoder folder; ``max_length``: the pair's tokens (the longer of the
    two cut first; for one that starts from its bi-encoder, each text's); ``batch_tokens``:
    padded tokens per batch; ``precision``: ``fp32``, ``bf16`` (autocast; 2-3x faster on CPUs
    with bfloat16 instructions) or ``int8`` (linear layers dynamically quantized); ``backend``:
    ``torch`` or ``onnx`` (ONNX Runtime, fp32, for a cross-encoder with a scoring head)."""

    model_parameter = "model"  # what the command line's --model sets
    _parameter_constraints = {"model": [Exempt("a cross-encoder folder or model, loaded when used")],
                              "max_length": [Interval("int", 16)], "batch_tokens": [Interval("int", 16)],
                              "precision": [Options(PRECISIONS)], "backend": [Options(BACKENDS)]}

    def __init__(self, *, model: str, max_length: int = 128, batch_tokens: int = 8192, precision: str = "fp32",
                 backend: str = "torch"):
        from salience.models.cross_encoder import CrossEncoder

        self.model, self.max_length, self.batch_tokens = str(model), max_length, batch_tokens
        self.precision, self.backend = precision, backend
        self._validate_params()
        self.cross = CrossEncoder(model, max_length=max_length, batch_tokens=batch_tokens, precision=precision,
                                  backend=backend)
        self.calls, self.seconds = 0, 0.0

    def __repr__(self) -> str:
        return f"CrossJudge({self.model!r})"

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-empty text.")
        start = time.perf_counter()
        out = self.cross.scores(query, list(passages))
        self.calls += len(passages)
        self.seconds += time.perf_counter() - start
        return out

"""A cross-encoder that starts as its bi-encoder.

A cross-encoder made from a bi-encoder's weights plus a new scoring head (monoBERT) starts
knowing nothing of relevance and, in the half hour of two CPU cores a reranker is trained here,
does not learn as much as the bi-encoder already knew. So this one keeps the bi-encoder's own judgement as its starting point: the
query and the passage are read in one sequence, each segment tokenized and positioned as the
bi-encoder reads it alone, each pooled as the bi-encoder pools, and the score is the scaled
cosine of the two pooled vectors. Attention between the segments carries a learned bias
(``gate``, a logit added to every query-passage pair of tokens): at minus infinity the model
is the bi-encoder exactly; it starts slightly open (:data:`GATE_START`), so the query's tokens
read the passage's and back, as a cross-encoder's do, and training sets how far. (PreTTR, MacAvaney et al. 2020, splits a cross-encoder into separate
lower layers and joint upper ones; here every layer is joint and the split is learned.)

Everything here needs torch; the module that holds the gate is made by :func:`gated_pairs`.
"""

from __future__ import annotations

import numpy as np
from salience.extras import torch

__all__ = ["GATE_START", "SCALE_START", "GATE_LEARNING_RATE", "pair_batch", "gated_pairs"]

# untrained, on SciFact's dev split, -6 / -4 / -2 score 0.004 / 0.010 / 0.022 nDCG@10 below the shut gate;
# -4 still lets the gate learn (its gradient shrinks as exp(gate))
GATE_START = -4.0
SCALE_START = 20.0  # sentence-transformers' MultipleNegativesRankingLoss scale, as MiniLM was trained
GATE_LEARNING_RATE = 1e-2  # the gate and scale are two numbers: at the encoder's rate they would not move
_PADDING_BIAS = -1e4  # large enough to drown a token, small enough for bfloat16


def pair_batch(tokenizer, queries: list[str], passages: list[str], max_length: int):
    """Token ids, position ids and segments (1: query, 2: passage, 0: padding) of
    ``[query][passage]`` sequences: each segment tokenized as the bi-encoder tokenizes a text
    alone (its own special tokens, positions from 0) and cut to ``max_length`` tokens."""
    query_ids = tokenizer(queries, truncation=True, max_length=max_length)["input_ids"]
    passage_ids = tokenizer(passages, truncation=True, max_length=max_length)["input_ids"]
    width = max(len(q) + len(p) for q, p in zip(query_ids, passage_ids))
    ids = np.full((len(queries), width), tokenizer.pad_token_id or 0, dtype=np.int64)
    positions = np.zeros((len(queries), width), dtype=np.int64)
    segments = np.zeros((len(queries), width), dtype=np.int64)
    for row, (q, p) in enumerate(zip(query_ids, passage_ids)):
        ids[row, : len(q)], ids[row, len(q) : len(q) + len(p)] = q, p
        positions[row, : len(q)], positions[row, len(q) : len(q) + len(p)] = np.arange(len(q)), np.arange(len(p))
        segments[row, : len(q)], segments[row, len(q) : len(q) + len(p)] = 1, 2
    return torch.from_numpy(ids), torch.from_numpy(positions), torch.from_numpy(segments)


def gated_pairs(encoder, *, gate: float = GATE_START, scale: float = SCALE_START, pooling: str = "mean"):
    """A torch module over ``encoder`` (a transformers encoder model) whose forward takes
    :func:`pair_batch`'s three tensors and returns one score per pair; ``pooling``: ``mean`` or
    ``cls`` (each segment's first token), as the bi-encoder pools."""

    class GatedPairs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.gate = torch.nn.Parameter(torch.tensor(float(gate)))
            self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
            self.pooling = pooling

        def forward(self, ids, positions, segments):
            same = segments.unsqueeze(2) == segments.unsqueeze(1)
            real = (segments > 0).unsqueeze(1)
            zero = torch.zeros((), dtype=self.gate.dtype)
            bias = torch.where(same & real, zero, torch.where(real, self.gate, torch.tensor(_PADDING_BIAS)))
            hidden = self.encoder(input_ids=ids, position_ids=positions,
                                  attention_mask=bias.unsqueeze(1)).last_hidden_state.float()
            query, passage = self._pooled(hidden, segments, 1), self._pooled(hidden, segments, 2)
            return self.scale * (query * passage).sum(-1)

        def _pooled(self, hidden, segments, segment: int):
            inside = segments == segment
            if self.pooling == "cls":
                pooled = hidden[torch.arange(len(hidden)), inside.int().argmax(1)]
            else:
                weights = inside.unsqueeze(-1).float()
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(pooled, dim=-1)

    return GatedPairs()

"""Embedding-based keyphrase scoring and SemRe-Rank.

* ``embed`` (KeyBERT-like; Grootendorst, 2020): a candidate's score is the cosine similarity of
  its embedding to the document's; the top ``k`` are then picked by maximal marginal relevance
  so that near-synonymous phrases do not crowd the list.
* :func:`semrerank` (Zhang et al., 2018): revise any base method's scores with the *semantic
  importance* of their words: personalised PageRank over a graph that links each candidate
  word to its most similar words (embedding cosine at least ``threshold``), seeded with the
  words of the base method's best candidates. ``score' = base x (1 + mean importance)``, the
  base by rank scaled to [0, 1], over the base method's best ``pool`` candidates.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from salience.core.graph import pagerank_scores
from salience.core.scores import Scores
from salience.core.checks import check_k
from salience.core.select import select_mmr
from salience.exceptions import InvalidParameterError
from salience.models.encoders import encode_normalized, get_encoder

__all__ = ["embed_scores", "embed_select", "semrerank", "semrerank_batch"]


def embed_scores(texts: Sequence[str], candidates: Sequence[Scores], encoder=None) -> list[tuple[Scores, np.ndarray]]:
    """Cosine similarity of each candidate (the ids of ``candidates[i]``) to ``texts[i]``; all
    texts and candidates go to the encoder in one call. Returns (scores, candidate vectors)."""
    encode = get_encoder(encoder)
    phrases = [p for c in candidates for p in c.ids]
    vectors = encode_normalized(encode, list(texts) + phrases) if phrases else np.zeros((len(texts), 0))
    out, offset = [], len(texts)
    for i, cands in enumerate(candidates):
        own = vectors[offset : offset + len(cands)]
        offset += len(cands)
        out.append((Scores(own @ vectors[i] if len(cands) else [], ids=list(cands.ids)), own))
    return out


def embed_select(scores: Scores, vectors: np.ndarray, k: int, diversity: float) -> Scores:
    """The ``k`` best by maximal marginal relevance over candidate similarity (plain top-k of
    the cosine similarities at ``diversity=0``). With diversity the values are each phrase's
    marginal relevance when chosen (:func:`~salience.core.select.select_mmr`), so that they rank
    in the order MMR chose (KeyBERT lists the cosine similarities in that order, out of rank)."""
    if diversity == 0 or len(scores) == 0:
        return scores.top_k(k) if len(scores) else scores
    return select_mmr(scores, vectors @ vectors.T, k=k, diversity=diversity)


def semrerank_batch(bases: Sequence[Scores], *, encoder: str | Callable | None = None, **options) -> list[Scores]:
    """:func:`semrerank` for many base scores, encoding the distinct words of all of them in one call."""
    words = list(dict.fromkeys(w for base in bases for p in base.ids for w in str(p).split()))
    if not words:
        return list(bases)
    table = encode_normalized(get_encoder(encoder), words)
    row = {w: i for i, w in enumerate(words)}

    def lookup(batch: Sequence[str]) -> np.ndarray:
        return table[[row[w] for w in batch]]

    return [semrerank(base, encoder=lookup, **options) for base in bases]


def semrerank(base: Scores, *, encoder: str | Callable | None = None, seeds: int = 5, neighbours: int = 5,
              threshold: float = 0.5, damping: float = 0.85, pool: int | None = 20) -> Scores:
    """Re-rank ``base`` keyphrase scores (ids are phrases; higher is better) with SemRe-Rank.

    ``seeds``: how many of the base method's best candidates lend their words to the
    personalisation; ``neighbours``: edges kept per word (its most similar words with cosine
    >= ``threshold``); ``pool``: only the base method's best ``pool`` candidates are re-ranked
    (the rest follow in their base order; ``None`` re-ranks all). The base enters by rank,
    scaled to [0, 1] (best 1), so that methods with skewed scores (YAKE) are treated alike.

    >>> import numpy as np
    >>> toy = lambda words: np.array([[1.0, 0.0] if w.startswith("s") else [0.0, 1.0] for w in words])
    >>> base = Scores([6.0, 5, 4, 3, 2, 1], ids=["sensor network", "weather", "signal", "rain", "wind", "cloud"])
    >>> semrerank(base, encoder=toy, seeds=1).top_k(3).ids
    ['sensor network', 'signal', 'weather']
    """
    seeds, neighbours = check_k(seeds, "seeds"), check_k(neighbours, "neighbours")
    if not -1.0 <= threshold <= 1.0:
        raise InvalidParameterError(f"threshold must be a cosine in [-1, 1]; got {threshold}.")
    if len(base) == 0:
        return base
    if pool is not None:
        pool = check_k(pool, "pool")
        order = base.order()
        if len(order) > pool:
            top, rest = order[:pool], order[pool:]
            revised = semrerank(base.take(top), encoder=encoder, seeds=seeds, neighbours=neighbours,
                                threshold=threshold, damping=damping, pool=None)
            values = np.empty(len(base))
            values[top] = revised.values
            values[rest] = -np.arange(1, len(rest) + 1, dtype=float)  # below every re-ranked value (>= 0)
            return Scores(values, ids=base.ids)
    phrase_words = [str(p).split() for p in base.ids]
    words = list(dict.fromkeys(w for ws in phrase_words for w in ws))
    index = {w: i for i, w in enumerate(words)}
    E = encode_normalized(get_encoder(encoder), words)
    S = E @ E.T
    np.fill_diagonal(S, -np.inf)
    # keep each word's `neighbours` most similar words above the threshold; undirected
    keep = min(neighbours, len(words) - 1)
    W = np.zeros_like(S)
    if keep > 0:
        top = np.argpartition(-S, keep - 1, axis=1)[:, :keep]
        rows = np.repeat(np.arange(len(words)), keep)
        cols = top.reshape(-1)
        strong = S[rows, cols] >= threshold
        W[rows[strong], cols[strong]] = S[rows[strong], cols[strong]]
        W = np.maximum(W, W.T)
    personalization = np.zeros(len(words))
    for i in base.order()[:seeds]:
        personalization[[index[w] for w in phrase_words[i]]] = 1.0
    importance = pagerank_scores(W, damping, personalization)
    importance = importance / importance.max() if importance.max() > 0 else importance
    n = len(base)
    scaled = (n - base.rank()) / (n - 1) if n > 1 else np.ones(1)
    mean_importance = np.array([importance[[index[w] for w in ws]].mean() for ws in phrase_words])
    return Scores(scaled * (1.0 + mean_importance), ids=base.ids)

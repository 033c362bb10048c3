"""Hybrid retrieval: a lexical and a dense index over the same documents, their rankings
fused by the core's :func:`~salience.core.fusion.fuse`.

* ``method="rrf"``: reciprocal rank fusion (ranks only, nothing to tune);
* ``method="wsum"`` with ``normalize="minmax"`` or ``"zscore"``: the convex combination
  ``(1 - weight) * lexical + weight * dense`` of per-query normalised scores; a document one
  retriever did not return gets nothing from it. :meth:`Hybrid.tune` chooses ``weight`` on
  held-aside queries with relevance judgments.

Each retriever returns its top ``depth`` documents (default 100) before fusion.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from salience.core.checks import check_k
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError

__all__ = ["Hybrid", "HYBRID_METHODS"]

HYBRID_METHODS = ("rrf", "wsum")


class Hybrid:
    """``Hybrid(bm25, dense, method="wsum", normalize="minmax", weight=0.5)``: search both,
    fuse (see the module docstring).

    >>> import numpy as np
    >>> from salience.search import BM25, Dense
    >>> docs = ["red fox", "red dog", "blue whale"]
    >>> toy = lambda texts: np.array([[t.count("red"), t.count("blue"), t.count("fox") + 0.1] for t in texts])
    >>> Hybrid(BM25().index(docs), Dense(encoder=toy, encoder_name="toy").index(docs)).search("red fox", k=2).ids
    ['0', '1']
    """

    def __init__(self, lexical, dense, *, method: str = "wsum", normalize: str | None = "minmax", weight: float = 0.5,
                 depth: int = 100, rrf_k: float = 60):
        if method not in HYBRID_METHODS:
            raise InvalidParameterError(f"method must be one of {', '.join(HYBRID_METHODS)}; got {method!r}.")
        if method == "wsum" and normalize not in ("minmax", "zscore"):
            raise InvalidParameterError(f"the weighted sum needs normalize='minmax' or 'zscore'; got {normalize!r}.")
        if not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
            raise InvalidParameterError(f"weight (of the dense scores) must be in [0, 1]; got {weight!r}.")
        depth = check_k(depth, "depth")
        self.lexical, self.dense = lexical, dense
        self.method, self.normalize, self.weight, self.depth, self.rrf_k = method, normalize, float(weight), depth, rrf_k
        self.tuning_: dict | None = None

    def __repr__(self) -> str:
        return f"Hybrid(method={self.method!r}, normalize={self.normalize!r}, weight={self.weight}, depth={self.depth})"

    def _runs(self, queries: Sequence[str], k: int, where: Mapping | None) -> tuple[list[Scores], list[Scores]]:
        depth = max(k, self.depth)
        return (self.lexical.search_batch(list(queries), k=depth, where=where),
                self.dense.search_batch(list(queries), k=depth, where=where))

    def _fuse(self, lexical: Scores, dense: Scores, k: int, weight: float) -> Scores:
        from salience.core.fusion import fuse

        runs = [{"q": lexical.to_dict()}, {"q": dense.to_dict()}]
        if self.method == "rrf":
            fused = fuse(runs, method="rrf", rrf_k=self.rrf_k, missing_subjects="empty")["q"]
        else:
            fused = fuse(runs, method="wsum", normalize=self.normalize, weights=[1.0 - weight, weight],
                         missing_subjects="empty")["q"]
        return fused.sorted().top_k(k) if len(fused) else fused

    def search(self, query: str, *, k: int = 10, where: Mapping | None = None) -> Scores:
        return self.search_batch([query], k=k, where=where)[0]

    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None) -> list[Scores]:
        if isinstance(queries, str):
            raise InvalidParameterError("queries must be a list of strings; use search() for one query.")
        k = check_k(k, "k")
        lexical, dense = self._runs(queries, k, where)
        return [self._fuse(a, b, k, self.weight) for a, b in zip(lexical, dense)]

    def tune(self, queries: Mapping[str, str], qrels, *, metric: str = "ndcg@10",
             weights: Sequence[float] = tuple(np.round(np.linspace(0, 1, 21), 2))) -> "Hybrid":
        """Choose ``weight`` (the weighted sum's) maximising ``metric`` over ``queries``
        (``{query_id: text}``) judged by ``qrels``: retrieve once, fuse at each weight. Sets
        :attr:`weight` and records every weight's score in :attr:`tuning_`."""
        from salience.core.metrics import evaluate, parse_metric
        from salience.core.run import Run

        if self.method != "wsum":
            raise InvalidParameterError("tune chooses the weighted sum's weight: use method='wsum'.")
        if not queries:
            raise InvalidParameterError("tune needs held-aside queries with judgments.")
        ids, texts = list(queries), list(queries.values())
        cut = parse_metric(metric)[1] or 100
        lexical, dense = self._runs(texts, cut, None)
        scores = {}
        for w in weights:
            run = Run({qid: self._fuse(a, b, cut, float(w)) for qid, a, b in zip(ids, lexical, dense)})
            scores[float(w)] = float(evaluate(qrels, run, metric)[metric])
        self.weight = max(scores, key=lambda w: (scores[w], -abs(w - 0.5)))  # ties: nearer an even mix
        self.tuning_ = {"metric": metric, "scores": scores, "weight": self.weight}
        return self

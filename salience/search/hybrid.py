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

from salience.core.base import Scorer, register
from salience.core.checks import check_k
from salience.core.params import Check, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError

__all__ = ["Hybrid"]


def _is_index(value) -> bool:
    return value is None or (hasattr(value, "search_batch") and hasattr(value, "fit"))


class Hybrid(Scorer):
    """``Hybrid(bm25, dense, method="wsum", normalize="minmax", weight=0.5)``: search both,
    fuse (see the module docstring). ``lexical`` and ``dense`` default to a new ``BM25()`` and
    ``Dense()``; ``fit(documents)`` indexes the documents in both.

    >>> import numpy as np
    >>> from salience.search import BM25, Dense
    >>> docs = ["red fox", "red dog", "blue whale"]
    >>> toy = lambda texts: np.array([[t.count("red"), t.count("blue"), t.count("fox") + 0.1] for t in texts])
    >>> Hybrid(BM25().index(docs), Dense(encoder=toy, encoder_name="toy").index(docs)).search("red fox", k=2).ids
    ['0', '1']
    """

    _parameter_constraints = {"lexical": [Check(_is_index, "an index (BM25) or None")],
                              "dense": [Check(_is_index, "an index (Dense) or None")],
                              "method": [Options(("rrf", "wsum"))], "normalize": [None, Options(("minmax", "zscore"))],
                              "weight": [Interval("real", 0, 1)], "depth": [Interval("int", 1)],
                              "rrf_k": [Interval("real", 0)]}

    def __init__(self, lexical=None, dense=None, *, method: str = "wsum", normalize: str | None = "minmax",
                 weight: float = 0.5, depth: int = 100, rrf_k: float = 60):
        from salience.search.bm25 import BM25
        from salience.search.dense import Dense

        self.lexical = BM25() if lexical is None else lexical
        self.dense = Dense() if dense is None else dense
        self.method, self.normalize, self.weight, self.depth, self.rrf_k = method, normalize, weight, depth, rrf_k
        self._validate_params()
        if method == "wsum" and normalize is None:
            raise InvalidParameterError("the weighted sum needs normalize='minmax' or 'zscore'; got None.")
        self.weight = float(weight)
        self.tuning_: dict | None = None

    def clone(self) -> "Hybrid":
        """A new, unfitted hybrid: unfitted copies of both indexes, the same parameters."""
        return type(self)(**{**self.get_params(), "lexical": self.lexical.clone(), "dense": self.dense.clone()})

    def fit(self, documents, **options) -> "Hybrid":
        """Index ``documents`` in both indexes (``options`` as for :meth:`BM25.fit`)."""
        if hasattr(documents, "__next__"):  # an iterator is read once, for both indexes
            documents = list(documents)
        self.lexical.fit(documents, **options)
        self.dense.fit(documents, **options)
        return self

    #: the indexing verb of search engines; the same as :meth:`fit`
    index = fit

    def __repr__(self) -> str:
        return f"Hybrid(method={self.method!r}, normalize={self.normalize!r}, weight={self.weight}, depth={self.depth})"

    def _runs(self, queries: Sequence[str], k: int, where: Mapping | None,
              n_jobs: int = 1) -> tuple[list[Scores], list[Scores]]:
        depth = max(k, self.depth)
        return (self.lexical.search_batch(list(queries), k=depth, where=where, n_jobs=n_jobs),
                self.dense.search_batch(list(queries), k=depth, where=where, n_jobs=n_jobs))

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

    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                     n_jobs: int = 1) -> list[Scores]:
        """:meth:`search` for many queries; ``n_jobs`` goes to both indexes' batch search."""
        if isinstance(queries, str):
            raise InvalidParameterError("queries must be a list of strings; use search() for one query.")
        k = check_k(k, "k")
        lexical, dense = self._runs(queries, k, where, n_jobs)
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


register("search", "hybrid", Hybrid, "BM25 and dense retrieval fused: reciprocal rank fusion or a weighted sum of "
                                     "normalised scores (the weight tunable on judged queries)")

"""Hybrid retrieval: a lexical and a dense index over the same documents, their rankings
fused by any method of the core's ``fusion`` family (:mod:`salience.core.fusion`), the
lexical run weighted ``1 - weight`` and the dense run ``weight`` (``"auto"``, the default:
:data:`STATIC_WEIGHT` when the dense side's encoder is a static one, ``search distill``'s, and
:data:`TRANSFORMER_WEIGHT` otherwise; both chosen on the dev splits of the shared sets):

* ``fusion="wsum"`` (the default) with ``normalize="minmax"`` or ``"zscore"``: the convex
  combination ``(1 - weight) * lexical + weight * dense`` of per-query normalised scores; a
  document one retriever did not return gets nothing from it;
* ``fusion="rrf"``: reciprocal rank fusion, each run's ``1 / (60 + rank)`` weighted (at
  ``weight=0.5`` half of the unweighted sum, the same order);
* any other registered fusion name (``combmnz``, ``borda``, ...), or a
  :class:`~salience.core.fusion.Fuser` built with its own parameters (``create("fusion",
  "rrf", rrf_k=10)``), the runs' weights and ``missing_subjects="empty"`` set on a copy.

``normalize`` goes to a fusion method that takes it (the score-based ones) named by string.
:meth:`Hybrid.tune` chooses ``weight`` on held-aside queries with relevance judgments. Each
retriever returns its top ``depth`` documents (default 100) before fusion.
"""

from __future__ import annotations

import inspect
from typing import Mapping, Sequence

import numpy as np

from salience.core.base import Scorer, register
from salience.core.checks import check_k
from salience.core.fusion import FUSION_NORMS
from salience.core.params import Check, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.search.topk import rank_rows

__all__ = ["Hybrid", "hybrid_options", "FUSION_ALIASES"]


def _is_index(value) -> bool:
    return value is None or (hasattr(value, "search_batch") and hasattr(value, "fit"))


def _is_fusion(value) -> bool:
    from salience.core.fusion import Fuser

    return isinstance(value, (str, Fuser))


#: the dense run's weight by default with a transformer encoder (all-MiniLM-L6-v2's dev choices
#: were 0.45, 0.6 and 0.55 on the three shared sets) and with a static one (the pooled dev choice
#: for plain and corpus-fitted static encoders: a static dense side at 0.5 fell below BM25)
TRANSFORMER_WEIGHT, STATIC_WEIGHT = 0.5, 0.2


def _is_static(dense) -> bool:
    """Whether a dense index encodes with a static encoder (a table of token vectors)."""
    from salience.models.static import StaticEncoder, is_static_folder

    encoder = getattr(dense, "encoder", None)
    return is_static_folder(encoder) if isinstance(encoder, str) else isinstance(encoder, StaticEncoder)


#: the CLI's and the service's short names for a weighted sum of normalised scores
FUSION_ALIASES = {"minmax": {"fusion": "wsum", "normalize": "minmax"},
                  "zscore": {"fusion": "wsum", "normalize": "zscore"}}


def hybrid_options(fusion: str) -> dict:
    """``Hybrid``'s ``fusion`` (and ``normalize``) for a name the CLI or the service was given:
    a registered fusion method, or ``minmax`` / ``zscore`` (the weighted sum of scores so
    normalised)."""
    return dict(FUSION_ALIASES.get(fusion, {"fusion": fusion}))


class Hybrid(Scorer):
    """``Hybrid(bm25, dense, fusion="wsum", normalize="minmax", weight=0.5)``: search both,
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
                              "fusion": [Check(_is_fusion, "a fusion method's name or a Fuser")],
                              "normalize": [None, Options(FUSION_NORMS)],
                              "weight": [Options(("auto",)), Interval("real", 0, 1)], "depth": [Interval("int", 1)]}

    def __init__(self, lexical=None, dense=None, *, fusion="wsum", normalize: str | None = "minmax",
                 weight: float | str = "auto", depth: int = 100):
        from salience.search.bm25 import BM25
        from salience.search.dense import Dense

        self.lexical, self.dense = lexical, dense
        # the indexes searched: those given, or new ones (get_params keeps what was given)
        self.lexical_ = BM25() if lexical is None else lexical
        self.dense_ = Dense() if dense is None else dense
        self.fusion, self.normalize, self.weight, self.depth = fusion, normalize, weight, depth
        self._validate_params()
        self._fuser(0.5)  # the fusion method and its parameters, checked now
        self.weight = weight if weight == "auto" else float(weight)
        self.tuning_: dict | None = None

    @property
    def weight_(self) -> float:
        """The dense run's weight in use: :attr:`weight`, or with ``"auto"`` the default for the
        dense side's kind of encoder."""
        if self.weight != "auto":
            return self.weight
        return STATIC_WEIGHT if _is_static(self.dense_) else TRANSFORMER_WEIGHT

    def _fuser(self, weight: float):
        """The fusion method, the lexical run weighted ``1 - weight`` and the dense ``weight``."""
        from salience.core.base import create, method_factory
        from salience.core.fusion import Fuser

        runs = {"weights": [1.0 - weight, weight], "missing_subjects": "empty"}
        if isinstance(self.fusion, Fuser):
            return self.fusion.clone().set_params(**runs)
        takes_normalize = "normalize" in inspect.signature(method_factory("fusion", self.fusion)).parameters
        return create("fusion", self.fusion, **runs, **({"normalize": self.normalize} if takes_normalize else {}))

    def clone(self) -> "Hybrid":
        """A new, unfitted hybrid: unfitted copies of both indexes, the same parameters."""
        return type(self)(**{**self.get_params(), "lexical": None if self.lexical is None else self.lexical.clone(),
                             "dense": None if self.dense is None else self.dense.clone()})

    def fit(self, documents, **options) -> "Hybrid":
        """Index ``documents`` in both indexes (``options`` as for :meth:`BM25.fit`)."""
        if hasattr(documents, "__next__"):  # an iterator is read once, for both indexes
            documents = list(documents)
        self.lexical_.fit(documents, **options)
        self.dense_.fit(documents, **options)
        return self

    #: the indexing verb of search engines; the same as :meth:`fit`
    index = fit

    def __repr__(self) -> str:
        weight = f"'auto' ({self.weight_})" if self.weight == "auto" else self.weight
        return f"Hybrid(fusion={self.fusion!r}, normalize={self.normalize!r}, weight={weight}, depth={self.depth})"

    def _runs(self, queries: Sequence[str], k: int, where: Mapping | None,
              n_jobs: int = 1) -> tuple[list[Scores], list[Scores]]:
        from salience.parallel.threads import beside

        depth = max(k, self.depth)
        # both sides at once: the lexical kernel and the dense products release the interpreter
        # lock, so the hybrid answers near the speed of its slower side
        lexical = beside(self.lexical_.search_batch, list(queries), k=depth, where=where, n_jobs=n_jobs)
        dense = self.dense_.search_batch(list(queries), k=depth, where=where, n_jobs=n_jobs)
        return lexical.result(), dense

    def _fuse(self, lexical: Scores, dense: Scores, k: int, fuser, slots: np.ndarray | None = None) -> Scores:
        fast = _fuse_by_position(self.lexical_, lexical, dense, k, fuser, slots)
        if fast is not None:
            return fast
        fused = fuser.score([lexical, dense])  # one query's two rankings, no run built around them
        return fused.sorted().top_k(k) if len(fused) else fused

    def search(self, query: str, *, k: int = 10, where: Mapping | None = None) -> Scores:
        return self.search_batch([query], k=k, where=where)[0]

    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                     n_jobs: int = 1) -> list[Scores]:
        """:meth:`search` for many queries; ``n_jobs`` goes to both indexes' batch search."""
        if isinstance(queries, str):
            raise InvalidParameterError("queries must be a list of strings; use search() for one query.")
        k = check_k(k, "k")
        fuser = self._fuser(self.weight_)
        slots = self._position_slots()
        if n_jobs == 1 and _fuses_by_position(fuser):
            fused = self._fuse_rows(list(queries), k, where, fuser, slots)
            if fused is not None:
                return fused
        lexical, dense = self._runs(queries, k, where, n_jobs)
        return [self._fuse(a, b, k, fuser, slots) for a, b in zip(lexical, dense)]

    def _fuse_rows(self, queries: list[str], k: int, where: Mapping | None, fuser, slots) -> list[Scores] | None:
        """Both sides searched as rows of index positions (``top_rows``) and fused there, the
        documents named only for the fused top ``k``: the fast path, the same results as fusing
        the sides' rankings. None where a side has no rows (an approximate dense index, an
        index of another kind) or the indexes do not hold the same documents."""
        if not hasattr(self.lexical_, "top_rows") or not _has_exact_rows(self.dense_):
            return None
        to_lexical = self._dense_to_lexical()
        if to_lexical is None:
            return None
        reduce_code = _compiled_reduction(fuser, slots)
        ordered = reduce_code is None  # the compiled fusion takes each side's top k in any order: two sorts less
        lexical, dense = self._both_rows(queries, max(k, self.depth), where, ordered)
        if dense is None:  # no queries
            return None
        lexical_ids, dense_ids = self.lexical_._ids, self.dense_._ids
        name_of = getattr(self.lexical_, "_id_array", None)
        name_of = np.asarray(lexical_ids, dtype=object) if name_of is None else name_of
        second = to_lexical[dense[0]]
        # a query whose dense ranking holds a document the lexical index lacks: fused by id
        by_id = set(np.flatnonzero(((second < 0) & (np.arange(second.shape[1]) < dense[2][:, None])).any(axis=1)).tolist())
        rows = None if ordered else _compiled_fusion(lexical, second, dense, by_id, k, fuser, slots, reduce_code)
        out: list = [None] * len(queries)
        if rows is not None:  # the compiled rows, every query's documents named at once
            out = Scores.unchecked_rows(rows[1], name_of[rows[0]].tolist(), rows[2].tolist())
        pending = range(len(queries)) if rows is None else sorted(by_id)
        if pending and not ordered:  # these fuse from rankings: the rows ranked after all
            lexical, dense = rank_rows(*lexical), rank_rows(*dense)
            second = to_lexical[dense[0]]
        for q in pending:
            first, first_values = lexical[0][q, :lexical[2][q]], lexical[1][q, :lexical[2][q]]
            dense_positions, second_values = dense[0][q, :dense[2][q]], dense[1][q, :dense[2][q]]
            if q in by_id:
                out[q] = self._fuse(Scores.unchecked(first_values, [lexical_ids[p] for p in first.tolist()]),
                                    Scores.unchecked(second_values.astype(np.float64),
                                                     [dense_ids[p] for p in dense_positions.tolist()]),
                                    k, fuser, slots)
            else:  # fused with numpy (no numba, or a normalisation the kernel does not compute)
                positions, values = _fuse_positions(first, first_values, second[q, :dense[2][q]],
                                                    second_values.astype(np.float64), k, fuser, slots)
                out[q] = Scores.unchecked(values, name_of[positions].tolist())
        return out

    def _both_rows(self, queries: list[str], depth: int, where: Mapping | None, ordered: bool) -> tuple:
        """Both sides' ``top_rows`` on two threads. This one encodes the dense side's queries
        while the other searches the lexical side; then both compute the dense products and
        take their top k (:meth:`Dense.top_rows` with a ``share``). BLAS runs on one thread
        meanwhile: its idle helper threads would spin on the core the other thread needs."""
        from salience.parallel.threads import SharedChunks, beside, on_pool_thread, one_blas_thread

        if on_pool_thread():  # called from work run beside another: one thread, no helper
            return (self.lexical_.top_rows(queries, k=depth, where=where, ordered=ordered),
                    self.dense_.top_rows(queries, k=depth, where=where, ordered=ordered))
        helper = SharedChunks(_SHARED_ROWS)

        def lexical_then_help() -> tuple:
            try:
                return self.lexical_.top_rows(queries, k=depth, where=where, ordered=ordered)
            finally:
                helper.serve()

        with one_blas_thread():
            lexical = beside(lexical_then_help)
            try:
                dense = self.dense_.top_rows(queries, k=depth, where=where, ordered=ordered, share=helper.share)
            finally:
                helper.close()
            return lexical.result(), dense

    def _dense_to_lexical(self) -> np.ndarray | None:
        """Each dense position's position in the lexical index (-1 where it lacks the
        document), cached until either index's documents change; None for an index without
        positions."""
        lexical, dense = self.lexical_, self.dense_
        positions = getattr(lexical, "_pos", None)
        ids = getattr(dense, "_ids", None)
        if positions is None or ids is None:
            return None
        cached = getattr(self, "_dense_to_lexical_cache", None)
        if (cached is None or cached[0] is not lexical._ids or cached[1] != len(lexical._ids) or cached[2] is not ids
                or cached[3] != len(ids)):
            mapping = np.fromiter(map(lambda i: positions.get(i, -1), ids), dtype=np.int64, count=len(ids))
            cached = (lexical._ids, len(lexical._ids), ids, len(ids), mapping)
            self._dense_to_lexical_cache = cached
        return cached[4]

    def _position_slots(self) -> np.ndarray | None:
        """-1 at every position of the lexical index (what fusing by position looks places up
        in), or None for an index without positions."""
        positions = getattr(self.lexical_, "position_count", None)
        return None if positions is None else np.full(positions(), -1, dtype=np.int64)

    def tune(self, queries: Mapping[str, str], qrels, *, metric: str = "ndcg@10",
             weights: Sequence[float] = tuple(np.round(np.linspace(0, 1, 21), 2))) -> "Hybrid":
        """Choose ``weight`` (the dense run's, in any fusion) maximising ``metric`` over
        ``queries`` (``{query_id: text}``) judged by ``qrels``: retrieve once, fuse at each
        weight. Sets :attr:`weight` and records every weight's score in :attr:`tuning_`."""
        from salience.core.metrics import evaluate, parse_metric
        from salience.core.run import Run

        if not queries:
            raise InvalidParameterError("tune needs held-aside queries with judgments.")
        ids, texts = list(queries), list(queries.values())
        cut = parse_metric(metric)[1] or 100
        lexical, dense = self._runs(texts, cut, None)
        scores = {}
        for w in weights:
            fuser = self._fuser(float(w))
            run = Run({qid: self._fuse(a, b, cut, fuser) for qid, a, b in zip(ids, lexical, dense)})
            scores[float(w)] = float(evaluate(qrels, run, metric)[metric])
        self.weight = max(scores, key=lambda w: (scores[w], -abs(w - 0.5)))  # ties: nearer an even mix
        self.tuning_ = {"metric": metric, "scores": scores, "weight": self.weight}
        return self


#: rows of a dense product whose top k a thread takes at a time when both work on it (a
#: hybrid's batch): small enough to share the work evenly
_SHARED_ROWS = 16


def _has_exact_rows(dense) -> bool:
    """Whether ``dense`` gives rows of exact top k, shared between threads (a :class:`Dense`
    index without an approximate structure)."""
    from salience.search.dense import Dense

    return isinstance(dense, Dense) and dense.approximate is None


#: the normalisations fusing by position computes on score arrays (``rank`` needs ranks, and
#: ``borda`` every candidate: those fuse the general way)
_POSITION_NORMS = (None, "minmax", "zscore", "sum", "max")


def _fuses_by_position(fuser) -> bool:
    from salience.core.fusion import _ScoreFusion

    return isinstance(fuser, _ScoreFusion) and fuser.normalize in _POSITION_NORMS


def _fuse_positions(first: np.ndarray, first_values: np.ndarray, second: np.ndarray, second_values: np.ndarray,
                    k: int, fuser, slots: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, values)`` of the fused top ``k`` of two rankings given as index positions
    and scores in rank order (``fuser`` a score fusion, see :func:`_fuses_by_position`): the
    candidates (the first ranking, then the documents of the second it lacks), the normalised
    runs and the same additions in the same order as ``fuser.score``, so the same values and
    ties. ``slots``: -1 at every position (a table reused across a batch's queries, left as it
    was), or None."""
    from salience.core.fusion import _check_weights
    from salience.core.scores import normalized_values, rank_order

    # where each second document stands among the candidates: its place in the first ranking
    # (looked up in a table over the index's positions, left empty again), or after it, in
    # second-ranking order, when the first lacks it
    highest = int(max(first.max(initial=-1), second.max(initial=-1)))
    # (a table made before the index grew is too short: a fresh one then)
    place_of = slots if slots is not None and highest < len(slots) else np.full(highest + 1, -1)
    place_of[first] = np.arange(len(first))
    places = [np.arange(len(first)), place_of[second]]
    place_of[first] = -1
    fresh = np.flatnonzero(places[1] < 0)
    n = len(first) + len(fresh)
    places[1][fresh] = len(first) + np.arange(len(fresh))
    runs = [values if fuser.normalize is None or not len(values) else normalized_values(values, fuser.normalize)
            for values in (first_values, second_values)]
    fused = fuser.fused_values(runs, _check_weights(fuser.weights, 2), places, n)
    order = rank_order(fused)[:k]
    return np.concatenate([first, second[fresh]])[order], fused[order]


def _compiled_reduction(fuser, slots: np.ndarray | None) -> int | None:
    """The compiled kernel's code for ``fuser``'s reduction
    (:mod:`salience.search._fusion_numba_kernels`), or None where the kernel does not apply:
    no numba, a fusion or normalisation it does not compute, an index without positions."""
    from salience.core.fusion import CombMAX, CombMIN, CombMNZ, CombSUM

    reduce_code = {CombSUM.reduce: 0, CombMNZ.reduce: 1, CombMAX.reduce: 2, CombMIN.reduce: 3}.get(
        getattr(type(fuser), "reduce", None))
    try:
        from salience.search._fusion_numba_kernels import NORMALIZATIONS
    except ImportError:
        return None
    if reduce_code is None or getattr(fuser, "normalize", "") not in NORMALIZATIONS or slots is None:
        return None
    return reduce_code


def _compiled_fusion(lexical: tuple, second: np.ndarray, dense: tuple, skip: set, k: int, fuser,
                     slots: np.ndarray, reduce_code: int) -> tuple | None:
    """Every query's fused top ``k`` as rows ``(positions, values, counts)`` from the compiled
    kernels (the sides' rows in any order), the queries of ``skip`` left empty; None where the
    index grew past ``slots``."""
    from salience.core.fusion import _check_weights
    from salience.search._fusion_numba_kernels import NORMALIZATIONS, fused_candidates, write_fused

    highest = max(int(lexical[0].max(initial=-1)), int(second.max(initial=-1)))
    if highest >= len(slots):  # the index grew past the table
        return None
    first_count, second_count = lexical[2].copy(), dense[2].copy()
    first_count[list(skip)] = 0
    second_count[list(skip)] = 0
    weights = _check_weights(fuser.weights, 2)
    n_queries = len(first_count)
    size = lexical[0].shape[1] + second.shape[1]
    keys, candidates = np.empty((n_queries, size)), np.empty((n_queries, size), dtype=np.int64)
    ranked_by, counts = np.empty((n_queries, size)), np.zeros(n_queries, dtype=np.int64)
    fused_candidates(lexical[0], np.asarray(lexical[1], dtype=np.float64), first_count, second,
                     np.asarray(dense[1], dtype=np.float64), second_count, float(weights[0]), float(weights[1]),
                     NORMALIZATIONS.index(fuser.normalize), reduce_code, slots, keys, candidates, ranked_by, counts)
    order = np.argsort(keys, axis=1)  # numpy's vectorised sort; the kernel orders ties
    width = min(k, size)
    out = (np.zeros((n_queries, width), dtype=np.int64), np.zeros((n_queries, width)), np.zeros(n_queries, dtype=np.int64))
    write_fused(order, keys, candidates, ranked_by, counts, first_count, k, *out)
    return out


def _fuse_by_position(index, lexical: Scores, dense: Scores, k: int, fuser,
                      slots: np.ndarray | None = None) -> Scores | None:
    """What ``fuser.score([lexical, dense]).top_k(k)`` gives, computed on the documents'
    positions in ``index`` rather than on their id strings (:func:`_fuse_positions`). ``None``
    where it does not apply (another fusion or normalisation, an index without positions, an
    id it does not hold): the caller fuses the general way."""
    codes_of = getattr(index, "position_codes", None)
    if codes_of is None or not _fuses_by_position(fuser):
        return None
    ranked = [lexical.sorted(), dense.sorted()]
    codes = [codes_of(r.ids) for r in ranked]
    if codes[0] is None or codes[1] is None:
        return None
    if not len(codes[0]) and not len(codes[1]):
        return Scores([], ids=[])
    positions, values = _fuse_positions(codes[0], ranked[0].values, codes[1], ranked[1].values, k, fuser, slots)
    id_of = dict(zip(codes[0].tolist(), ranked[0].ids))
    id_of.update(zip(codes[1].tolist(), ranked[1].ids))
    return Scores.unchecked(values, list(map(id_of.__getitem__, positions.tolist())))


register("search", "hybrid", Hybrid, "BM25 and dense retrieval fused by any fusion method: a weighted sum of "
                                     "normalised scores, reciprocal rank fusion, ... (the weight tunable on judged "
                                     "queries)")

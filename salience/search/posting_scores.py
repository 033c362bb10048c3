"""The scores a BM25 index answers from: its postings (term frequencies in memory, or packed
and memory-mapped as saved), the collection statistics (its own, or a sharded collection's),
and each posting's score under them, precomputed in memory or computed for a query's terms.

:class:`PostingScores` is :class:`~salience.search.BM25`'s base for that state; the engine
(indexing, search API, persistence) is in :mod:`salience.search.bm25`."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from salience.exceptions import InvalidParameterError
from salience.core import bm25_formulas as scoring
from salience.search.packed import PackedPostings

__all__ = ["PostingScores"]


class PostingScores:
    """Postings, statistics and per-posting scores (see the module docstring); the subclass
    sets ``_tf_matrix``, ``_packed``, ``_scores_matrix``, ``_doc_len``, ``_live``, ``_ids``,
    ``_encoder``, ``_shared_stats`` and the scoring parameters."""

    @property
    def _tf(self) -> sp.csr_matrix | None:
        if self._packed is not None:
            self._unpack()
        return self._tf_matrix

    @_tf.setter
    def _tf(self, matrix: sp.csr_matrix | None) -> None:
        self._tf_matrix, self._packed = matrix, None

    @property
    def _scores(self) -> sp.csr_matrix:
        if self._packed is not None:
            self._unpack()
        return self._scores_matrix

    def _use_packed(self, packed: PackedPostings) -> None:
        """Search the saved postings as they are (one segment, every document live)."""
        self._tf_matrix, self._scores_matrix = None, None
        self._statistics(packed.counts, len(self._ids))
        self._id_array = np.array(self._ids, dtype=object)
        self._columns, self._last_scores = None, None
        self._packed = packed

    def _unpack(self) -> None:
        """The packed postings in memory, for a change or whole-matrix use. The packed ones
        stay in use until the matrices are complete (a reader in another thread sees either)."""
        packed = self._packed
        docs, tf = packed.unpack()
        index_dtype = np.int32 if len(self._ids) < 2**31 else np.int64
        self._tf_matrix = sp.csr_matrix((tf, docs.astype(index_dtype), np.asarray(packed.indptr)),
                                        shape=(packed.n_terms, len(self._ids)), copy=False)
        self._rescore()
        self._packed = None

    def _length_norms(self) -> np.ndarray:
        """Each document's :func:`~salience.core.bm25_formulas.length_norm` (float64), what the
        packed kernels score its postings with; cached until the lengths, the average or the
        scoring parameters change (a reader in another thread sees either array, both valid)."""
        code = scoring.VARIANTS.index(self.variant)
        key = (self._doc_len, float(self._avg_len), float(self.b), code == 5)
        cached = getattr(self, "_norms_cache", None)
        if cached is None or cached[0][0] is not key[0] or cached[0][1:] != key[1:]:
            norms = scoring.length_norm(self._doc_len.astype(np.float64), float(self._avg_len), code, float(self.b))
            cached = (key, norms)
            self._norms_cache = cached
        return cached[1]

    def __getstate__(self) -> dict:
        # the score cache is memory for speed, refilled on use: never pickled (nor its lock)
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    #: the part of ``score_cache_mb`` this index may use: a sharded index holding its shards in
    #: one process gives each its part of the one budget
    score_cache_share = 1.0

    def _score_cache(self):
        """The :class:`~salience.search.score_cache.ScoreCache` of the packed postings under the
        current statistics (a new one when they changed), or None with ``score_cache_mb=0``."""
        from salience.search.score_cache import ScoreCache

        budget = int(self.score_cache_mb * self.score_cache_share * 2**20)
        if budget <= 0 or self._packed is None:
            return None
        norms = self._length_norms()
        cache = getattr(self, "_cache", None)
        if cache is None or not cache.serves(self._packed, norms, self._idf, self.variant, self.k1, self.delta, budget):
            cache = ScoreCache(self._packed, norms, self._idf, self.variant, self.k1, self.delta, budget)
            self._cache = cache
        return cache

    def collection_statistics(self) -> tuple[list[str], np.ndarray, int, float]:
        """(terms, each term's live document frequency, live documents, their total length):
        what a sharded index sums over its shards for global statistics."""
        self._require_index()
        return (list(self._encoder.terms), self._df.copy(), self._n_live,
                float(self._doc_len[self._live].sum(dtype=np.float64)))

    def use_collection_statistics(self, df: np.ndarray | None, n_docs: int = 0, total_length: float = 0.0, *,
                                  nonoccurrence: bool = True) -> "PostingScores":
        """Score with a whole collection's statistics instead of this index's own: ``df`` per
        term of this index's vocabulary, the collection's live documents and total length
        (a shard of :class:`~salience.search.shards.ShardedIndex` scores as one index of all
        shards would). ``nonoccurrence=False`` leaves BM25L / BM25+'s per-query constant to
        the caller (a shard lacks the terms other shards hold). ``None`` restores its own."""
        self._require_index()
        if df is None:
            self._shared_stats = None
        else:
            df = np.asarray(df, dtype=np.int64)
            if df.shape != (len(self._encoder.terms),):
                raise InvalidParameterError(f"df has {df.shape} entries for a vocabulary of {len(self._encoder.terms)} terms.")
            self._shared_stats = (df, int(n_docs), float(total_length), bool(nonoccurrence))
        self._refresh()
        return self

    def _refresh(self) -> None:
        """Recompute collection statistics and per-posting scores over live documents."""
        if self._packed is not None and self._live.all():
            # packed postings are scored per query: new statistics (a shard's) are all there is to set
            self._statistics(self._packed.counts, len(self._ids))
            self._last_scores = None
        elif self._packed is not None:
            self._unpack()  # which rescores
        else:
            self._rescore()

    def _rescore(self) -> None:
        tf = self._tf_matrix
        n_terms = tf.shape[0]
        live = self._live
        indptr, indices, data = tf.indptr, tf.indices, tf.data
        if not live.all():
            keep = live[indices]
            row_of = np.repeat(np.arange(n_terms), np.diff(indptr))[keep]
            indices, data = indices[keep], data[keep]
            indptr = np.zeros(n_terms + 1, dtype=tf.indptr.dtype)
            np.cumsum(np.bincount(row_of, minlength=n_terms), out=indptr[1:])
        df = np.diff(indptr)
        self._statistics(df, int(live.sum()))
        row_of = np.repeat(np.arange(n_terms), df)
        values = scoring.posting_scores(data, self._doc_len[indices], self._idf[row_of], self._avg_len,
                                        self.variant, self.k1, self.b, self.delta)
        self._install_scores(values, indices, indptr)

    def _statistics(self, df: np.ndarray, n_live: int) -> None:
        """Collection statistics (own or shared): idf, average length, non-occurrence credit."""
        self._n_live = n_live
        self._df = df
        shared = self._shared_stats
        if shared is None:
            idf_df, idf_n = df, n_live
            self._avg_len = float(self._doc_len[self._live].mean()) if n_live else 1.0
        else:
            idf_df, idf_n = shared[0], shared[1]
            self._avg_len = shared[2] / shared[1] if shared[1] else 1.0
        if self._avg_len <= 0:
            self._avg_len = 1.0  # every live document is empty: no posting to score
        self._idf = scoring.idf(idf_df, idf_n, self.variant)
        self._base = scoring.nonoccurrence_component(self.variant, self.k1, self.delta)
        self._nonocc = self._idf * self._base if shared is None or shared[3] else np.zeros(len(df))

    def _install_scores(self, values: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> None:
        self._scores_matrix = sp.csr_matrix((values, indices, indptr), shape=self._tf_matrix.shape, copy=False)
        self._columns = None
        self._id_array = np.array(self._ids, dtype=object)
        self._last_scores: tuple[str, np.ndarray] | None = None  # score() reuses one query's vector

    def _adopt_stored_scores(self, values: np.ndarray) -> None:
        """Per-posting scores saved with the index (a bulk build of format 2), valid for one segment of
        live documents scored with this index's own statistics: loaded memory-mapped instead of
        computed, so a collection larger than memory opens at once."""
        tf = self._tf
        self._statistics(np.diff(tf.indptr), tf.shape[1])
        self._install_scores(values, tf.indices, tf.indptr)

    def _query_scores(self, encoded: list[list[int]]) -> tuple[sp.csr_matrix, list[list[int]]]:
        """(per-posting scores, the queries' terms as its rows): the whole matrix, or for
        packed postings the rows of the queries' terms alone, scored now."""
        if self._packed is None:
            return self._scores_matrix, encoded
        terms = np.unique(np.fromiter((t for q in encoded for t in q), dtype=np.int64))
        indptr, docs, tf = self._packed.rows(terms)
        rows = np.repeat(np.arange(len(terms)), np.diff(indptr))
        values = scoring.posting_scores(tf, self._doc_len[docs], self._idf[terms][rows], self._avg_len, self.variant,
                                        self.k1, self.b, self.delta)
        matrix = sp.csr_matrix((values, docs, indptr), shape=(len(terms), len(self._ids)), copy=False)
        row_of = {term: row for row, term in enumerate(terms.tolist())}
        return matrix, [[row_of[t] for t in q] for q in encoded]

    def _postings_at(self, term: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scores, term frequencies) of term id ``term`` in the documents at ``positions``, the
        row read once for all of them; 0 where a document lacks the term."""
        if self._packed is not None:
            docs, tf = self._packed.row(term)
        else:
            lo, hi = self._tf_matrix.indptr[term], self._tf_matrix.indptr[term + 1]
            docs, tf = self._tf_matrix.indices[lo:hi], self._tf_matrix.data[lo:hi]
        j = np.minimum(np.searchsorted(docs, positions), max(len(docs) - 1, 0))
        found = (docs[j] == positions) if len(docs) else np.zeros(len(positions), dtype=bool)
        scores, tfs = np.zeros(len(positions)), np.zeros(len(positions))
        if found.any():
            j, where = j[found], positions[found]
            tfs[found] = tf[j]
            if self._packed is not None:
                scores[found] = scoring.posting_scores(tf[j], self._doc_len[where], np.full(len(j), self._idf[term]),
                                                       self._avg_len, self.variant, self.k1, self.b, self.delta)
            else:
                scores[found] = self._scores_matrix.data[self._scores_matrix.indptr[term] + j]
        return scores, tfs


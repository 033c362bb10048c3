"""A BM25 search engine over a sparse term-document matrix.

Scores are precomputed per posting at index time (as in bm25s), so a batch of queries is
one sparse-matrix product followed by a row-wise ``argpartition``. Documents live in
segments; deletions are a mask that is also excluded from the collection statistics, so
scores always equal those of a fresh build over the live documents, before and after a merge.

An index loaded from one saved segment without deletions keeps its postings packed and
memory-mapped (:mod:`salience.search.packed`) and scores only the query's terms' postings
when searched; the first change (add, delete, shared statistics) unpacks it in memory.
"""

from __future__ import annotations

import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from salience.core.base import register
from salience.core.run import Run
from salience.parallel import progress_bar
from salience.core.scores import Scores
from salience.core.checks import check_k, check_n_jobs
from salience.exceptions import InvalidParameterError, MissingDependencyError, unknown_choice
from salience.extras import install_hint
from salience.core import bm25_formulas as scoring
from salience.search.explanation import Explanation, explain_score, explain_scores, score_unindexed
from salience.core.params import Interval, Options
from salience.search.index import field_names
from salience.search.segmented import SegmentedIndex
from salience.search.packed import PackedPostings
from salience.search.pruning import PRUNING, pruned_top_k, queries_to_prune
from salience.search.posting_scores import PostingScores
from salience.search.postings import encode_shard, field_counts, in_vocabulary
from salience.search.topk import (MAX_BLOCK_CELLS, empty_rows, numba_kernel, score_block, top_k_block, top_k_numba,
                                  top_k_packed_numba)
from salience.io.documents import Document, read_queries
from salience.text.tokenize import TermEncoder, Tokenizer

__all__ = ["BM25"]


_BACKENDS = ("auto", "numpy", "numba")


def _field_weights(field_weights, fields: tuple) -> dict:
    """Every field's weight: 1 unless ``field_weights`` gives it another (a number > 0)."""
    weights = {f: 1.0 for f in fields}
    if field_weights is not None and not isinstance(field_weights, Mapping):
        raise InvalidParameterError(f"field_weights must be a dict of field: weight; got "
                                    f"{type(field_weights).__name__}.")
    for name, w in (field_weights or {}).items():
        if name not in weights:
            raise unknown_choice("field in field_weights", name, fields)
        if not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise InvalidParameterError(f"field weight for {name!r} must be a number > 0; got {w!r}.")
        weights[name] = float(w)
    return weights


class BM25(SegmentedIndex, PostingScores):
    """Lexical search with BM25 (Lucene, Robertson, ATIRE, BM25L, BM25+) or classic TF-IDF.

    Parameters
    ----------
    variant : {"lucene", "robertson", "atire", "bm25l", "bm25+", "tfidf"}
        Scoring formula; ``lucene`` is the default of Lucene, Elasticsearch and Pyserini.
    k1, b : float
        Term-frequency saturation and length normalisation.
    delta : float
        Lower bound on term frequency credit for ``bm25l`` and ``bm25+``.
    fields : sequence of str
        Document fields to index (missing fields count as empty).
    field_weights : mapping, optional
        Weight of each field's term counts and length (default 1 each, which equals indexing
        the fields concatenated).
    tokenizer : Tokenizer, optional
        Defaults to ``Tokenizer()``: NFKC, lower-case, ``\\w\\w+``, English stop words, Snowball stemming.
    store_documents : bool
        Keep the indexed fields so results can show them.
    backend : {"auto", "numpy", "numba"}
        Query kernel. ``numba`` (used by ``auto`` when numba is installed) gives identical
        results faster; ``numpy`` needs nothing beyond numpy and scipy.
    pruning : {"auto", "maxscore", "bmw", "off"}
        Dynamic pruning of the numba kernel (:mod:`salience.search.pruning`): block-max
        MaxScore (``maxscore``) or block-max WAND (``bmw``) returns the exhaustive search's
        top k and scores, reading a fraction of the postings; ``auto`` prunes the queries of
        at most 5 terms one of which holds at least 16,384 postings and 95% of the query's,
        for cuts of at most 100 documents, with :data:`~salience.search.pruning.AUTO_STRATEGY`.
    score_cache_mb : float
        Memory (MiB) for the precomputed contributions of a saved (packed) index's longest
        posting lists (:mod:`salience.search.score_cache`), 4 bytes a posting, filled as
        queries first read them: a long query then reads its common terms' scores instead of
        computing them, the same scores faster. 0: none.

    Examples
    --------
    >>> index = BM25().index(["the cat sat", "a dog barked", "cats and dogs"])
    >>> index.search("cat", k=2).ids
    ['0', '2']

    References
    ----------
    Robertson and Zaragoza. The Probabilistic Relevance Framework: BM25 and Beyond. 2009.
    Kamphuis et al. Which BM25 Do You Mean? ECIR 2020.
    """

    label = "BM25"
    hybrid_role, explains_terms = "lexical", True
    _parameter_constraints = {"fields": [str, "array-like"], "field_weights": [None, dict], "variant": [Options(scoring.VARIANTS)],
                              "k1": [Interval("real", 0)],
                              "b": [Interval("real", 0, 1)], "delta": [Interval("real", 0)],
                              "backend": [Options(_BACKENDS)], "tokenizer": [None, Tokenizer],
                              "store_documents": [bool], "pruning": [Options(PRUNING)],
                              "score_cache_mb": [Interval("real", 0)]}

    def __init__(
        self,
        *,
        variant: str = "lucene",
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
        fields: Sequence[str] = ("title", "text"),
        field_weights: Mapping[str, float] | None = None,
        tokenizer: Tokenizer | None = None,
        store_documents: bool = True,
        backend: str = "auto",
        pruning: str = "auto",
        score_cache_mb: float = 512,
    ):
        self.variant, self.k1, self.b, self.delta, self.backend = variant, k1, b, delta, backend
        self.pruning, self.score_cache_mb = pruning, score_cache_mb
        self.fields, self.field_weights, self.tokenizer, self.store_documents = fields, field_weights, tokenizer, store_documents
        # what the index computes with, derived from the parameters as given (a trailing underscore, as
        # scikit-learn names what it derives): get_params returns the parameters untouched
        self.fields_ = field_names(fields)
        self.field_weights_ = _field_weights(field_weights, self.fields_)
        self._validate_params()
        self.tokenizer_ = tokenizer or Tokenizer()
        self._reset()

    # ------------------------------------------------------------------------------------
    # state
    def _reset(self) -> None:
        self._reset_store()
        self._encoder = TermEncoder(self.tokenizer_)
        self._tf_matrix: sp.csr_matrix | None = None  # terms x documents, field-weighted term counts
        self._packed: PackedPostings | None = None  # or the saved postings, read per query term
        self._scores_matrix: sp.csr_matrix | None = None
        self._doc_len = np.zeros(0, dtype=np.float32)
        # a shard's statistics of the whole collection (see use_collection_statistics)
        self._shared_stats: tuple[np.ndarray, int, float, bool] | None = None

    def _has_data(self) -> bool:
        return self._tf_matrix is not None or self._packed is not None

    def resolved_params(self) -> dict[str, Any]:
        """The parameters as the index computes with them (the fields a list, every field's
        weight, the tokenizer built, numbers as floats): what its manifest records, and what a
        shard is built with."""
        return {"variant": self.variant, "k1": float(self.k1), "b": float(self.b), "delta": float(self.delta),
                "fields": list(self.fields_), "field_weights": dict(self.field_weights_), "tokenizer": self.tokenizer_,
                "store_documents": self.store_documents, "backend": self.backend, "pruning": self.pruning,
                "score_cache_mb": self.score_cache_mb}

    def __repr__(self) -> str:
        state = f"{self.n_docs} documents" if self._has_data() else "not indexed"
        return f"BM25(variant={self.variant!r}, k1={self.k1}, b={self.b}, {state})"

    @property
    def vocabulary(self) -> list[str]:
        return list(self._encoder.terms)

    # ------------------------------------------------------------------------------------
    # indexing
    def _encode_fields(self, docs: list[Document], show_progress: bool, n_jobs: int,
                       executor) -> list[tuple[np.ndarray, np.ndarray]]:
        """(term ids, document positions) of every field, in the index's vocabulary. With
        ``n_jobs`` > 1 shards are tokenized by workers, each with a vocabulary of its own that
        is then mapped onto the index's (new terms are added in shard order)."""
        n_jobs = check_n_jobs(n_jobs)
        if n_jobs == 1 and executor == "local":
            with progress_bar(len(docs) * len(self.fields_), "tokenizing", show_progress, unit="doc") as bar:
                return [self._encoder.encode_batch((d.fields[name] for d in docs), grow=True, progress=bar)
                        for name in self.fields_]
        from salience.parallel import map_shards, shard_size

        size = shard_size(len(docs), n_jobs)
        shards = [(self.tokenizer_, [[d.fields[name] for d in docs[lo : lo + size]] for name in self.fields_])
                  for lo in range(0, len(docs), size)]
        out: list[tuple[list, list]] = [([], []) for _ in self.fields_]
        with progress_bar(len(shards), "tokenizing", show_progress, unit="shard") as bar:
            for shard, (terms, fields) in enumerate(map_shards(encode_shard, shards, n_jobs, executor)):
                for f, (term_ids, doc_index) in enumerate(in_vocabulary(self._encoder, terms, fields)):
                    out[f][0].append(term_ids)
                    out[f][1].append(doc_index + shard * size)
                bar.update(1)
        return [(np.concatenate(term_parts), np.concatenate(doc_parts)) for term_parts, doc_parts in out]

    def _add_data(self, docs: list[Document], show_progress: bool, n_jobs: int, executor) -> None:
        """The new documents' field-weighted term counts, as columns after the others."""
        self._append_columns(*self.term_counts(self._encode_fields(docs, show_progress, n_jobs, executor), len(docs)))

    def _append_columns(self, new_tf: sp.csr_matrix, doc_len: np.ndarray) -> None:
        """New documents' term counts (all terms x new documents) after the others."""
        if self._tf is None:
            self._tf = new_tf
        else:
            old = self._tf
            old.resize((new_tf.shape[0], old.shape[1]))
            self._tf = sp.hstack([old, new_tf], format="csr")
        self._tf.sort_indices()
        self._doc_len = np.concatenate([self._doc_len, doc_len])

    def term_counts(self, encoded_fields: list[tuple[np.ndarray, np.ndarray]], n_new: int) -> tuple[sp.csr_matrix, np.ndarray]:
        """(terms x documents field-weighted term counts, float32 document lengths) of a batch
        of ``n_new`` documents from each field's (term ids, document positions), in the
        vocabulary's current size."""
        return field_counts(self.fields_, self.field_weights_, encoded_fields, n_new, len(self._encoder.terms))

    def build(self, documents: Any, out, *, memory_mb: float = 1024, on_error: str = "raise", n_jobs: int = 1,
              executor="local", show_progress: bool = False, resume: bool = True) -> "BM25":
        """Index ``documents`` (a jsonl / jsonl.gz file, a BEIR folder or an iterable) into the
        folder ``out`` holding at most about ``memory_mb`` megabytes of postings at a time, for
        collections larger than memory: postings are flushed to disk as runs when the budget
        fills and merged on disk, every posting's score precomputed; this index then searches
        the folder memory-mapped. The index equals ``fit(documents).save(out)``'s. A build that
        is interrupted resumes from its last flushed run when started again over the same
        file (``resume=False`` starts afresh). Options as for :meth:`fit`.

        >>> import tempfile, os
        >>> folder = os.path.join(tempfile.mkdtemp(), "index")
        >>> BM25().build(["the cat sat", "a dog barked", "cats and dogs"], folder, memory_mb=16).search("cat", k=2).ids
        ['0', '2']
        """
        from salience.search import bulk

        fresh = type(self)(**self.get_params())
        path = bulk.build(fresh, documents, out, memory_mb=memory_mb, on_error=on_error, n_jobs=n_jobs,
                          executor=executor, show_progress=show_progress, resume=resume)
        self.__dict__.update(type(self).load(path, verify=False).__dict__)
        return self

    def _after_change(self) -> None:
        self._shared_stats = None  # the collection changed: its owner shares new statistics
        self._refresh()

    # ------------------------------------------------------------------------------------
    # querying
    def _encode_queries(self, queries: Sequence[str]) -> list[list[int]]:
        out = []
        for i, q in enumerate(queries):
            if not isinstance(q, str):
                raise InvalidParameterError(f"query at position {i} must be a str; got {type(q).__name__}.")
            out.append(self._encoder.encode(q, grow=False))
        return out

    def _kernel(self):
        if self.backend == "numpy":
            return None
        kernel = numba_kernel()
        if kernel is None and self.backend == "numba":
            raise MissingDependencyError(f"backend='numba' needs numba: {install_hint('numba')}")
        return kernel

    def _search_encoded(self, encoded: list[list[int]], k: int, mask: np.ndarray | None) -> list[Scores]:
        positions, values, counts = self._search_rows(encoded, k, mask)
        return Scores.unchecked_rows(values, self._id_array[positions].tolist(), counts.tolist())

    def _search_rows(self, encoded: list[list[int]], k: int, mask: np.ndarray | None, ordered: bool = True) -> tuple:
        """``(positions, values, counts)``: each query's top ``k`` as rows of index positions
        and scores (the first ``counts[q]`` of row ``q`` valid), best first (``ordered``) or
        in any order."""
        kernel = self._kernel()
        chosen = queries_to_prune(self, encoded, k) if kernel is not None else []
        if not chosen:
            return self._with_constant(encoded, *self._exhaustive_rows(encoded, k, mask, ordered))
        # the chosen queries pruned (the same top k, most postings never read), the others exhaustively
        positions, values, counts = empty_rows(len(encoded), k, len(self._ids))
        positions[chosen], values[chosen], counts[chosen] = pruned_top_k(self, [encoded[i] for i in chosen], k, mask,
                                                                         ordered=ordered)
        others = np.setdiff1d(np.arange(len(encoded)), chosen)
        if len(others):
            positions[others], values[others], counts[others] = self._exhaustive_rows([encoded[i] for i in others], k,
                                                                                      mask, ordered)
        return self._with_constant(encoded, positions, values, counts)

    def _exhaustive_rows(self, encoded: list[list[int]], k: int, mask: np.ndarray | None, ordered: bool = True) -> tuple:
        kernel = self._kernel()
        if kernel is not None and self._packed is not None:  # decoded and scored inside the kernel
            return top_k_packed_numba(self._packed, self._length_norms(), self._idf, self.variant, self.k1,
                                      self.delta, encoded, k, mask, ordered=ordered, cache=self._score_cache())
        scores, rows = self._query_scores(encoded)
        if kernel is not None:
            return top_k_numba(kernel, scores, rows, k, mask, ordered)
        block = max(1, min(1024, MAX_BLOCK_CELLS // max(scores.shape[1], 1)))
        parts = [top_k_block(score_block(scores, rows[start : start + block]), k, mask)
                 for start in range(0, len(encoded), block)]
        if not parts:
            return empty_rows(0, k, scores.shape[1])
        return tuple(np.concatenate(column) for column in zip(*parts))

    def _with_constant(self, encoded: list[list[int]], positions, values, counts) -> tuple:
        if self._nonocc.any():
            # BM25L / BM25+ credit absent query terms too: a per-query constant
            values = values + np.array([self._nonocc[q].sum() if q else 0.0 for q in encoded])[:, None]
        return positions, values, counts

    def top_rows(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                 ordered: bool = True) -> tuple:
        """:meth:`search_batch` as arrays, no ids: ``(positions, values, counts)``, row ``q``
        holding query ``q``'s top ``k`` as positions in this index and scores, its first
        ``counts[q]`` valid. What a hybrid fuses before naming documents. ``ordered=False``:
        each row's documents in any order (the same set), a sort less."""
        self._require_index()
        if isinstance(queries, str):
            raise InvalidParameterError("top_rows takes a list of queries.")
        return self._search_rows(self._encode_queries(list(queries)), check_k(k), self._filter_mask(where),
                                 bool(ordered))

    def search_batch(
        self,
        queries: Sequence[str],
        *,
        k: int = 10,
        where: Mapping | None = None,
        n_jobs: int = 1,
        show_progress: bool = False,
    ) -> list[Scores]:
        """The ``k`` best documents of each query, in rank order; ``n_jobs`` threads score blocks
        in parallel (results identical). Only documents containing at least one query term (with
        non-zero weight) are returned, so a query of stop words or unknown terms gives an empty
        result; ``k`` above the corpus size is clamped; ``where`` filters on metadata before the
        top-k cut (``search(query)`` is one query of these)."""
        self._require_index()
        k = check_k(k)
        if isinstance(queries, str):
            raise InvalidParameterError("search_batch takes a list of queries; for one query use search(query).")
        queries = list(queries)
        encoded = self._encode_queries(queries)
        mask = self._filter_mask(where)
        n_jobs = check_n_jobs(n_jobs)
        if n_jobs == 1 and not show_progress:
            return self._search_encoded(encoded, k, mask)
        chunk = max(1, min(256, math.ceil(len(encoded) / max(n_jobs * 4, 1))))
        pieces = [encoded[i : i + chunk] for i in range(0, len(encoded), chunk)]
        results: list[Scores] = []
        with progress_bar(len(encoded), "searching", show_progress, unit="query") as bar, ThreadPoolExecutor(max_workers=n_jobs) as pool:
            for part in pool.map(lambda piece: self._search_encoded(piece, k, mask), pieces):
                results.extend(part)
                bar.update(len(part))
        return results

    def retrieve(
        self,
        queries: Any,
        *,
        k: int = 1000,
        where: Mapping | None = None,
        n_jobs: int = 1,
        show_progress: bool = False,
        name: str | None = None,
    ) -> Run:
        """Search every query of ``{id: text}``, a queries.jsonl file or a BEIR folder; return a :class:`Run`."""
        query_map = read_queries(queries)
        results = self.search_batch(list(query_map.values()), k=k, where=where, n_jobs=n_jobs, show_progress=show_progress)
        return Run(dict(zip(query_map.keys(), results)), name=name or f"bm25-{self.variant}")

    def get_scores(self, query: str) -> Scores:
        """Exact score of every live document for ``query``, as :class:`~salience.Scores` in
        index order (the rank_bm25 / bm25s verb; documents without a query term score 0 or,
        for BM25L / BM25+, the non-occurrence credit)."""
        self._require_index()
        live = np.flatnonzero(self._live)
        return Scores.unchecked(self._dense_scores(query)[live], [self._ids[i] for i in live])

    def _dense_scores(self, query: str) -> np.ndarray:
        """Score of every indexed position for ``query`` (deleted documents get 0), float64."""
        encoded = self._encode_queries([query])
        dense = score_block(*self._query_scores(encoded))[0].astype(np.float64)
        if encoded[0]:
            dense += self._nonocc[encoded[0]].sum()
        dense[~self._live] = 0.0
        return dense

    def score(self, query: str, doc_ids: Sequence[str]) -> Scores:
        """Exact scores of the given documents for ``query`` (a scorer for
        :class:`~salience.core.judges.ScorerJudge` and other rerankers).

        >>> index = BM25().index(["red fox", "red dog", "blue"])
        >>> index.score("red fox", ["1", "0"]).ranked_ids()
        ['0', '1']
        """
        self._require_index()
        positions = self._positions(doc_ids)
        cached = self._last_scores
        if cached is None or cached[0] != query:
            cached = self._last_scores = (query, self._dense_scores(query))
        return Scores(cached[1][positions], ids=[str(d) for d in doc_ids])

    def score_texts(self, query: str, texts: Sequence) -> np.ndarray:
        """Scores of texts that are not in the index, as if they were, with the index's
        collection statistics (idf, average length) held fixed: the black-box scorer that
        token attribution masks. A text is a string (the index's first field) or a dict of
        fields; field weights apply as at indexing.

        >>> index = BM25(k1=1.2, b=0.75).index(["red fox", "red dog", "blue"])
        >>> index.score_texts("red fox", ["red fox"]).round(6).tolist() == index.score("red fox", ["0"]).values.round(6).tolist()
        True
        """
        return score_unindexed(self, query, texts)

    def index_terms(self, text: str) -> list[str]:
        """The index's terms that ``text`` analyses to (tokenized, stop words dropped, stemmed as
        the index was built), those the index holds, in order."""
        return [self._encoder.terms[term_id] for term_id in self._encoder.encode(text, grow=False)]

    def explain(self, query: str, doc_id: str) -> Explanation:
        """Per-term contributions to ``doc_id``'s score for ``query``; they sum to the score."""
        return explain_score(self, query, doc_id)

    def explain_batch(self, query: str, doc_ids: Sequence[str]) -> list[Explanation]:
        """:meth:`explain` of several documents for one query (a search's results), each query
        term's postings read once for all of them."""
        return explain_scores(self, query, doc_ids)

    def _copy_data(self, clone: "BM25") -> None:
        if self._packed is not None:  # read-only: the copy unpacks it when it changes
            clone._packed, clone._tf_matrix = self._packed, None
        elif self._tf_matrix is not None:
            clone._tf = self._tf_matrix.copy()
        clone._encoder = self._encoder.copy()
        clone._doc_len = self._doc_len.copy()

    # ------------------------------------------------------------------------------------
    # persistence (see salience.search.store for the format)
    def _save_to(self, path: Path) -> None:
        from salience.search import store

        store.save_index(self, path)

    @classmethod
    def _load_from(cls, path: Path, verify: bool, **options) -> "BM25":
        from salience.search import segments

        if options:
            raise InvalidParameterError(f"BM25.load takes no {', '.join(options)}.")
        return segments.load_index(cls, path, verify=verify)

    def _commit_to(self) -> None:
        from salience.search import store

        store.commit_index(self)

    def _reopen(self, verify: bool) -> "BM25":
        from salience.search import segments

        return segments.reopen_index(self, verify=verify)

    def _compact_data(self, keep: np.ndarray) -> None:
        tf = self._tf[:, keep].tocsr()
        used = np.flatnonzero(np.diff(tf.indptr) > 0)
        tf = tf[used].tocsr()
        tf.sort_indices()
        terms = [self._encoder.terms[t] for t in used]
        self._encoder = TermEncoder(self.tokenizer_, terms)
        self._tf = tf
        self._doc_len = self._doc_len[keep]


for _variant, _description in (
    ("lucene", "BM25 as Lucene, Elasticsearch and Pyserini score it (IDF log(1 + (N - df + 0.5) / (df + 0.5)))"),
    ("robertson", "BM25 with Robertson-Sparck Jones IDF, as the original Okapi formulation"),
    ("atire", "BM25 with ATIRE's IDF log(N / df)"),
    ("bm25l", "BM25L: shifted term frequency so long documents are not over-penalised (Lv and Zhai, 2011)"),
    ("bm25+", "BM25+: a lower bound delta on the credit of a matching term (Lv and Zhai, 2011)"),
    ("tfidf", "classic TF-IDF (raw term frequency times IDF), for comparison"),
):
    register("search", _variant, BM25, _description, variant=_variant)

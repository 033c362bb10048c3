"""Precomputed contributions for a packed index's longest posting lists.

The packed kernel computes each posting's BM25 contribution as it reads it: the document's
length norm looked up, a division, a cast to float32. For a term in most documents that is
most of a long query's time; bm25s avoids it by storing every posting's score. A
:class:`ScoreCache` stores them for the long lists alone, within a memory budget: the first
query that reads a term of at least :data:`MIN_POSTINGS` postings computes its contributions
(as the kernel would, so the scores are the same to the bit) into a preallocated pool; later
queries read them. Which terms may be cached is fixed when the cache is made: the longest
lists whose contributions fit the budget together, so the pool never runs out and a run of
queries on rarer terms cannot take the room of the common terms that most queries read. The
pool's pages are only committed as it fills.

The contributions depend on the collection statistics (idf, lengths) and the scoring
parameters: a cache is built for one set of them, and :meth:`ScoreCache.serves` tells when
it is stale (the index then starts a new one)."""

from __future__ import annotations

import threading

import numpy as np

from salience.core import bm25_formulas as scoring

__all__ = ["ScoreCache", "MIN_POSTINGS", "NO_CACHE", "kernel_cache"]

#: a term is cached only from this many postings: below, computing as it is read is cheap
#: and the Python work of filling the cache would not pay back
MIN_POSTINGS = 4096

#: what the kernel takes when nothing is cached (an empty offsets array: no term is looked up)
NO_CACHE = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


class ScoreCache:
    """Float32 contributions of the long posting lists of ``packed``, scored with ``norms``
    (each document's length norm), ``idf`` and the variant's parameters, up to
    ``budget_bytes`` (4 bytes a posting)."""

    def __init__(self, packed, norms: np.ndarray, idf: np.ndarray, variant: str, k1: float, delta: float,
                 budget_bytes: int):
        self.packed, self.norms, self.idf = packed, norms, idf
        self.params = (variant, float(k1), float(delta))
        self.budget_bytes = int(budget_bytes)
        self.code = scoring.VARIANTS.index(variant)
        self.base = float(scoring.nonoccurrence_component(variant, k1, delta))
        #: where each term's contributions start in :attr:`pool`; -1: not cached
        self.offsets = np.full(packed.n_terms, -1, dtype=np.int64)
        self.min_postings = self._shortest_cached(packed.counts, max(0, int(budget_bytes)) // 4)
        held = packed.counts[packed.counts >= self.min_postings]
        self.pool = np.empty(int(held.sum()), dtype=np.float32)
        self.used = 0
        self._lock = threading.Lock()

    @staticmethod
    def _shortest_cached(counts: np.ndarray, room: int) -> int:
        """The fewest postings a cached term holds: the longest lists that fit ``room``
        postings together, none below :data:`MIN_POSTINGS` (ties at the cut left out)."""
        ordered = np.sort(counts[counts >= MIN_POSTINGS])[::-1]
        fits = int(np.searchsorted(np.cumsum(ordered), room, side="right"))
        if fits == 0:
            return int(counts.max(initial=0)) + 1  # nothing fits
        if fits < len(ordered) and ordered[fits] == ordered[fits - 1]:
            return int(ordered[fits - 1]) + 1  # a tie straddles the cut: all of it left out
        return int(ordered[fits - 1])  # every list here holds MIN_POSTINGS or more

    def serves(self, packed, norms: np.ndarray, idf: np.ndarray, variant: str, k1: float, delta: float,
               budget_bytes: int) -> bool:
        """Whether the cache holds contributions for these postings and statistics (the same
        arrays, not equal copies: the index replaces them when anything changes) within this
        budget."""
        return (packed is self.packed and norms is self.norms and idf is self.idf
                and self.params == (variant, float(k1), float(delta)) and self.budget_bytes == int(budget_bytes))

    def arrays(self, encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, pool)`` for the kernel, after caching the terms of these queries that
        are among the cached lists and not yet filled."""
        counts = self.packed.counts
        wanted = {t for query in encoded for t in query if counts[t] >= self.min_postings and self.offsets[t] < 0}
        if wanted:
            with self._lock:  # two threads must not fill the same room
                for t in sorted(wanted):
                    if self.offsets[t] < 0:
                        self._fill(t)
        return self.offsets, self.pool

    def _fill(self, term: int) -> None:
        docs, tf = self.packed.row(term)
        tfc = scoring.tf_from_norm(tf.astype(np.float64), self.norms[docs], self.code, self.params[1], self.params[2])
        start, stop = self.used, self.used + len(docs)
        # float64 arithmetic then a float32 cast, as the kernel computes each posting
        np.multiply(self.idf[term], tfc - self.base, out=tfc)
        self.pool[start:stop] = tfc
        self.used = stop
        self.offsets[term] = start  # last: a reader in another thread sees the term cached only when it is

    @property
    def nbytes(self) -> int:
        """Bytes of contributions held."""
        return self.used * 4


def kernel_cache(cache: "ScoreCache | None", encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """What a kernel takes for ``cache`` (None: nothing cached) and these queries."""
    return cache.arrays(encoded) if cache is not None else NO_CACHE

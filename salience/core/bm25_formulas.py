"""BM25 variants as vectorised formulas (Kamphuis et al., ECIR 2020, "Which BM25 do you mean?"): the
search indexes score with them, and so does any domain that ranks a text against a collection.

Each variant is an IDF formula and a term-frequency component. ``score(t, d) = idf(t) * tfc(tf, |d|)``,
and a query's score is the sum over its terms (repeated query terms count again).

References
----------
Kamphuis, de Vries, Boytsov, Lin. Which BM25 Do You Mean? A Large-Scale Reproducibility
Study of Scoring Variants. ECIR 2020.
Lv and Zhai. When documents are very long, BM25 fails! (BM25L) / Lower-bounding term
frequency normalization (BM25+). SIGIR 2011, CIKM 2011.
"""

from __future__ import annotations

import numpy as np

__all__ = ["VARIANTS", "idf", "tf_component", "tf_formula", "length_norm", "tf_from_norm", "nonoccurrence_component", "posting_scores"]

VARIANTS = ("lucene", "robertson", "atire", "bm25l", "bm25+", "tfidf")


def idf(df: np.ndarray, n_docs: int, variant: str) -> np.ndarray:
    """Inverse document frequency per term (float64). Terms with ``df == 0`` get 0."""
    df = np.asarray(df, dtype=np.float64)
    n = float(n_docs)
    safe = np.maximum(df, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if variant == "lucene":
            out = np.log1p((n - df + 0.5) / (df + 0.5))
        elif variant == "robertson":
            # clamp negative IDF of very common terms to 0, as Lucene-era Robertson variants do
            out = np.log(np.maximum((n - df + 0.5) / (df + 0.5), 1.0))
        elif variant == "atire":
            out = np.log(n / safe)
        elif variant == "bm25l":
            out = np.log((n + 1.0) / (df + 0.5))
        elif variant == "bm25+":
            out = np.log((n + 1.0) / safe)
        elif variant == "tfidf":
            # Lucene ClassicSimilarity weighs a term by idf twice (query and document side):
            # idf = 1 + ln(N / (df + 1)), so the term weight is its square.
            out = (1.0 + np.log(n / (df + 1.0))) ** 2
        else:  # pragma: no cover - validated by callers
            raise ValueError(variant)
    return np.where(df > 0, out, 0.0)


def tf_component(tf: np.ndarray, doc_len: np.ndarray, avg_len: float, variant: str, k1: float, b: float, delta: float) -> np.ndarray:
    """Term-frequency component per (term, document) posting (float64)."""
    return tf_formula(np.asarray(tf, dtype=np.float64), np.asarray(doc_len, dtype=np.float64), avg_len,
                      VARIANTS.index(variant), k1, b, delta)


def tf_formula(tf, doc_len, avg_len, code, k1, b, delta):
    """:func:`tf_component` on float64 arrays or on float64 scalars, the variant by its
    position in :data:`VARIANTS`: arithmetic only, so the numba kernel that scores packed
    postings compiles this same function and its scores are bit for bit the vectorised ones."""
    return tf_from_norm(tf, length_norm(doc_len, avg_len, code, b), code, k1, delta)


def length_norm(doc_len, avg_len, code, b):
    """The document-length part of :func:`tf_formula` (float64), computed once per document
    by the kernels that score many postings of the same documents."""
    if code == 5:  # tfidf: ClassicSimilarity's length norm sqrt(|d|)
        return np.sqrt(np.maximum(doc_len, 1e-12))
    return (1.0 - b) + b * doc_len / avg_len


def tf_from_norm(tf, norm, code, k1, delta):
    """:func:`tf_formula` given the document's :func:`length_norm`."""
    if code <= 1:  # lucene, robertson
        return tf / (tf + k1 * norm)
    if code == 2:  # atire
        return tf * (k1 + 1.0) / (tf + k1 * norm)
    if code == 3:  # bm25l
        c = tf / norm + delta
        return (k1 + 1.0) * c / (k1 + c)
    if code == 4:  # bm25+
        return (k1 + 1.0) * tf / (k1 * norm + tf) + delta
    # tfidf: ClassicSimilarity's sqrt(tf) with length norm 1 / sqrt(|d|)
    return np.sqrt(tf) / norm


def nonoccurrence_component(variant: str, k1: float, delta: float) -> float:
    """tf-component of a term absent from a document: non-zero only for BM25L and BM25+."""
    if variant == "bm25l":
        return (k1 + 1.0) * delta / (k1 + delta)
    if variant == "bm25+":
        return delta
    return 0.0


def posting_scores(tf: np.ndarray, doc_len: np.ndarray, idf_of: np.ndarray, avg_len: float, variant: str,
                   k1: float, b: float, delta: float) -> np.ndarray:
    """Score of each (term, document) posting (float32) given its term frequency, its
    document's length and its term's idf: what an index precomputes, less the non-occurrence
    credit that BM25L / BM25+ add per query."""
    tfc = tf_component(tf, doc_len, avg_len, variant, k1, b, delta)
    return (idf_of * (tfc - nonoccurrence_component(variant, k1, delta))).astype(np.float32)

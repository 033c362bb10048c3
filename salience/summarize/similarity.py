"""The sentence similarities behind the summarisers: term counts in the text's language,
tf-idf, cosine, BM25 and word-overlap graphs (dense for small inputs, sparse, blocked or
factored beyond), and a query's affinity to each sentence."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import sparse

from salience.core.graph import ProductGraph
from salience.exceptions import InvalidParameterError
from salience.text.byte_tokens import IDEOGRAPHS
from salience.text.hashing import dense_ids, first_appearance
from salience.text.tokenize import DEFAULT_PATTERN, TermEncoder, Tokenizer

__all__ = ["new_encoder", "check_language", "text_language", "text_languages", "term_counts", "term_counts_many", "tfidf",
           "unit_rows", "cosine", "bm25_similarity", "overlap_similarity", "blocked_graph", "query_affinity", "GRAPH_MAX_EDGES"]

# Counts with more cells than this (sentences x terms) are kept sparse, and so are the
# similarity graphs built from them, on which PageRank then iterates; smaller inputs use dense
# arrays (faster at that size, and the numbers of earlier releases).
DENSE_MAX_CELLS = 4_000_000
#: thresholded LexRank and word-overlap TextRank store their sentence graph: at most this many
#: edges (12 bytes each in CSR). The default methods walk theirs through its factors instead.
GRAPH_MAX_EDGES = 20_000_000
BLOCK_PAIRS = 4_000_000  # candidate sentence pairs multiplied out at once


def new_encoder(language: str = "en") -> TermEncoder:
    """A term encoder with an empty cache for a language. Sentence similarity should rest on
    content words, so the language's stop list is used (for English, the fuller function-word
    list) and its Snowball stemmer; a language without them goes without (a warning says so).
    Chinese and Japanese count each ideograph and kana as a term of its own."""
    from salience.text.languages import LANGUAGES, SCRIPT_SEGMENTED, stopwords_for

    if language == "en":
        return TermEncoder(Tokenizer(stopwords="en_full"))
    known = LANGUAGES.get(language)
    pattern = rf"[{IDEOGRAPHS}]|[^\W{IDEOGRAPHS}]{{2,}}" if language in SCRIPT_SEGMENTED else DEFAULT_PATTERN
    return TermEncoder(Tokenizer(stopwords=sorted(stopwords_for(language)) or None, pattern=pattern,
                                 stemmer=known.snowball if known else None))


def check_language(language: str) -> str:
    from salience.text.languages import check_language

    return check_language(language)


def text_language(sentences: Sequence[str], language: str) -> str:
    """The language of a text given as sentences: ``language``, or with ``"auto"`` detected
    from its first sentences (a fallback language is named in a warning)."""
    return text_languages([sentences], language, stacklevel=5)[0]


def text_languages(texts: Sequence[Sequence[str]], language: str, stacklevel: int = 4) -> list[str]:
    """:func:`text_language` of each text (a list of sentences), the texts detected together
    (``stacklevel``: the frame a fallback warning names)."""
    from salience.text.languages import check_language, detect_languages, warn_fallbacks

    code = check_language(language)
    if code != "auto":
        codes = [code] * len(texts)
    else:
        codes = detect_languages([" ".join(sentences[:200]) for sentences in texts])
    warn_fallbacks(codes, stacklevel=stacklevel)
    return codes


def term_counts(sentences: Sequence[str], encoder: TermEncoder | None = None):
    """Sentence x term counts over the terms of these sentences (columns in order of first
    appearance): a dense array, or a sparse CSR matrix when it would hold more than
    ``DENSE_MAX_CELLS`` cells."""
    encoder = encoder or new_encoder()
    ids, rows = encoder.encode_tokens([encoder.tokenizer.split(s) for s in sentences], grow=True)
    n = len(sentences)
    if len(ids) == 0:
        return np.zeros((n, 0))
    # a column per term in order of its first appearance here: the counts, and every score made
    # from them to the last bit, do not depend on the ids the encoder gave terms of earlier texts
    local, first = first_appearance(*dense_ids(ids, len(encoder.terms)))
    n_terms = len(first)
    if n * n_terms <= DENSE_MAX_CELLS:
        flat = np.bincount(rows * n_terms + local, minlength=n * n_terms)
        return flat.reshape(n, n_terms).astype(np.float64)
    return _sparse_counts(rows, local, n, n_terms)


def _sparse_counts(rows: np.ndarray, columns: np.ndarray, n: int, n_terms: int) -> sparse.csr_matrix:
    counts = sparse.csr_matrix((np.ones(len(rows)), (rows, columns)), shape=(n, n_terms))
    counts.sum_duplicates()
    return counts


def term_counts_many(texts: Sequence[Sequence[str]], encoder: TermEncoder) -> list:
    """:func:`term_counts` of each text (a list of sentences), equal to it array for array, with
    the sentences of every text encoded in one pass (the encoder's vectorised path for a large
    batch) and every dense matrix counted by one ``bincount``: the per-text cost of a summary
    batch is then its graph alone."""
    per_text = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ids, rows = encoder.encode_batch([s for sentences in texts for s in sentences], grow=True)
    sentence_start = np.concatenate(([0], np.cumsum(per_text)))
    text = np.repeat(np.arange(len(texts)), per_text)[rows]
    n_vocabulary = max(len(encoder.terms), 1)
    # (text, term) groups, numbered by first appearance: within a text, its terms' first appearances
    group, first = first_appearance(*dense_ids(text * n_vocabulary + ids, len(texts) * n_vocabulary))
    n_terms = np.bincount(text[first], minlength=len(texts))
    local = group - np.concatenate(([0], np.cumsum(n_terms)))[text]
    row = rows - sentence_start[text]
    cells = per_text * n_terms
    dense = cells <= DENSE_MAX_CELLS
    cell_start = np.concatenate(([0], np.cumsum(np.where(dense, cells, 0))))
    in_dense = dense[text]
    flat = np.bincount(cell_start[text[in_dense]] + row[in_dense] * n_terms[text[in_dense]] + local[in_dense],
                       minlength=int(cell_start[-1])).astype(np.float64)
    token_start = np.searchsorted(text, np.arange(len(texts) + 1))
    out = []
    for t, (n, m) in enumerate(zip(per_text.tolist(), n_terms.tolist())):
        if dense[t]:
            out.append(flat[cell_start[t]:cell_start[t + 1]].reshape(n, m))
        else:
            span = slice(token_start[t], token_start[t + 1])
            out.append(_sparse_counts(row[span], local[span], n, m))
    return out


def tfidf(counts):
    n = counts.shape[0]
    if isinstance(counts, np.ndarray):
        df = (counts > 0).sum(axis=0)
        return counts * (np.log((1.0 + n) / (1.0 + df)) + 1.0)  # smoothed, as scikit-learn
    idf = np.log((1.0 + n) / (1.0 + counts.getnnz(axis=0))) + 1.0
    return sparse.csr_matrix(counts.multiply(idf[None, :]))


def unit_rows(matrix):
    """Rows scaled to unit length (empty rows stay empty)."""
    if isinstance(matrix, np.ndarray):
        norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1))  # np.linalg.norm's sum, less its overhead
        return matrix / (norms if norms.all() else np.where(norms > 0, norms, 1.0))[:, None]
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    return sparse.csr_matrix(matrix.multiply(1.0 / np.where(norms > 0, norms, 1.0)[:, None]))


def cosine(matrix):
    unit = unit_rows(matrix)
    product = unit @ unit.T
    return product if isinstance(product, np.ndarray) else product.tocsr()


def bm25_similarity(counts, k1: float = 1.2, b: float = 0.75):
    """``S[i, j]``: BM25 score of sentence ``j`` for sentence ``i`` as the query."""
    n = counts.shape[0]
    dense = isinstance(counts, np.ndarray)
    df = (counts > 0).sum(axis=0) if dense else counts.getnnz(axis=0)
    idf = np.log((n - df + 0.5) / (df + 0.5))
    # as summa / gensim: negative IDF (terms in most sentences) is replaced by a small floor
    positive = idf[idf > 0]
    floor = 0.25 * (positive.mean() if len(positive) else 0.0)
    idf = np.where(idf > 0, idf, floor)
    lengths = counts.sum(axis=1) if dense else np.asarray(counts.sum(axis=1)).ravel()
    avg = lengths.mean() if n and lengths.mean() > 0 else 1.0
    if dense:
        tfc = counts * (k1 + 1) / (counts + k1 * (1 - b + b * lengths[:, None] / avg))
        return (counts > 0).astype(float) @ (tfc * idf).T
    coo = counts.tocoo()
    tf = coo.data
    weight = tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[coo.row] / avg)) * idf[coo.col]
    tfc = sparse.csr_matrix((weight, (coo.row, coo.col)), shape=counts.shape)
    present = sparse.csr_matrix((np.ones(len(tf)), (coo.row, coo.col)), shape=counts.shape)
    # symmetrised as TextRank walks it, (S + S.T) / 2, and never formed: memory linear in the text
    return ProductGraph((0.5 * present, tfc), (0.5 * tfc, present))


def overlap_similarity(counts):
    if isinstance(counts, np.ndarray):
        present = (counts > 0).astype(float)
        shared = present @ present.T
        lengths = counts.sum(axis=1)
        with np.errstate(divide="ignore"):
            logs = np.log(np.maximum(lengths, 1.0))
        denominator = logs[:, None] + logs[None, :]
        return np.where(denominator > 0, shared / np.where(denominator > 0, denominator, 1.0), 0.0)
    present = counts.copy()
    present.data[:] = 1.0
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    logs = np.log(np.maximum(lengths, 1.0))

    def overlap(start: int, shared):
        shared = shared.tocoo()
        denominator = logs[shared.row + start] + logs[shared.col]
        values = np.where(denominator > 0, shared.data / np.where(denominator > 0, denominator, 1.0), 0.0)
        return sparse.csr_matrix((values, (shared.row, shared.col)), shape=shared.shape)

    return blocked_graph(present, present, overlap, "textrank with similarity='overlap'")


def blocked_graph(left, right, keep, what: str):
    """The sparse graph ``keep(start, left[start:stop] @ right.T)`` over row blocks, built a
    block at a time so that no block holds more than ``BLOCK_PAIRS`` candidate pairs, and
    refused past ``GRAPH_MAX_EDGES`` edges kept (graphs that must be stored: a threshold or a
    per-pair formula; the default methods walk theirs without storing it)."""
    n = left.shape[0]
    # candidate pairs of the rows up to each row: a row meets every sentence sharing a term
    bound = np.cumsum((left != 0).astype(np.float64) @ right.getnnz(axis=0))
    blocks, edges, start = [], 0, 0
    while start < n:
        base = bound[start - 1] if start else 0.0
        stop = max(start + 1, int(np.searchsorted(bound, base + BLOCK_PAIRS, side="right")))
        block = keep(start, (left[start:stop] @ right.T).tocsr())
        block.eliminate_zeros()
        edges += block.nnz
        if edges > GRAPH_MAX_EDGES:
            raise InvalidParameterError(
                f"{what} over {n:,} sentences keeps a graph of more than {GRAPH_MAX_EDGES:,} edges (about "
                f"{GRAPH_MAX_EDGES * 12 / 2**30:.1f} GB a copy); continuous lexrank (no threshold) and textrank with "
                "similarity='bm25' walk their graphs without storing them, in memory linear in the text: use one of "
                "those, or summarise the text in parts.")
        blocks.append(block)
        start = stop
    return sparse.vstack(blocks, format="csr") if blocks else sparse.csr_matrix((n, n))


def query_affinity(sentences: Sequence[str], query: str, encoder: TermEncoder | None = None) -> np.ndarray:
    unit = unit_rows(tfidf(term_counts(list(sentences) + [query], encoder)))
    product = unit[:-1] @ unit[-1].T
    sim = product if isinstance(product, np.ndarray) else np.asarray(product.todense()).ravel()
    return np.maximum(np.ravel(sim), 0.0)

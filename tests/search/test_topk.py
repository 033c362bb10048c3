"""The numba kernels against the numpy backend on a Zipf-like corpus: queries whose postings
are a few documents (the top k taken from the postings a second time) and queries whose
postings cover much of the collection (every document scanned), with ties, repeated and
unknown terms, filters, and packed postings."""

import numpy as np
import pytest

from salience.search import BM25
from salience.text import Tokenizer

pytest.importorskip("numba")

PLAIN = Tokenizer(stopwords=None, stemmer=None)


def _zipf_corpus(n_docs=3000, n_words=400, seed=0):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_words + 1)
    p /= p.sum()
    docs = []
    for i in range(n_docs):
        words = rng.choice(n_words, size=int(rng.integers(3, 60)), p=p)
        docs.append({"_id": f"d{i}", "text": " ".join(f"w{w}" for w in words), "year": 1990 + i % 30})
    queries = [" ".join(f"w{w}" for w in rng.choice(n_words, size=int(rng.integers(1, 7)))) for _ in range(150)]
    return docs, queries + ["w0 w0 w399", "w1 w2 w3 w4 w5 w6 w7 w8", "zz w5", "w398", "w0"]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.ids == y.ids
        np.testing.assert_array_equal(x.values, y.values)


@pytest.mark.parametrize("params", [{}, {"variant": "bm25+"}, {"variant": "tfidf"}, {"variant": "bm25l", "b": 0.2}])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_the_kernels_answer_as_the_numpy_backend(tmp_path, params, k):
    docs, queries = _zipf_corpus()
    exhaustive = BM25(tokenizer=PLAIN, backend="numpy", **params).index(docs)
    memory = BM25(tokenizer=PLAIN, backend="numba", **params).index(docs)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    assert packed._packed is not None
    postings = [sum(memory._scores.indptr[t + 1] - memory._scores.indptr[t] for t in q)
                for q in memory._encode_queries(queries)]
    # both ways of taking the top k are exercised
    assert sum(4 * n >= len(docs) for n in postings) >= 20 and sum(0 < 4 * n < len(docs) for n in postings) >= 20
    where = {"year": {">=": 2010}}
    for options in ({}, {"where": where}):
        expected = exhaustive.search_batch(queries, k=k, **options)
        _same(memory.search_batch(queries, k=k, **options), expected)
        _same(packed.search_batch(queries, k=k, **options), expected)
    # the accumulator is left empty after every query: a batch answers as one query at a time
    _same([memory.search(q, k=k) for q in queries[:20]], memory.search_batch(queries[:20], k=k))


@pytest.mark.parametrize("width", [1, 7, 100, 512, 513, 1500])
def test_rows_in_any_order_are_ranked_by_value_then_position(width):
    """rank_rows (a heap sort up to NUMPY_SORT_WIDTH, numpy's sort and the tie pass above it)
    against lexsort, on rows full of ties, with rows partly filled and one empty."""
    from salience.search.topk import rank_rows

    rng = np.random.default_rng(width)
    n_rows = 40
    values = rng.integers(0, 6, size=(n_rows, width)).astype(float) * 0.5
    positions = np.stack([rng.permutation(5 * width)[:width] for _ in range(n_rows)]).astype(np.int64)
    counts = rng.integers(0, width + 1, size=n_rows).astype(np.int64)
    counts[0], counts[1] = 0, width
    expected = []
    for q in range(n_rows):
        n = counts[q]
        order = np.lexsort((positions[q, :n], -values[q, :n]))
        expected.append((positions[q, :n][order], values[q, :n][order]))
    ranked_positions, ranked_values, ranked_counts = rank_rows(positions.copy(), values.copy(), counts.copy())
    assert np.array_equal(ranked_counts, counts)
    for q, (want_positions, want_values) in enumerate(expected):
        assert np.array_equal(ranked_positions[q, :counts[q]], want_positions), q
        assert np.array_equal(ranked_values[q, :counts[q]], want_values), q

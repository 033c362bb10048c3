"""Hashed n-grams: a batch hashed in pieces equals the batch hashed at once."""

import numpy as np
import pytest

from salience.text import features
from salience.text.features import HashedNgrams


def _one_pass(f: HashedNgrams, texts: list[str]):
    """The batch without pieces: every order's n-grams straight from the token hashes."""
    hashes, doc = f.token_hashes(texts)
    buckets, docs = [], []
    for n in f.orders:
        if len(hashes) < n:
            continue
        combined = hashes[: len(hashes) - n + 1].copy()
        with np.errstate(over="ignore"):
            for offset in range(1, n):
                combined = features._mix(combined * features._PAIR + hashes[offset : len(hashes) - n + 1 + offset])
        same = doc[: len(doc) - n + 1] == doc[n - 1 :]
        buckets.append((((combined[same] >> np.uint64(32)) * np.uint64(f.buckets)) >> np.uint64(32)).view(np.int64))
        docs.append(doc[: len(doc) - n + 1][same])
    return np.concatenate(buckets), np.concatenate(docs)


@pytest.mark.parametrize("orders", [(1,), (1, 2), (1, 2, 3)])
def test_pieces_equal_one_pass(monkeypatch, orders):
    texts = ["The cat sat on the mat.", "", "a", "Ünïcode wörds, and more — words!", "x" * 40 + " tail",
             "one two", "Protein binds the receptor; the receptor binds protein."] * 5
    f = HashedNgrams(orders=orders, buckets=997)
    monkeypatch.setattr(features, "_CHUNK_CHARACTERS", 30)  # a piece every text or two
    batch = f.transform(texts)
    bucket, doc = _one_pass(f, texts)
    assert batch.bucket.tolist() == bucket.tolist()
    assert batch.doc.tolist() == doc.tolist()
    assert batch.tokens.tolist() == np.bincount(f.token_hashes(texts)[1], minlength=len(texts)).tolist()
    # order by order, each order in document order: the counts say how many each document has
    assert batch.order_counts.tolist() == [np.maximum(batch.tokens - n + 1, 0).tolist() for n in orders]
    bounds = np.cumsum([0] + batch.order_counts.sum(axis=1).tolist())
    for o in range(len(orders)):
        assert (np.diff(batch.doc[bounds[o] : bounds[o + 1]]) >= 0).all()


def test_chunks_by_length_keeps_every_text_once():
    texts = ["ab", "cdef", "", "g" * 10, "h"]
    chunks = features._chunks_by_length(texts, 5)
    assert chunks == [(0, 1), (1, 3), (3, 4), (4, 5)]  # a long text is a piece of its own
    assert features._chunks_by_length([], 5) == [(0, 0)]

"""Dynamic pruning (block-max MaxScore and block-max WAND) returns exactly the exhaustive search's top k and
scores: on every query of the shared sets, on synthetic corpora of several sizes and every
BM25 variant, with filters and deletions, packed on disk and in memory; an index without
block bounds is searched exhaustively and says so once; damaged bounds are refused by name."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from salience.exceptions import CorruptIndexError
from salience.search import BM25
from salience.search.block_bounds import BLOCK_SIZE, block_bound_files, block_frontiers, score_maxima
from salience.search.pruning import AUTO_MIN_POSTINGS, AUTO_MIN_SHARE, AUTO_STRATEGY, NoBlockBoundsWarning, pruned_top_k, queries_to_prune
from tests.conftest import data_path, read_jsonl

pytest.importorskip("numba")


def _same(index, queries, k, where=None):
    """Pruned searches (block-max MaxScore and block-max WAND) and the exhaustive one agree
    exactly on ``queries``; the work MaxScore did."""
    index.pruning = "off"
    expected = index.search_batch(queries, k=k, where=where)
    encoded = index._encode_queries(queries)
    for strategy in ("maxscore", "bmw"):
        index.pruning = strategy
        found = index.search_batch(queries, k=k, where=where)
        for query, a, b in zip(queries, expected, found):
            assert a.ids == b.ids, (strategy, query)
            assert np.array_equal(a.values, b.values), (strategy, query)
        assert queries_to_prune(index, encoded, k) == list(range(len(queries)))
    work = np.zeros(2, dtype=np.int64)
    pruned_top_k(index, encoded, k, index._filter_mask(where), work, strategy="maxscore")
    return expected, work


def _zipf_corpus(n, seed=0, vocabulary=3000):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocabulary + 1)
    p /= p.sum()
    words = np.array([f"w{i}" for i in range(vocabulary)])
    docs = [{"_id": f"d{i}", "text": " ".join(rng.choice(words, int(rng.integers(1, 120)), p=p)),
             "year": int(2000 + i % 4)} for i in range(n)]
    queries = [" ".join(rng.choice(words, int(rng.integers(1, 7)), p=p)) for _ in range(150)]
    return docs, queries + ["w0", "w0 w0 w1", "nowhere", "w5 nowhere"]


def test_a_block_frontier_keeps_the_postings_no_other_dominates():
    """By hand: (tf 3, len 4) dominates (3, 10) and (1, 5); (2, 10) and (1, 3) both stay;
    a term of 300 postings has three blocks, each ending at its own last document."""
    last, per_block, tf, length = block_frontiers([3, 2], [0, 1, 2, 1, 3], [1, 3, 3, 2, 1],
                                                  np.array([5, 10, 4, 3], dtype=np.float32))
    assert last.tolist() == [2, 3] and per_block.tolist() == [1, 2]
    assert tf.tolist() == [3, 2, 1] and length.tolist() == [4, 10, 3]
    docs = np.arange(0, 600, 2)
    last, per_block, _, _ = block_frontiers([300], docs, np.ones(300), np.ones(600, dtype=np.float32))
    assert last.tolist() == [docs[BLOCK_SIZE - 1], docs[2 * BLOCK_SIZE - 1], 598] and per_block.tolist() == [1, 1, 1]
    starts, last, maxima = score_maxima(np.array([0, 3, 3, 133]), np.r_[[4, 7, 9], np.arange(130)],
                                        np.r_[[1.0, 5.0, 2.0], np.arange(130) / 10].astype(np.float32))
    assert starts.tolist() == [0, 1, 1, 3] and last.tolist() == [9, 127, 129]
    assert maxima.tolist() == pytest.approx([5.0, 12.7, 12.9])


@pytest.mark.parametrize("name", ["scifact", "npl", "cranfield"])
def test_every_query_of_the_shared_sets_gets_the_exhaustive_top_k(name, tmp_path):
    root = data_path("search", name)
    queries = [q["text"] for q in read_jsonl(root / "queries.jsonl")]
    memory = BM25().fit(root)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    assert packed._packed is not None and packed._packed.bounds is not None
    for index in (packed, memory):
        for k in (10, 100):
            _, work = _same(index, queries, k)
    # pruning reads a part of the postings the exhaustive search reads
    index = packed
    encoded = index._encode_queries(queries)
    total = sum(int(index._packed.counts[q].sum()) for q in map(np.asarray, encoded) if len(q))
    for strategy in ("maxscore", "bmw"):
        work = np.zeros(2, dtype=np.int64)
        pruned_top_k(index, encoded, 10, None, work, strategy=strategy)
        assert work[0] < total, strategy


@pytest.mark.parametrize("variant", ["lucene", "robertson", "atire", "bm25l", "bm25+", "tfidf"])
@pytest.mark.parametrize("n", [300, 4000])
def test_synthetic_corpora_every_variant_filters_and_deletions(variant, n, tmp_path):
    docs, queries = _zipf_corpus(n, seed=n)
    memory = BM25(variant=variant, fields=("text",)).fit(docs)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    for index in (packed, memory):
        for k in (1, 10, 50):
            _same(index, queries, k)
        _same(index, queries, 10, where={"year": 2001})
        # a filter that excludes every document: nothing, as exhaustively
        results, _ = _same(index, queries, 10, where={"year": 1999})
        assert all(len(r) == 0 for r in results)
    # k above the live documents, and deletions (the index then answers from memory)
    memory.delete([f"d{i}" for i in range(0, n, 3)])
    results, _ = _same(memory, queries, n + 5)
    assert max(len(r) for r in results) <= memory.n_docs
    _same(memory, queries, 10)
    _same(memory, queries, 10, where={"year": 2002})
    packed.delete(["d1", "d2"])
    packed.commit()
    reopened = BM25.load(tmp_path / "ix")
    _same(reopened, queries, 10)


@pytest.mark.parametrize("variant", ["lucene", "bm25+", "tfidf"])
def test_pruned_and_exhaustive_searches_read_the_score_cache_to_the_same_top_k(variant, tmp_path, monkeypatch):
    # the longest lists' contributions precomputed (a budget for about half the postings: some
    # query terms cached, some not), read by both kernels' blocks and by exhaustive scoring
    from salience.search import score_cache

    monkeypatch.setattr(score_cache, "MIN_POSTINGS", 1)
    docs, queries = _zipf_corpus(4000, seed=5)
    memory = BM25(variant=variant, fields=("text",)).fit(docs)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    packed.score_cache_mb = 2.0 * int(packed._packed.counts.sum()) / 2**20
    for k in (1, 10, 50):
        expected, _ = _same(packed, queries, k)
        for a, b in zip(expected, memory.search_batch(queries, k=k)):
            assert a.ids == b.ids and np.array_equal(a.values, b.values)
    _same(packed, queries, 10, where={"year": 2001})
    cache = packed._score_cache()
    cached = cache.offsets >= 0
    assert cached.any() and (packed._packed.counts[~cached] > 0).any() and cache.nbytes <= packed.score_cache_mb * 2**20


def test_a_query_whose_terms_are_all_absent_finds_nothing():
    docs, _ = _zipf_corpus(200)
    index = BM25(fields=("text",)).fit(docs)
    results, _ = _same(index, ["nowhere elsewhere", ""], 10)
    assert [len(r) for r in results] == [0, 0]


def _strip_block_bounds(folder: Path) -> None:
    """The folder as format 3 wrote it: no block-bound files, the manifest re-signed."""
    from salience.search.store import _manifest_digest

    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for segment in manifest["segments"]:
        for name in block_bound_files():
            (folder / segment["name"] / name).unlink()
            segment["files"].pop(name)
    manifest["format_version"] = 3
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    manifest_path.write_text(json.dumps({**body, "checksum": _manifest_digest(body)}))


def test_an_index_written_before_block_bounds_is_searched_exhaustively_and_says_so_once(tmp_path):
    docs, queries = _zipf_corpus(1000)
    expected = BM25(fields=("text",)).fit(docs)
    expected.save(tmp_path / "ix")
    _strip_block_bounds(tmp_path / "ix")
    old = BM25.load(tmp_path / "ix")
    assert old._packed.bounds is None
    old.pruning = "maxscore"
    with pytest.warns(NoBlockBoundsWarning, match="without block bounds"):
        first = old.search_batch(queries, k=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old.search_batch(queries, k=10)  # said once
    expected.pruning = "off"
    assert [r.ids for r in first] == [r.ids for r in expected.search_batch(queries, k=10)]
    # saved again, it gains its bounds
    old.save(tmp_path / "again")
    assert BM25.load(tmp_path / "again")._packed.bounds is not None


def test_a_damaged_block_bound_file_is_refused_by_name(tmp_path):
    docs, _ = _zipf_corpus(500)
    BM25(fields=("text",)).fit(docs).save(tmp_path / "ix")
    [segment] = [p for p in (tmp_path / "ix").iterdir() if p.name.startswith("seg-")]
    target = segment / "postings_block_last.npy"
    np.save(target, np.load(target)[:-1])
    with pytest.raises(CorruptIndexError, match="postings_block_last.npy"):
        BM25.load(tmp_path / "ix")  # its size and CRC32 no longer match the manifest
    with pytest.raises(CorruptIndexError, match="postings_block_last.npy"):
        BM25.load(tmp_path / "ix", verify=False)  # its length no longer fits the postings
    target.write_bytes(b"not an array")
    with pytest.raises(CorruptIndexError, match="postings_block_last.npy"):
        BM25.load(tmp_path / "ix", verify=False)


def test_pruning_is_a_parameter_the_registry_checks():
    from salience.core.base import create
    from salience.exceptions import InvalidParameterError

    assert create("search", "lucene", pruning="off").pruning == "off"
    assert create("search", "lucene", pruning="bmw").pruning == "bmw"
    with pytest.raises(InvalidParameterError, match="pruning"):
        BM25(pruning="wand")
    docs, queries = _zipf_corpus(50)
    index = BM25(fields=("text",)).fit(docs)
    with pytest.raises(InvalidParameterError, match="'maxscore' and 'bmw'"):
        pruned_top_k(index, index._encode_queries(queries[:2]), 10, None, strategy="wand")


def test_auto_prunes_the_queries_of_long_posting_lists_only(monkeypatch):
    """Under pruning="auto" a batch is split: queries of at most 5 terms one of which holds at
    least AUTO_MIN_POSTINGS postings and AUTO_MIN_SHARE of the query's are pruned, the others
    scored exhaustively, every result in its place."""
    import salience.search.pruning as pruning

    docs, queries = _zipf_corpus(3000, seed=9)
    index = BM25(fields=("text",)).fit(docs)
    encoded = index._encode_queries(queries)
    counts = np.diff(index._scores_matrix.indptr)
    assert queries_to_prune(index, encoded, 10) == []  # a small collection: nothing is long enough
    monkeypatch.setattr(pruning, "AUTO_MIN_POSTINGS", 500)
    monkeypatch.setattr(pruning, "AUTO_MIN_SHARE", 0.6)
    chosen = queries_to_prune(index, encoded, 10)
    assert chosen == [i for i, q in enumerate(encoded)
                      if 0 < len(q) <= 5 and counts[q].max() >= 500 and counts[q].max() >= 0.6 * counts[q].sum()]
    assert 0 < len(chosen) < len(queries)
    assert queries_to_prune(index, encoded, 101) == []  # a deep cut
    mixed = index.search_batch(queries, k=10)
    index.pruning = "off"
    assert [(r.ids, r.values.tolist()) for r in mixed] == [(r.ids, r.values.tolist()) for r in index.search_batch(queries, k=10)]
    assert (AUTO_STRATEGY, AUTO_MIN_POSTINGS, AUTO_MIN_SHARE) == ("bmw", 1 << 14, 0.95)  # chosen on dev

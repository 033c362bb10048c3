import threading

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.search import BM25, score_cache

pytest.importorskip("numba")  # the packed kernel that reads the cache

DOCS = [
    {"_id": f"d{i}", "title": f"title {i % 7}", "text": " ".join(f"w{(i * j) % 37}" for j in range(1, 3 + i % 13)),
     "year": 1990 + i % 30}
    for i in range(400)
]
QUERIES = ["w1 w2", "w3 title", "w5 w5 w30", "title 3", "w7", "nothing here", "w36 w2 w2 w11", "w1 w2 w3 w4 w5 w6 title"]
VARIANTS = [{}, {"variant": "bm25+", "b": 0.3}, {"variant": "bm25l", "field_weights": {"title": 2.5}},
            {"variant": "tfidf"}, {"variant": "atire", "k1": 0.9}, {"variant": "robertson"}]


@pytest.fixture
def small_lists_cached(monkeypatch):
    monkeypatch.setattr(score_cache, "MIN_POSTINGS", 1)  # the test collection's lists are short


def _saved(tmp_path, params: dict, docs=DOCS) -> tuple[BM25, BM25]:
    memory = BM25(backend="numba", **params).index(docs)
    memory.save(tmp_path / "ix")
    return memory, BM25.load(tmp_path / "ix")


def _assert_same(a: BM25, b: BM25, k: int = 15, where=None):
    for x, y in zip(a.search_batch(QUERIES, k=k, where=where), b.search_batch(QUERIES, k=k, where=where)):
        assert x.ids == y.ids
        np.testing.assert_array_equal(x.values, y.values)


@pytest.mark.parametrize("params", VARIANTS)
def test_cached_contributions_are_the_scores_the_index_in_memory_holds(tmp_path, small_lists_cached, params):
    memory, packed = _saved(tmp_path, params)
    _assert_same(packed, memory)
    _assert_same(packed, memory, k=400, where={"year": {"<": 2000}})
    cache = packed._score_cache()
    filled = np.flatnonzero(cache.offsets >= 0)
    assert len(filled) > 10 and cache.nbytes == 4 * int(packed._packed.counts[filled].sum())
    # bit for bit the float32 score the in-memory index precomputes for each posting
    scores = memory._scores
    for term in filled:
        start, count = cache.offsets[term], packed._packed.counts[term]
        np.testing.assert_array_equal(cache.pool[start:start + count], scores[term].data)
    # and the cache changes nothing against the same folder searched without it
    uncached = BM25.load(tmp_path / "ix")
    uncached.score_cache_mb = 0
    assert uncached._score_cache() is None
    _assert_same(packed, uncached, k=400)


@pytest.mark.parametrize("chunk", [1, 7, 64, 399, 1 << 15])
def test_cached_terms_give_the_same_top_k_whatever_documents_are_scored_at_a_time(tmp_path, monkeypatch,
                                                                                  small_lists_cached, chunk):
    # a chunk boundary inside a cached term's gaps, touched lists that overflow, a query mixing
    # cached and uncached terms (the budget below holds the longest lists only)
    from salience.search import topk

    memory, packed = _saved(tmp_path, {})
    counts = packed._packed.counts
    packed.score_cache_mb = 4 * float(np.sort(counts)[-5:].sum()) / 2**20
    monkeypatch.setattr(topk.top_k_packed_numba, "__defaults__", (chunk, True, None))  # (chunk, ordered, cache)
    _assert_same(packed, memory, k=400, where={"year": {"<": 2000}})
    cache = packed._score_cache()
    assert 0 < np.count_nonzero(cache.offsets >= 0) <= 5


def test_the_budget_holds_the_longest_lists_that_fit_and_never_a_tie_split(small_lists_cached):
    counts = np.array([50, 10, 40, 40, 5, 0, 30])
    shortest = score_cache.ScoreCache._shortest_cached
    assert shortest(counts, 50) == 50  # the longest alone
    assert shortest(counts, 89) == 50  # 50 + 40 would fit, 50 + 40 + 40 not: both 40s left out
    assert shortest(counts, 130) == 40
    assert shortest(counts, 159) == 40  # 50 + 40 + 40 + 30 = 160
    assert shortest(counts, 160) == 30
    assert shortest(counts, 170) == 10
    assert shortest(counts, 49) == 51  # nothing fits
    assert shortest(counts, 10**9) == 5  # every list (of at least MIN_POSTINGS)
    assert shortest(np.zeros(3, dtype=np.int64), 100) == 1


def test_only_lists_of_min_postings_are_cached_and_the_pool_stays_within_budget(tmp_path):
    n = score_cache.MIN_POSTINGS + 10
    docs = [{"_id": f"d{i}", "text": f"common w{i % 3} " + ("half " if i % 2 else "")} for i in range(n)]
    memory, packed = _saved(tmp_path, {"fields": ("text",)}, docs)
    counts = packed._packed.counts
    packed.score_cache_mb = 4.0 * n / 2**20  # room for one list of every document
    for query in ("common half w1", "half", "w2 common"):
        x, y = packed.search(query, k=20), memory.search(query, k=20)
        assert x.ids == y.ids
        np.testing.assert_array_equal(x.values, y.values)
    cache = packed._score_cache()
    cached = np.flatnonzero(cache.offsets >= 0).tolist()
    assert [packed._encoder.terms[t] for t in cached] == ["common"]  # "half" (n / 2) does not fit beside it
    assert len(cache.pool) * 4 <= packed.score_cache_mb * 2**20
    assert counts[packed._encoder.terms.index("w1")] < score_cache.MIN_POSTINGS


def test_new_statistics_or_a_new_budget_start_a_new_cache(tmp_path, small_lists_cached):
    memory, packed = _saved(tmp_path, {})
    packed.search_batch(QUERIES)
    first = packed._score_cache()
    assert first is packed._score_cache()  # kept while nothing changes
    # a shard scored with a whole collection's statistics: other idf, other contributions
    df = memory.collection_statistics()[1] * 3
    for index in (memory, packed):
        index.use_collection_statistics(df, 1200, 1200 * 9.0)
    _assert_same(packed, memory)
    assert packed._score_cache() is not first
    packed.score_cache_mb = 1.0
    assert packed._score_cache().budget_bytes == 2**20
    for index in (memory, packed):
        index.use_collection_statistics(None)
    _assert_same(packed, memory)


def test_threads_filling_the_cache_together_get_the_same_answers(tmp_path, small_lists_cached):
    memory, packed = _saved(tmp_path, {})
    expected = [(r.ids, r.values.tolist()) for r in memory.search_batch(QUERIES, k=20)]
    results, errors = [], []

    def search():
        try:
            results.append([(r.ids, r.values.tolist()) for r in packed.search_batch(QUERIES, k=20)])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and all(r == expected for r in results) and len(results) == 4


def test_a_negative_budget_is_refused_by_name():
    with pytest.raises(InvalidParameterError, match="score_cache_mb"):
        BM25(score_cache_mb=-1)


def test_shards_held_in_one_process_share_one_budget_and_score_with_the_collection_statistics(tmp_path,
                                                                                             small_lists_cached):
    from salience.search.shards import ShardedIndex

    docs = [dict(d) for d in DOCS]
    ShardedIndex.build(docs, n_shards=4, out=tmp_path / "sharded", n_jobs=1)
    loaded = ShardedIndex.load(tmp_path / "sharded")
    single = BM25(backend="numba").index(docs)
    for a, b in zip(single.search_batch(QUERIES, k=10), loaded.search_batch(QUERIES, k=10)):
        np.testing.assert_allclose(a.values, b.values, rtol=1e-6)
    budgets = []
    for shard in loaded._shards:
        cache = shard.index._score_cache()
        assert cache is not None and cache.nbytes > 0  # filled with the shared statistics' contributions
        assert cache.serves(shard.index._packed, shard.index._length_norms(), shard.index._idf, "lucene", 1.5, 0.5,
                            cache.budget_bytes)
        budgets.append(cache.budget_bytes)
    assert budgets == [BM25().score_cache_mb * 2**20 / 4] * 4
    # the share is the process's, not a parameter: a commit writes the shards as they were built
    loaded.add([{"_id": "new", "text": "w1 w2"}]).commit()
    reloaded = ShardedIndex.load(tmp_path / "sharded")
    assert all(s.index.score_cache_mb == BM25().score_cache_mb for s in reloaded._shards)


def test_an_index_pickles_without_its_cache_and_fills_a_new_one(tmp_path, small_lists_cached):
    import pickle

    memory, packed = _saved(tmp_path, {})
    packed.search_batch(QUERIES)
    assert packed._score_cache().nbytes > 0
    again = pickle.loads(pickle.dumps(packed))
    assert "_cache" not in again.__dict__
    _assert_same(again, memory)
    assert again._score_cache().nbytes > 0

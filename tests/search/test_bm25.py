import math

import numpy as np
import pytest

from salience import IdMismatchError, InvalidParameterError, NotFittedError, Scores
from salience.search import BM25, VARIANTS
from salience.text import Tokenizer

PLAIN = Tokenizer(stopwords=None, stemmer=None)
DOCS = [{"_id": "d0", "text": "cat sat"}, {"_id": "d1", "text": "dog"}, {"_id": "d2", "text": "cat cat dog"}]


def test_lucene_scores_worked_by_hand():
    # N = 3, lengths 2, 1, 3 -> average 2; df(cat) = 2, df(sat) = 1
    index = BM25(tokenizer=PLAIN).index(DOCS)
    k1, b = 1.5, 0.75
    idf_cat = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_sat = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    d0_cat = idf_cat * 1 / (1 + k1 * (1 - b + b * 2 / 2))
    d2_cat = idf_cat * 2 / (2 + k1 * (1 - b + b * 3 / 2))
    d0_sat = idf_sat * 1 / (1 + k1 * (1 - b + b * 2 / 2))
    result = index.search("cat", k=10)
    assert result.ids == ["d2", "d0"]
    assert result.values == pytest.approx([d2_cat, d0_cat], rel=1e-6)
    assert index.search("sat cat", k=1).to_dict() == pytest.approx({"d0": d0_cat + d0_sat}, rel=1e-6)
    assert index.get_scores("cat cat").values == pytest.approx([2 * d0_cat, 0.0, 2 * d2_cat], rel=1e-6)


def test_tfidf_classic_by_hand():
    index = BM25(variant="tfidf", tokenizer=PLAIN).index(DOCS)
    idf_cat = 1 + math.log(3 / (2 + 1))
    expected = [idf_cat**2 * math.sqrt(1) / math.sqrt(2), 0.0, idf_cat**2 * math.sqrt(2) / math.sqrt(3)]
    assert index.get_scores("cat").values == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_explain_sums_to_score(variant):
    index = BM25(variant=variant, tokenizer=PLAIN).index(DOCS)
    for doc_id in ("d0", "d2"):
        explanation = index.explain("cat dog cat unknown", doc_id)
        score = index.get_scores("cat dog cat unknown").values[index.ids.index(doc_id)]
        assert explanation.score == pytest.approx(score, rel=1e-6)
        assert sum(t.contribution for t in explanation.terms) == pytest.approx(score, rel=1e-6)
    cat = next(t for t in index.explain("cat dog cat", "d2").terms if t.term == "cat")
    assert cat.query_weight == 2 and cat.tf == 2


def test_field_weights_equal_duplicated_text():
    weighted = BM25(tokenizer=PLAIN, field_weights={"title": 2}).index(
        [{"_id": "a", "title": "red fox", "text": "jumps"}, {"_id": "b", "title": "dog", "text": "red red"}]
    )
    duplicated = BM25(tokenizer=PLAIN).index(
        [{"_id": "a", "text": "red fox red fox jumps"}, {"_id": "b", "text": "dog dog red red"}]
    )
    for q in ("red", "fox dog", "jumps red"):
        assert weighted.get_scores(q).values == pytest.approx(duplicated.get_scores(q).values, rel=1e-6)


def test_batch_equals_single_and_threads():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(40)]
    docs = [" ".join(rng.choice(vocab, size=rng.integers(1, 30))) for _ in range(300)]
    queries = [" ".join(rng.choice(vocab, size=3)) for _ in range(60)]
    index = BM25(tokenizer=PLAIN).index(docs)
    single = [index.search(q, k=7) for q in queries]
    assert index.search_batch(queries, k=7) == single
    assert index.search_batch(queries, k=7, n_jobs=2) == single


@pytest.mark.parametrize("k", [1, 3, 10, 500])
def test_backends_identical_including_ties(k):
    pytest.importorskip("numba")
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(["a1", "b2", "c3", "d4", "e5"], size=rng.integers(1, 4))) for _ in range(400)]
    queries = ["a1", "b2 c3", "a1 a1 e5", "zz", "d4 e5 b2"]
    fast = BM25(tokenizer=PLAIN, backend="numba").index(docs).search_batch(queries, k=k)
    slow = BM25(tokenizer=PLAIN, backend="numpy").index(docs).search_batch(queries, k=k)
    assert fast == slow
    for scores in slow:  # ties (many here) are broken by document position
        order = sorted(range(len(scores)), key=lambda i: (-scores.values[i], int(scores.ids[i])))
        assert order == list(range(len(scores)))


@pytest.mark.parametrize("k", [1, 10, 50])
def test_backends_identical_when_the_scan_starts_from_a_floor(k):
    """Long queries over a Zipf vocabulary take the kernel's scan of every document, short ones of
    rarer words revisit their postings; both first take the k-th best of the query's shortest
    posting list as a floor. With and without a filter (which may hide that list's best
    documents) the numba top k is numpy's."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    vocab = np.array([f"w{i}" for i in range(300)])
    weights = 1.0 / np.arange(1, 301)
    weights /= weights.sum()
    docs = [{"_id": str(i), "text": " ".join(rng.choice(vocab, size=rng.integers(3, 40), p=weights)), "part": i % 3}
            for i in range(1500)]
    queries = [" ".join(rng.choice(vocab, size=rng.integers(4, 12), p=weights)) for _ in range(40)]
    queries += [" ".join(rng.choice(vocab[20:], size=3)) for _ in range(40)]  # rarer words: their postings revisited
    fast = BM25(tokenizer=PLAIN, backend="numba").index(docs)
    slow = BM25(tokenizer=PLAIN, backend="numpy").index(docs)
    for where in (None, {"part": {"!=": 0}}):
        assert fast.search_batch(queries, k=k, where=where) == slow.search_batch(queries, k=k, where=where)


@pytest.mark.parametrize("variant", ["bm25l", "bm25+"])
def test_nonoccurrence_variants_add_absent_terms(variant):
    index = BM25(variant=variant, tokenizer=PLAIN).index(DOCS)
    full = index.get_scores("cat sat").values
    top = index.search("cat sat", k=3)
    # d1 matches no query term: not returned, although these variants give it a score
    assert top.ids == ["d0", "d2"] and full[1] > 0
    assert top.values == pytest.approx([full[0], full[2]], rel=1e-6)


def test_filters_apply_before_top_k():
    docs = [{"_id": str(i), "text": "apple " * (i + 1), "year": 2000 + i, "lang": "en" if i % 2 else "fr"} for i in range(10)]
    index = BM25(tokenizer=PLAIN).index(docs)
    assert index.search("apple", k=2, where={"year": {">=": 2008}}).ids == ["9", "8"]
    assert index.search("apple", k=3, where={"year": {"<": 2005}, "lang": "en"}).ids == ["3", "1"]
    assert index.search("apple", k=9, where={"lang": {"in": ["fr"]}, "year": {"$gte": 2006}}).ids == ["8", "6"]
    assert index.search("apple", where={"missing": {"exists": True}}).ids == []
    assert len(index.search("apple", where={"year": {"!=": 2003}})) == 9
    with pytest.raises(InvalidParameterError, match="operator"):
        index.search("apple", where={"year": {"~": 3}})


def test_not_indexed_and_bad_params():
    with pytest.raises(NotFittedError):
        BM25().search("x")
    with pytest.raises(InvalidParameterError, match="valid values are: atire, bm25\\+, bm25l, lucene, robertson, tfidf"):
        BM25(variant="okapi")
    with pytest.raises(InvalidParameterError, match="b must be"):
        BM25(b=1.5)
    with pytest.raises(InvalidParameterError, match="k1"):
        BM25(k1=float("nan"))
    with pytest.raises(InvalidParameterError, match="field_weights"):
        BM25(field_weights={"body": 2})
    with pytest.raises(IdMismatchError, match="unknown document id 'nope'"):
        BM25(tokenizer=PLAIN).index(DOCS).explain("cat", "nope")


def test_search_returns_scores_equal_to_the_full_scores():
    index = BM25(tokenizer=PLAIN).index(DOCS)
    found = index.search("cat")
    full = index.get_scores("cat")
    # only documents holding the term, best first (d2 has cat twice), each with its exact score
    assert isinstance(found, Scores) and found.ids == ["d2", "d0"]
    assert found.values.tolist() == [full["d2"], full["d0"]] and full["d1"] == 0.0


def _corpus(n=400, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(300)] + ["heat", "flow", "layer", "boundary", "the", "of"]
    return [{"id": f"d{i}", "title": " ".join(rng.choice(words, 3)), "text": " ".join(rng.choice(words, rng.integers(1, 40)))}
            for i in range(n)]


def test_parallel_indexing_gives_the_same_index():
    docs = _corpus()
    queries = ["heat flow", "w1 w2 w3 layer", "boundary of w77"]
    single = BM25().index(docs)
    expected = single.search_batch(queries, k=20)
    processes = BM25().index(docs, n_jobs=2)
    assert processes.n_docs == single.n_docs and sorted(processes.vocabulary) == sorted(single.vocabulary)
    for a, b in zip(processes.search_batch(queries, k=20), expected):
        assert a.ids == b.ids and np.allclose(a.values, b.values, rtol=1e-6)
    grown = BM25().index(docs[:150]).add(docs[150:], n_jobs=2)  # a segment added in parallel
    for a, b in zip(grown.search_batch(queries, k=20), expected):
        assert a.ids == b.ids and np.allclose(a.values, b.values, rtol=1e-6)
    with pytest.raises(InvalidParameterError, match="executor"):
        BM25().index(docs, n_jobs=2, executor="spark")


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time under pytest -n
def test_ray_indexing_matches_local():
    ray = pytest.importorskip("ray", reason="the Ray executor needs ray: pip install 'salience[ray]'")
    docs = _corpus(200, seed=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = BM25().index(docs, n_jobs=2, executor="ray")
    finally:
        ray.shutdown()
    local = BM25().index(docs)
    for a, b in zip(remote.search_batch(["heat flow", "w5 of"], k=10), local.search_batch(["heat flow", "w5 of"], k=10)):
        assert a.ids == b.ids and np.allclose(a.values, b.values, rtol=1e-6)

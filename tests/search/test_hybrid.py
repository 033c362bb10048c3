import numpy as np
import pytest

from salience import Qrels, fuse
from salience.exceptions import InvalidParameterError
from salience.search import BM25, Dense, Hybrid
from tests.search.test_dense import DOCS, bag


@pytest.fixture(scope="module")
def indexes():
    return BM25().index(DOCS), Dense(encoder=bag, encoder_name="bag32").index(DOCS)


def test_hybrid_equals_the_core_fusion_of_both_rankings(indexes):
    bm25, dense = indexes
    query = "sensor routing protocols"
    lexical, semantic = bm25.search(query, k=100), dense.search(query, k=100)
    rrf = Hybrid(bm25, dense, method="rrf").search(query, k=3)
    expected = fuse([{"q": lexical.to_dict()}, {"q": semantic.to_dict()}], method="rrf", missing_subjects="empty")["q"]
    assert rrf.ids == expected.ranked_ids()[:3]
    wsum = Hybrid(bm25, dense, weight=0.3).search(query, k=4)
    expected = fuse([{"q": lexical.to_dict()}, {"q": semantic.to_dict()}], method="wsum", normalize="minmax",
                    weights=[0.7, 0.3], missing_subjects="empty")["q"]
    assert wsum.ids == expected.ranked_ids()[:4] and np.allclose(wsum.values, expected.sorted().values[:4])
    # weight 0 is BM25's order, weight 1 the dense order (over the documents both returned)
    assert Hybrid(bm25, dense, weight=0.0).search(query, k=2).ids == lexical.ids[:2]
    assert Hybrid(bm25, dense, weight=1.0).search(query, k=2).ids == semantic.ids[:2]
    assert Hybrid(bm25, dense).search(query, k=2, where={"year": {">": 2005}}).ids[0] == "d"


def test_tune_chooses_the_weight_that_scores_best(indexes):
    bm25, dense = indexes
    queries = {"q1": "sensor routing", "q2": "protein cells", "q3": "prices"}
    qrels = Qrels({"q1": {"d": 1}, "q2": {"b": 1}, "q3": {"c": 1}})
    hybrid = Hybrid(bm25, dense).tune(queries, qrels, weights=[0.0, 0.5, 1.0])
    scores = hybrid.tuning_["scores"]
    assert set(scores) == {0.0, 0.5, 1.0} and hybrid.weight == max(scores, key=lambda w: (scores[w], -abs(w - 0.5)))


def test_bad_input(indexes):
    bm25, dense = indexes
    with pytest.raises(InvalidParameterError, match="weight"):
        Hybrid(bm25, dense, weight=1.5)
    with pytest.raises(InvalidParameterError, match="normalize"):
        Hybrid(bm25, dense, normalize=None)
    with pytest.raises(InvalidParameterError, match="method"):
        Hybrid(bm25, dense, method="borda")
    with pytest.raises(InvalidParameterError, match="wsum"):
        Hybrid(bm25, dense, method="rrf").tune({"q": "x"}, Qrels({"q": {"a": 1}}))
    with pytest.raises(InvalidParameterError, match="empty"):
        Hybrid(bm25, dense).search("  ")

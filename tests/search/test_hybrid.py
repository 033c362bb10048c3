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
    runs = [{"q": lexical.to_dict()}, {"q": semantic.to_dict()}]
    rrf = Hybrid(bm25, dense, fusion="rrf").search(query, k=3)
    expected = fuse(runs, method="rrf", missing_subjects="empty")["q"]
    assert rrf.ids == expected.ranked_ids()[:3]
    assert np.allclose(rrf.values, 0.5 * expected.sorted().values[:3])  # each run weighted a half
    # any fusion method, by name or built with its own parameters; the runs weighted 1 - weight and weight
    mnz = Hybrid(bm25, dense, fusion="combmnz", normalize="zscore", weight=0.8).search(query, k=5)
    expected = fuse(runs, method="combmnz", normalize="zscore", weights=[0.2, 0.8], missing_subjects="empty")["q"]
    assert mnz.ids == expected.ranked_ids()[:5] and np.allclose(mnz.values, expected.sorted().values[:5])
    from salience.core.base import create

    built = create("fusion", "rrf", rrf_k=1)
    assert Hybrid(bm25, dense, fusion=built).search(query, k=3).ids == \
        fuse(runs, method="rrf", rrf_k=1, missing_subjects="empty")["q"].ranked_ids()[:3]
    assert built.weights is None  # the Fuser given is not changed: a copy is weighted
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
    assert Hybrid(bm25, dense, fusion="rrf").tune(queries, qrels, weights=[0.0, 1.0]).weight in (0.0, 1.0)


def test_bad_input(indexes):
    bm25, dense = indexes
    with pytest.raises(InvalidParameterError, match="weight"):
        Hybrid(bm25, dense, weight=1.5)
    with pytest.raises(InvalidParameterError, match="normalize"):
        Hybrid(bm25, dense, normalize="softmax")
    with pytest.raises(InvalidParameterError, match="combsun.*combsum"):
        Hybrid(bm25, dense, fusion="combsun")
    with pytest.raises(InvalidParameterError, match="fusion"):
        Hybrid(bm25, dense, fusion=3)
    with pytest.raises(InvalidParameterError, match="empty"):
        Hybrid(bm25, dense).search("  ")


@pytest.mark.parametrize("fusion, normalize", [("wsum", "minmax"), ("wsum", "zscore"), ("wsum", None),
                                               ("combmnz", "minmax"), ("combmax", "sum"), ("combmin", "rank")])
def test_fusing_by_position_gives_the_general_fusion_exactly(fusion, normalize):
    """The hybrid fuses on the documents' positions in the lexical index (integers, not id
    strings); on rankings with ties, overlaps, disjoint parts and empty sides it returns the
    ids, order and float values of the general fusion bit for bit."""
    from salience.core.base import create
    from salience.core.scores import Scores
    from salience.search.hybrid import _fuse_by_position

    rng = np.random.default_rng(5)
    docs = [{"_id": f"doc-{i}", "text": f"w{i % 7} w{i % 11}"} for i in range(300)]
    index = BM25().index(docs)
    ids = [d["_id"] for d in docs]
    fuser = create("fusion", fusion, weights=[0.35, 0.65], missing_subjects="empty",
                   **({"normalize": normalize} if normalize else {}))
    slots = np.full(index.position_count(), -1, dtype=np.int64)
    for trial in range(60):
        sides = []
        for _ in range(2):
            n = [0, 1, 5, 40, 120][rng.integers(5)]
            chosen = rng.choice(len(ids), size=n, replace=False)
            values = np.sort(rng.integers(0, 6, size=n).astype(float) * 0.25)[::-1]  # coarse: many ties
            sides.append(Scores(values, ids=[ids[i] for i in chosen]))
        k = int(rng.integers(1, 200))
        fast = _fuse_by_position(index, sides[0], sides[1], k, fuser)
        if normalize == "rank":  # needs the runs' ranks: fused the general way
            assert fast is None
            continue
        general = fuser.score(sides)
        general = general.sorted().top_k(k) if len(general) else general
        assert fast.ids == general.ids, trial
        assert fast.values.tobytes() == general.values.tobytes(), trial
        # the table a batch shares: the same answer, and the table left empty for the next query
        with_slots = _fuse_by_position(index, sides[0], sides[1], k, fuser, slots)
        assert with_slots.ids == general.ids and with_slots.values.tobytes() == general.values.tobytes(), trial
        assert (slots == -1).all(), trial
    # an id the index does not hold, or a rank fusion: the general way (None here)
    assert _fuse_by_position(index, Scores([1.0], ids=["elsewhere"]), Scores([], ids=[]), 5, fuser) is None
    assert _fuse_by_position(index, Scores([1.0], ids=["doc-1"]), Scores([], ids=[]), 5, create("fusion", "rrf")) is None


@pytest.mark.parametrize("fusion, normalize", [("wsum", "minmax"), ("wsum", "zscore"), ("combmnz", "sum"),
                                               ("wsum", "rank"), ("rrf", None)])
def test_a_batch_fused_as_rows_of_positions_gives_the_fused_rankings_exactly(fusion, normalize, monkeypatch):
    """search_batch fuses both sides' rows of index positions (ids named for the top k only):
    the same ids and float values as fusing each query's two rankings, with a filter, with a
    document deleted from one side, and with one only the dense side holds. The dense products'
    top k are shared out to two threads 7 rows at a time (the last chunk shorter)."""
    from salience.search import hybrid as hybrid_module

    monkeypatch.setattr(hybrid_module, "_SHARED_ROWS", 7)
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    docs = [{"_id": f"doc-{i}", "text": " ".join(rng.choice(words, 8)), "year": 1990 + i % 20} for i in range(400)]
    queries = [" ".join(rng.choice(words, 3)) for _ in range(30)] + ["nothing known"]
    bm25 = BM25().index(docs)
    dense = Dense(encoder=bag, encoder_name="bag32").index(docs)
    options = {"normalize": normalize} if normalize else {"normalize": None}
    for where in (None, {"year": {">": 2000}}):
        hybrid = Hybrid(bm25, dense, fusion=fusion, weight=0.3, depth=50, **options)
        if normalize != "rank" and fusion != "rrf":  # score fusions on score arrays: the rows path applies
            assert hybrid._fuse_rows(queries, 20, where, hybrid._fuser(0.3), None) is not None
        fused = hybrid.search_batch(queries, k=20, where=where)
        fuser = hybrid._fuser(0.3)
        # each side's batch (a batch's dense products may round apart from one query's)
        batches = zip(bm25.search_batch(queries, k=50, where=where), dense.search_batch(queries, k=50, where=where))
        for query, found, sides in zip(queries, fused, batches):
            general = fuser.score(sides) if len(sides[0]) + len(sides[1]) else sides[0]
            general = general.sorted().top_k(20) if len(general) else general
            assert found.ids == general.ids, query
            assert found.values.tobytes() == general.values.tobytes(), query
    # one index lacks a document the other holds: that query's documents fused by id
    dense_more = Dense(encoder=bag, encoder_name="bag32").index(docs + [{"_id": "extra", "text": "w1 w2 w3"}])
    hybrid = Hybrid(bm25, dense_more, fusion=fusion, weight=0.3, depth=50, **options)
    for query, found in zip(["w1 w2 w3"], hybrid.search_batch(["w1 w2 w3"], k=10)):
        sides = [bm25.search(query, k=50), dense_more.search(query, k=50)]
        general = hybrid._fuser(0.3).score(sides).sorted().top_k(10)
        assert found.ids == general.ids and found.values.tobytes() == general.values.tobytes()
        assert "extra" in sides[1].ids  # the dense side returned it: the fallback ran
    # documents added to both after a search: the position map follows them
    hybrid = Hybrid(bm25, dense, fusion=fusion, weight=0.3, depth=50, **options)
    hybrid.search_batch(queries[:3], k=10)
    new = [{"_id": "late", "text": "w1 w2 w3 w4"}]
    bm25.add(new)
    dense.add(new)
    found = hybrid.search_batch(["w1 w2 w3 w4"], k=10)[0]
    sides = [bm25.search_batch(["w1 w2 w3 w4"], k=50)[0], dense.search_batch(["w1 w2 w3 w4"], k=50)[0]]
    general = hybrid._fuser(0.3).score(sides).sorted().top_k(10)
    assert found.ids == general.ids and found.values.tobytes() == general.values.tobytes()
    assert "late" in general.ids


@pytest.mark.parametrize("fusion, normalize", [("wsum", "minmax"), ("wsum", None), ("combmnz", "minmax"),
                                               ("combmax", "max"), ("combmin", "minmax")])
def test_ties_fused_from_rows_in_any_order_fall_as_the_general_fusion_orders_them(fusion, normalize):
    """The compiled fusion takes each side's top k in heap order and ranks the fused scores
    with numpy's (unstable) sort, then orders ties itself: with hundreds of identical
    documents (equal scores on both sides, long runs of ties, documents one side lacks) the
    ids and values are the general fusion's bit for bit."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(12)]
    docs = ([{"_id": f"same-{i}", "text": "alpha beta"} for i in range(90)]
            + [{"_id": f"near-{i}", "text": "alpha gamma"} for i in range(50)]
            + [{"_id": f"rand-{i}", "text": " ".join(rng.choice(words, 4)) + " alpha"} for i in range(120)]
            + [{"_id": f"other-{i}", "text": " ".join(rng.choice(words, 5))} for i in range(100)])
    rng.shuffle(docs)
    queries = ["alpha", "alpha beta", "beta gamma", "w1 w2 alpha", "w3", "gamma delta"]
    bm25 = BM25().index(docs)
    dense = Dense(encoder=bag, encoder_name="bag32").index(docs)
    for depth, k in ((300, 250), (40, 30), (400, 400)):
        hybrid = Hybrid(bm25, dense, fusion=fusion, normalize=normalize, weight=0.4, depth=depth)
        fused = hybrid.search_batch(queries, k=k)
        fuser = hybrid._fuser(0.4)
        batches = zip(bm25.search_batch(queries, k=depth), dense.search_batch(queries, k=depth))
        for query, found, sides in zip(queries, fused, batches):
            general = fuser.score(sides)
            general = general.sorted().top_k(k)
            assert found.ids == general.ids, (query, depth)
            assert found.values.tobytes() == general.values.tobytes(), (query, depth)


def test_a_hybrid_searched_from_the_shared_pool_answers_on_that_thread(indexes):
    from salience.parallel.threads import beside

    bm25, dense = indexes
    hybrid = Hybrid(bm25, dense)
    queries = ["sensor routing protocols", "protein cells"]
    expected = hybrid.search_batch(queries, k=3)
    found = beside(hybrid.search_batch, queries, k=3).result(timeout=30)
    assert [s.ids for s in found] == [s.ids for s in expected]
    assert all(a.values.tobytes() == b.values.tobytes() for a, b in zip(found, expected))

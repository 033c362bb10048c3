"""Score and quality parity with bm25s and rank_bm25 on real collections."""

import numpy as np
import pytest

from salience import Qrels, Run, evaluate
from salience.search import BM25
from salience.text import Tokenizer

bm25s = pytest.importorskip("bm25s")


def _subset(scifact, n_docs=1500, n_queries=40):
    corpus = scifact["corpus"][:n_docs]
    queries = list(scifact["queries"].values())[:n_queries]
    return corpus, queries


@pytest.mark.parametrize("variant", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_scores_equal_bm25s(scifact, variant):
    corpus, queries = _subset(scifact)
    tokenizer = Tokenizer()
    docs_tokens = tokenizer.tokenize_batch([d["title"] + " " + d["text"] for d in corpus])
    reference = bm25s.BM25(method=variant, k1=1.2, b=0.7, delta=0.6)
    reference.index(docs_tokens, show_progress=False)
    ours = BM25(variant=variant, k1=1.2, b=0.7, delta=0.6).index(corpus)
    checked = 0
    for query in queries:
        tokens = [t for t in tokenizer.tokenize(query) if t in reference.vocab_dict]
        if not tokens:
            continue
        np.testing.assert_allclose(ours.get_scores(query).values, reference.get_scores(tokens), rtol=1e-6, atol=1e-6)
        checked += 1
    assert checked >= 30


def test_scores_equal_rank_bm25(scifact):
    rank_bm25 = pytest.importorskip("rank_bm25")
    corpus, queries = _subset(scifact, 800, 30)
    tokenizer = Tokenizer()
    docs_tokens = tokenizer.tokenize_batch([d["title"] + " " + d["text"] for d in corpus])
    # Index the already-analysed terms with a pass-through tokenizer, so both sides see the same terms.
    plain = Tokenizer(stopwords=None, stemmer=None)
    analysed = [" ".join(tokens) for tokens in docs_tokens]
    plus = rank_bm25.BM25Plus(docs_tokens, k1=1.5, b=0.75, delta=1.0)
    ours_plus = BM25(variant="bm25+", delta=1.0, tokenizer=plain).index(analysed)
    okapi = rank_bm25.BM25Okapi(docs_tokens, k1=1.5, b=0.75)
    ours_robertson = BM25(variant="robertson", tokenizer=plain).index(analysed)
    df = {}
    for doc in docs_tokens:
        for t in set(doc):
            df[t] = df.get(t, 0) + 1
    for query in queries:
        tokens = tokenizer.tokenize(query)
        np.testing.assert_allclose(ours_plus.get_scores(" ".join(tokens)).values, plus.get_scores(tokens), rtol=1e-6, atol=1e-6)
        # rank_bm25's Okapi is Robertson's IDF with the (k1 + 1) numerator; it replaces negative
        # IDF (terms in over half the documents) by a floor, so compare on the other terms.
        rare = [t for t in tokens if df.get(t, 0) < len(corpus) / 2]
        if rare:
            np.testing.assert_allclose(
                2.5 * ours_robertson.get_scores(" ".join(rare)).values, okapi.get_scores(rare), rtol=1e-6, atol=1e-6
            )


@pytest.mark.parametrize("dataset, expected", [("scifact", 0.6863), ("npl", 0.4280)])
def test_ndcg_matches_bm25s_published_numbers(dataset, expected, request):
    from tests.conftest import data_path, read_jsonl

    root = data_path("search", dataset)
    index = BM25().index(root)
    queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    ndcg = evaluate(Qrels.read(root / "qrels.tsv"), index.retrieve(queries, k=10), "ndcg@10")["ndcg@10"]
    assert ndcg == pytest.approx(expected, abs=1e-4)


def test_ndcg_equals_bm25s_run_on_scifact(scifact):
    import Stemmer

    from tests.conftest import read_jsonl

    corpus = scifact["corpus"]
    stemmer = Stemmer.Stemmer("english")
    tokens = bm25s.tokenize([d["title"] + " " + d["text"] for d in corpus], stopwords="en", stemmer=stemmer, show_progress=False)
    reference = bm25s.BM25()
    reference.index(tokens, show_progress=False)
    queries = scifact["queries"]
    q_tokens = bm25s.tokenize(list(queries.values()), stopwords="en", stemmer=stemmer, show_progress=False)
    docs, scores = reference.retrieve(q_tokens, k=10, show_progress=False, n_threads=1)
    ids = [d["_id"] for d in corpus]
    their_run = Run({q: dict(zip([ids[i] for i in docs[j]], scores[j].tolist())) for j, q in enumerate(queries)})
    our_run = BM25().index(corpus).retrieve(queries, k=10)
    qrels = Qrels.read(scifact["root"] / "qrels.tsv")
    ours, theirs = evaluate(qrels, our_run, "ndcg@10")["ndcg@10"], evaluate(qrels, their_run, "ndcg@10")["ndcg@10"]
    assert ours == pytest.approx(theirs, abs=1e-4)
    del read_jsonl

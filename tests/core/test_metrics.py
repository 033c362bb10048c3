import math

import numpy as np
import pytest

from salience import InvalidParameterError, Qrels, Run, evaluate
from salience.exceptions import InputFormatError
from salience.search import BM25
from tests.conftest import data_path


def test_hand_computed_example():
    qrels = {"q1": {"a": 2, "b": 0, "c": 1, "z": 1}}
    run = {"q1": {"a": 0.9, "x": 0.8, "c": 0.7, "b": 0.6}}
    r = evaluate(qrels, run, ["ndcg@3", "map@4", "mrr@10", "recall@3", "precision@2"]).means
    dcg = 2 / math.log2(2) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert r["ndcg@3"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert r["map@4"] == pytest.approx((1 / 1 + 2 / 3) / 3, abs=1e-12)  # divides by all 3 relevant
    assert r["mrr@10"] == 1.0
    assert r["recall@3"] == pytest.approx(2 / 3)
    assert r["precision@2"] == pytest.approx(1 / 2)


def test_ties_follow_trec_eval_docid_descending():
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0}}  # tie: trec_eval puts "b" first
    assert evaluate(qrels, run, "mrr@10").means["mrr@10"] == 0.5


def test_unjudged_skipped_and_missing_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}, "q3": {"c": 1.0}}
    rep = evaluate(qrels, run, "ndcg@10")
    assert rep.skipped_unjudged == 1 and rep.missing_from_run == 1 and rep.evaluated == 2
    assert rep["ndcg@10"] == 0.5
    assert evaluate(qrels, run, "ndcg@10", missing="skip")["ndcg@10"] == 1.0


@pytest.mark.parametrize("name", ["ndcg", "foo@10", "ndcg@0", "ndcg@x"])
def test_bad_metric_names(name):
    if name == "ndcg":  # no cut-off: the full ranking, where the relevant item ranks second of two
        assert evaluate({"q": {"a": 1}}, {"q": {"b": 2.0, "a": 1.0}}, name)["ndcg"] == pytest.approx(1 / np.log2(3))
        return
    with pytest.raises(InvalidParameterError):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, name)


def _real_run(root, k=1000, variant="lucene"):
    from tests.conftest import read_jsonl

    index = BM25(variant=variant).index(root)
    queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    return index.retrieve(queries, k=k), Qrels.read(root / "qrels.tsv")


@pytest.mark.parametrize("dataset", ["scifact", "cranfield"])
def test_parity_with_pytrec_eval_on_real_runs(dataset):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _real_run(data_path("search", dataset), variant="atire")
    ours = evaluate(qrels, run, ["ndcg@10", "ndcg@100", "map@1000", "map@10", "recall@100", "precision@10", "mrr"])
    measures = {"ndcg_cut_10", "ndcg_cut_100", "map_cut_1000", "map_cut_10", "recall_100", "P_10", "recip_rank"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels.to_dict(), measures).evaluate(run.to_dict())
    pairs = {
        "ndcg@10": "ndcg_cut_10", "ndcg@100": "ndcg_cut_100", "map@1000": "map_cut_1000", "map@10": "map_cut_10",
        "recall@100": "recall_100", "precision@10": "P_10", "mrr": "recip_rank",
    }
    assert set(theirs) == set(ours.per_subject)
    for subject, values in theirs.items():
        for mine, ref in pairs.items():
            assert ours.per_subject[subject][mine] == pytest.approx(values[ref], abs=1e-9), (subject, mine)
    for mine, ref in pairs.items():
        assert ours[mine] == pytest.approx(np.mean([v[ref] for v in theirs.values()]), abs=1e-9)


def test_run_trec_round_trip(tmp_path):
    run = Run({"q1": {"d1": 2.5, "d2": 1.25}, "q2": {"d3": -1.0}}, name="test")
    path = tmp_path / "run.trec"
    run.write_trec(path)
    assert path.read_text().splitlines()[0] == "q1 Q0 d1 1 2.5 test"
    back = Run.read_trec(path)
    assert back.to_dict() == run.to_dict()


def test_qrels_formats(tmp_path):
    beir = tmp_path / "qrels.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n")
    trec = tmp_path / "qrels.txt"
    trec.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    assert Qrels.read(beir).to_dict() == Qrels.read(trec).to_dict() == {"q1": {"d1": 1, "d2": 0}}


def test_corrupt_run_and_qrels_name_the_line(tmp_path):
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 2.0 tag\nq1 Q0 d2 2\n")
    with pytest.raises(ValueError, match=r"bad.trec:2: .*6 columns"):
        Run.read_trec(bad)
    bad.write_text("q1 Q0 d1 1 nan tag\n")
    with pytest.raises(ValueError, match=r"bad.trec:1: score is NaN"):
        Run.read_trec(bad)
    bad.write_text("q1 Q0 d1 1 1 t\nq1 Q0 d1 2 0.5 t\n")
    with pytest.raises(ValueError, match="appears twice"):
        Run.read_trec(bad)
    q = tmp_path / "q.tsv"
    q.write_text("q1 d1\n")
    with pytest.raises(ValueError, match=r"q.tsv:1: a qrels line needs 3 columns"):
        Qrels.read(q)
    for grade in ("inf", "nan", "high"):  # inf was an OverflowError (found by tests/test_fuzz.py)
        q.write_text(f"q1\td1\t1\nq1\td2\t{grade}\n")
        with pytest.raises(InputFormatError, match=rf"q.tsv:2: grade '{grade}' is not a finite number"):
            Qrels.read(q)


def test_run_rejects_duplicates():
    from salience import IdMismatchError, Scores

    with pytest.raises(IdMismatchError, match="'a' appears more than once"):
        Scores([1.0, 2.0], ids=["a", "a"])
    with pytest.raises(IdMismatchError, match="'a' appears twice"):  # unchecked Scores are checked by the run
        Run({"q": Scores.unchecked(np.array([1.0, 2.0]), ["a", "a"])})

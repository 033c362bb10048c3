import numpy as np
import pytest

from salience import Qrels, Scores
from salience.exceptions import InvalidParameterError, ShapeError
from salience.search import BM25
from salience.search.pack import ScoreCalibrator, approximate_tokens, pack


def test_knapsack_beats_truncation_by_hand():
    # probabilities best first; the first passage is long: truncation spends the budget on it
    probabilities = Scores([0.6, 0.5, 0.5, 0.1], ids=["long", "s1", "s2", "s3"])
    lengths = {"long": 90, "s1": 40, "s2": 45, "s3": 10}
    topk = pack(probabilities, lengths, tokens=100, method="topk")
    assert topk.ids == ["long"] and topk.tokens == 90 and topk.expected_relevant == pytest.approx(0.6)
    best = pack(probabilities, lengths, tokens=100)
    assert best.ids == ["s1", "s2", "s3"] and best.tokens == 95 and best.expected_relevant == pytest.approx(1.1)
    # the expected-F1 cut-off keeps only the passages worth keeping before packing
    cut = pack(Scores([0.9, 0.8, 0.05, 0.02], ids="abcd"), [10, 10, 10, 10], tokens=100, cutoff="f1")
    assert cut.ids == ["a", "b"] and cut.kept_by_cutoff == 2
    # mmr skips a near-duplicate
    similarity = np.array([[1, .99, 0, 0], [.99, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    diverse = pack(Scores([0.9, 0.85, 0.5, 0.1], ids="abcd"), [10] * 4, tokens=20, method="mmr", similarity=similarity,
                   diversity=0.7)
    assert diverse.ids == ["a", "c"]


def test_bad_input():
    scores = Scores([0.5, 0.4], ids=["a", "b"])
    with pytest.raises(InvalidParameterError, match="shortest has 50"):
        pack(scores, [50, 60], tokens=10)
    with pytest.raises(InvalidParameterError, match="tokens must be a positive integer"):
        pack(scores, [5, 6], tokens=0)
    with pytest.raises(ShapeError, match="'b'"):
        pack(scores, {"a": 5}, tokens=10)
    with pytest.raises(InvalidParameterError, match="similarity"):
        pack(scores, [5, 6], tokens=10, method="mmr")
    with pytest.raises(InvalidParameterError, match="method"):
        pack(scores, [5, 6], tokens=10, method="greedy")
    with pytest.raises(InvalidParameterError, match="calibrate"):
        pack(Scores([3.0, 1.0], ids="ab"), [5, 6], tokens=10, cutoff="f1")
    assert approximate_tokens("Packing the passages, carefully!") == 2 + 1 + 2 + 1 + 2 + 1  # long words count twice


def test_calibrated_packing_on_scifact_recalls_more_than_truncation(scifact):
    from tests.conftest import data_path

    qrels = Qrels.read(data_path("search", "scifact", "qrels.tsv"))
    index = BM25().index([{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in scifact["corpus"]])
    judged = [q for q in scifact["queries"] if q in qrels]
    rankings = dict(zip(judged, index.search_batch([scifact["queries"][q] for q in judged], k=30)))
    calibrator = ScoreCalibrator().fit({q: rankings[q] for q in judged[::2]}, qrels)
    lengths = {d["_id"]: approximate_tokens(f"{d['title']} {d['text']}") for d in scifact["corpus"]}
    recall = {"topk": [], "knapsack": []}
    for q in judged[1::2]:
        probabilities = calibrator.probabilities(rankings[q])
        relevant = {d for d, g in qrels[q].items() if g > 0}
        for method in recall:
            chosen = pack(probabilities, lengths, tokens=512, method=method).ids
            recall[method].append(len(relevant & set(chosen)) / len(relevant))
    assert np.mean(recall["knapsack"]) > np.mean(recall["topk"])
    # calibrated: probabilities fall with rank
    p = calibrator.probabilities(rankings[judged[1]]).values
    assert np.all(np.diff(p) <= 1e-12)


def test_pack_command(tmp_path, capsys):
    import json

    from salience.cli import main

    docs = [{"_id": "long", "title": "Heat", "text": "heat transfer " * 60},
            {"_id": "s1", "title": "Heat", "text": "heat flows in plates"},
            {"_id": "s2", "title": "Heat", "text": "heat and boundary layers"},
            {"_id": "other", "title": "Wings", "text": "lift on wings"}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    assert main(["search", "index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "pack", str(tmp_path / "ix"), "heat", "--tokens", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {p["id"] for p in out["passages"]} == {"s1", "s2"} and out["tokens"] <= 40
    assert main(["search", "pack", str(tmp_path / "ix"), "heat", "--tokens", "2"]) == 2
    assert "shortest has" in capsys.readouterr().err

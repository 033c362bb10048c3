"""Static pruning: the lowest-scored share of an index's documents deleted, by hand and from the
shell, bad input named."""

import json

import pytest

from salience.cli import main
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError
from salience.search import BM25

DOCS = [{"_id": f"d{i}", "text": text} for i, text in enumerate(
    ["heat transfer in a boundary layer at high speed", "wings", "lift of slender wings at low speed",
     "heat flux", "boundary layer transition on a flat plate in a wind tunnel"])]


def test_prune_deletes_the_lowest_share():
    index = BM25().fit(DOCS)
    scores = Scores([5.0, 1.0, 4.0, 1.0, 9.0], ids=[f"d{i}" for i in range(5)])
    assert index.prune(scores, fraction=0.0) == [] and index.n_docs == 5
    # 40% of 5: the two lowest (a tie at 1.0, both go); the rest answer as before
    assert sorted(index.prune(scores, fraction=0.4)) == ["d1", "d3"]
    assert index.ids == ["d0", "d2", "d4"]
    assert [hit[0] for hit in index.search("heat", k=5)] == ["d0"]
    # ties at the cut: the earlier document stays
    index = BM25().fit(DOCS)
    assert index.prune(Scores([1.0, 1.0, 1.0, 1.0, 1.0], ids=index.ids), fraction=0.2) == ["d4"]


def test_prune_refuses_bad_input_by_name():
    index = BM25().fit(DOCS)
    with pytest.raises(InvalidParameterError, match="fraction=1"):
        index.prune(Scores([1.0] * 5, ids=index.ids), fraction=1)
    with pytest.raises(IdMismatchError, match="'d9'"):
        index.prune(Scores([1.0] * 5, ids=["d0", "d1", "d2", "d3", "d9"]), fraction=0.2)
    with pytest.raises(IdMismatchError, match="no value for document 'd4'"):
        index.prune(Scores([1.0] * 4, ids=["d0", "d1", "d2", "d3"]), fraction=0.2)
    with pytest.raises(InvalidParameterError, match="Scores"):
        index.prune([1.0] * 5, fraction=0.2)
    assert index.n_docs == 5  # nothing deleted by a refused call


def test_prune_from_the_shell(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "prune", str(out), "--fraction", "0.4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"documents": 5, "pruned": 2, "remaining": 3, "by": "words", "threshold": 2.0}
    assert main(["search", "query", str(out), "wings heat", "--json"]) == 0
    assert sorted(r["id"] for r in json.loads(capsys.readouterr().out)["results"]) == ["d0", "d2"]  # d1, d3 gone
    assert main(["search", "prune", str(out), "--fraction", "1.5"]) == 2
    assert "fraction=1.5" in capsys.readouterr().err
    bare = tmp_path / "bare"
    BM25(store_documents=False).fit(DOCS).save(bare)
    assert main(["search", "prune", str(bare), "--fraction", "0.2"]) == 2
    assert "keeps no document text" in capsys.readouterr().err

"""Static pruning: the lowest-scored share of an index's documents, or of its documents' passages,
deleted, by hand and from the shell, bad input named."""

import json

import pytest

from salience.cli import main
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError
from salience.search import BM25
from salience.search.passage_pruning import prune_index_passages, prune_passages
from salience.text.sentences import split_passages

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
    assert main(["search", "prune", str(out), "--fraction", "0.4", "--unit", "document", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"unit": "document", "documents": 5, "pruned": 2, "remaining": 3, "by": "words", "threshold": 2.0}
    assert main(["search", "query", str(out), "wings heat", "--json"]) == 0
    assert sorted(r["id"] for r in json.loads(capsys.readouterr().out)["results"]) == ["d0", "d2"]  # d1, d3 gone
    assert main(["search", "prune", str(out), "--fraction", "1.5"]) == 2
    assert "fraction=1.5" in capsys.readouterr().err
    bare = tmp_path / "bare"
    BM25(store_documents=False).fit(DOCS).save(bare)
    assert main(["search", "prune", str(bare), "--fraction", "0.2"]) == 2
    assert "keeps no document text" in capsys.readouterr().err


ARTICLES = [
    {"_id": "a", "title": "Boundary layers", "text": "Heat moves through the layer. See figure 2. "
                                                     "Transition starts at high speed on a flat plate.",
     "year": 1960},
    {"_id": "b", "title": "Wings", "text": "Lift rises. Slender wings stall late at low speed."},
    {"_id": "c", "title": "Misc", "text": "Erratum."},
]
WORDS = lambda passages: [len(p.split()) for p in passages]  # noqa: E731


def test_split_passages_packs_whole_sentences():
    text = "Heat moves through the layer. See figure 2. Transition starts at high speed on a flat plate."
    assert split_passages(text) == ["Heat moves through the layer.", "See figure 2.",
                                    "Transition starts at high speed on a flat plate."]
    # 5 + 3 words fit in 8; the 9-word sentence is a passage of its own
    assert split_passages(text, max_words=8) == ["Heat moves through the layer. See figure 2.",
                                                 "Transition starts at high speed on a flat plate."]
    assert split_passages("") == []
    with pytest.raises(InvalidParameterError, match="max_words=-1"):
        split_passages(text, max_words=-1)


def test_prune_passages_deletes_the_lowest_passages_and_keeps_the_rest_of_each_document():
    # passages (words): a: 5, 3, 9; b: 2, 6; c: 1. 50% of 6 = 3 go: "Erratum." (1), "Lift rises." (2),
    # "See figure 2." (3); c has nothing left and leaves, a and b keep their titles and other passages
    result = prune_passages(ARTICLES, WORDS, fraction=0.5)
    assert (result.passages, result.pruned, result.threshold) == (6, 3, 3.0)
    assert result.changed == ["a", "b"] and result.removed == ["c"]
    kept = {d.id: d for d in result.documents}
    assert kept["a"].fields == {"title": "Boundary layers",
                                "text": "Heat moves through the layer. Transition starts at high speed on a flat plate."}
    assert kept["a"].metadata == {"year": 1960}
    assert kept["b"].fields == {"title": "Wings", "text": "Slender wings stall late at low speed."}
    # nothing pruned: the documents come back untouched, text not re-joined
    untouched = prune_passages(ARTICLES, WORDS, fraction=0.1)
    assert untouched.pruned == 0 and [d.fields["text"] for d in untouched.documents] == [d["text"] for d in ARTICLES]
    # ties at the cut: the later passage goes, the earlier stays
    tied = prune_passages(ARTICLES, lambda passages: [1.0] * len(passages), fraction=0.2)
    assert tied.removed == ["c"] and tied.changed == []
    # sentences packed into passages of up to 8 words: a has 2 passages, b 2 (2 + 7 > 8), c 1; the lowest (c) goes
    packed = prune_passages(ARTICLES, WORDS, fraction=0.25, max_words=8)
    assert (packed.passages, packed.removed) == (5, ["c"])


def test_prune_index_passages_replaces_the_pruned_documents():
    index = BM25().fit(ARTICLES)
    result = prune_index_passages(index, WORDS, fraction=0.5)
    assert result.report() == {"passages": 6, "pruned": 3, "documents_changed": 2, "documents_removed": 1,
                               "documents_kept": 2, "threshold": 3.0}
    assert sorted(index.ids) == ["a", "b"]
    assert index.document("a")["year"] == 1960 and "figure" not in index.document("a")["text"]
    assert len(index.search("figure", k=3)) == 0
    # the pruned index scores as one built from the pruned documents (the same statistics)
    fresh = BM25().fit([{"id": d.id, **d.fields} for d in result.documents])
    assert dict(index.search("heat wings speed", k=3)) == pytest.approx(dict(fresh.search("heat wings speed", k=3)))


def test_prune_passages_refuses_bad_input_by_name():
    with pytest.raises(InvalidParameterError, match="fraction=1"):
        prune_passages(ARTICLES, WORDS, fraction=1)
    with pytest.raises(InvalidParameterError, match="passage_field='body'"):
        prune_passages(ARTICLES, WORDS, fraction=0.5, passage_field="body")
    with pytest.raises(InvalidParameterError, match="empty corpus"):
        prune_passages([], WORDS, fraction=0.5)
    with pytest.raises(ShapeError, match="for 6 passages"):
        prune_passages(ARTICLES, lambda passages: [1.0, 2.0], fraction=0.5)
    with pytest.raises(InvalidParameterError, match="not finite.*'Lift rises.'"):
        prune_passages(ARTICLES, lambda passages: [float("nan") if p == "Lift rises." else 1.0 for p in passages],
                       fraction=0.5)
    with pytest.raises(InvalidParameterError, match="keeps no document text"):
        prune_index_passages(BM25(store_documents=False).fit(ARTICLES), WORDS, fraction=0.5)


def test_prune_passages_from_the_shell(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in ARTICLES))
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "prune", str(out), "--fraction", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"unit": "passage", "documents": 3, "passages": 6, "pruned": 3, "documents_changed": 2,
                      "documents_removed": 1, "documents_kept": 2, "threshold": 3.0, "remaining": 2, "by": "words"}
    assert main(["search", "query", str(out), "figure erratum wings", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["b"]
    assert main(["search", "prune", str(out), "--fraction", "0.2", "--field", "body"]) == 2
    assert "--field body" in capsys.readouterr().err

import json

import numpy as np

import pytest

from salience import InvalidParameterError
from salience.cli import main
from salience.summarize import score_sentences, summarize
from salience.summarize.extractive import METHODS
from tests.conftest import data_path

DOC = (
    "Solar panels convert sunlight into electricity. "
    "Panels made of silicon cells convert light into electric current. "
    "The weather was pleasant on Tuesday. "
    "Electricity from solar cells powers homes and charges batteries. "
    "A cat slept on the warm roof."
)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_returns_k_sentences_in_document_order(method):
    summary = summarize(DOC, method=method, sentences=2)
    assert len(summary.sentences) == 2 and summary.indices == sorted(summary.indices)


def test_central_sentences_win_and_off_topic_lose():
    scores = score_sentences([s.strip() + "." for s in DOC.split(".") if s.strip()], method="lexrank")
    assert set(scores.ranked_ids()[:2]) <= {0, 1, 3}
    assert scores.ranked_ids()[-1] in (2, 4)
    assert summarize(DOC, method="lead", sentences=2).indices == [0, 1]


def test_query_focus_and_word_budget():
    focused = summarize(DOC, sentences=1, query="cat roof")
    assert focused.sentences == ["A cat slept on the warm roof."]
    budget = summarize(DOC, words=12)
    assert sum(len(s.split()) for s in budget.sentences) <= 12 and budget.sentences


def test_diversity_drops_near_duplicates():
    text = "Solar power is cheap. Solar power is very cheap. Wind power grows fast. The sky is blue."
    plain = summarize(text, sentences=2, method="lexrank")
    diverse = summarize(text, sentences=2, method="lexrank", diversity=0.7)
    assert plain.indices == [0, 1]
    assert diverse.indices != [0, 1]


def test_bad_input():
    assert summarize("", sentences=3).sentences == []
    assert summarize("No terms here!!! ...", sentences=1).sentences  # punctuation and stop words only
    with pytest.raises(InvalidParameterError, match="sentences must be a positive integer"):
        summarize(DOC, sentences=0)
    with pytest.raises(InvalidParameterError, match="not both"):
        summarize(DOC, sentences=2, words=10)
    with pytest.raises(InvalidParameterError, match="valid values"):
        summarize(DOC, method="luhn")
    with pytest.raises(InvalidParameterError):
        summarize(42)


def test_long_document_memory_grows_with_the_graph_not_the_vocabulary():
    # allocations, not seconds: every pair of these sentences shares words, so the graph is full;
    # 3,000 sentences stay within a few copies of its 9M edges (the sparse-text case, with far
    # fewer edges, is in tests/test_data_safety.py)
    import tracemalloc

    text = " ".join(f"Sentence number {i} talks about topic {i % 50} and item {i % 7}." for i in range(3000))
    tracemalloc.start()
    try:
        assert len(summarize(text, sentences=5).sentences) == 5
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 3000 * 3000 * 12, f"peak {peak / 2**20:.0f} MB"


def test_rouge_on_bbc_beats_summa_reference():
    pytest.importorskip("rouge_score")
    from salience.summarize.evaluate import evaluate_summaries

    result = evaluate_summaries(data_path("summarize", "bbc_news_summary_100", "docs.jsonl"))
    assert result["rouge2"] >= 76.2 and result["rouge1"] >= 82.3
    assert result.info["docs"] == 100 and len(result.per_subject) == 100
    assert result["rouge2"] == pytest.approx(np.mean([d["rouge2"] for d in result.per_subject.values()]))


def test_cli(tmp_path, capsys):
    doc = tmp_path / "doc.txt"
    doc.write_text(DOC)
    assert main(["summarize", "extract", str(doc), "--sentences", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["sentences"]) == 2
    assert main(["summarize", "extract", str(doc), "--words", "10", "--method", "textrank"]) == 0
    capsys.readouterr()
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"text": DOC, "summary": "Solar panels convert sunlight into electricity."}) + "\n")
    pytest.importorskip("rouge_score")
    assert main(["summarize", "evaluate", str(gold), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["docs"] == 1 and 0 < result["rouge1"] <= 100
    gold.write_text(json.dumps({"text": DOC}) + "\n")
    assert main(["summarize", "evaluate", str(gold)]) == 2
    assert "gold.jsonl:1: record has no text field 'summary'" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok text.\n\xff\xfe broken")
    assert main(["summarize", "extract", str(bad)]) == 2
    assert "bad.txt:2: invalid UTF-8" in capsys.readouterr().err
    assert main(["summarize", "extract", str(bad), "--on-error", "replace"]) == 0
    capsys.readouterr()
    # a file may be named like a verb: verbs are sub-commands, so any file name works
    named = tmp_path / "evaluate"
    named.write_text("Solar panels convert sunlight. Wind turbines convert wind.")
    assert main(["summarize", "extract", str(named), "--sentences", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"]


def test_a_scorer_reuses_its_term_cache_and_keeps_the_results():
    import pickle

    from salience.summarize import SentenceScorer

    scorer = SentenceScorer(method="textrank")
    first = summarize(DOC, sentences=2, scorer=scorer)
    assert list(scorer._encoders) == ["en"] and scorer._encoders["en"].cached_tokens > 0
    assert summarize(DOC, sentences=2, scorer=scorer).indices == first.indices == summarize(DOC, sentences=2, method="textrank").indices
    assert pickle.loads(pickle.dumps(scorer)).score(DOC) == scorer.score(DOC)  # the cache is not pickled
    with pytest.raises(InvalidParameterError, match="does not apply to method 'scorer="):
        summarize(DOC, scorer=scorer, method="centroid")

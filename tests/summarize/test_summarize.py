import json

import numpy as np

import pytest

from pathlib import Path

from salience import InputFormatError, InvalidParameterError
from salience.cli import main
from salience.summarize import score_sentences, summarize
from salience.core.base import method_names
from tests.conftest import data_path

DOC = (
    "Solar panels convert sunlight into electricity. "
    "Panels made of silicon cells convert light into electric current. "
    "The weather was pleasant on Tuesday. "
    "Electricity from solar cells powers homes and charges batteries. "
    "A cat slept on the warm roof."
)


@pytest.mark.parametrize("method", method_names("summarize"))
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

    from salience.summarize import TextRank

    scorer = TextRank()
    first = summarize(DOC, sentences=2, scorer=scorer)
    assert list(scorer._encoders) == ["en"] and scorer._encoders["en"].cached_tokens > 0
    assert summarize(DOC, sentences=2, scorer=scorer).indices == first.indices == summarize(DOC, sentences=2, method="textrank").indices
    assert pickle.loads(pickle.dumps(scorer)).score(DOC) == scorer.score(DOC)  # the cache is not pickled
    with pytest.raises(InvalidParameterError, match="does not apply to method 'scorer="):
        summarize(DOC, scorer=scorer, method="centroid")



@pytest.mark.parametrize("method", [m for m in method_names("summarize") if m != "lead"])
def test_scores_do_not_depend_on_the_texts_a_scorer_saw_before(method):
    # the counts' columns follow the text's own terms, not the ids an encoder gave earlier
    # texts' terms: the same floating-point sums, to the last bit
    from salience.core.base import create

    # DOC's words met first in the reverse order: a fresh encoder would number them otherwise
    others = [" ".join(reversed(DOC.split())), "Markets fell sharply as oil prices rose again."]
    seasoned = create("summarize", method, language="en")
    for text in others:
        summarize(text, scorer=seasoned)
    fresh = create("summarize", method, language="en").score(DOC)
    assert np.array_equal(seasoned.score(DOC).values, fresh.values)


def test_summarize_shares_one_scorer_per_method_and_options():
    from salience.summarize import summaries

    summaries._shared_scorers.clear()
    first = summarize(DOC, sentences=2, method="lexrank", language="en")
    assert len(summaries._shared_scorers) == 1
    shared = next(iter(summaries._shared_scorers.values()))
    assert shared._encoders["en"].cached_tokens > 0
    again = summarize(DOC, sentences=2, method="lexrank", language="en")
    assert again.indices == first.indices and np.array_equal(again.scores.values, first.scores.values)
    assert next(iter(summaries._shared_scorers.values())) is shared  # the same scorer, warm
    for threshold in (0.1, 0.2, 0.3, 0.4, 0.5):
        summarize(DOC, method="lexrank", threshold=threshold)
    assert len(summaries._shared_scorers) == summaries._SHARED_SCORERS  # the least recently used dropped
    assert shared not in summaries._shared_scorers.values()
    with pytest.raises(InvalidParameterError):
        summarize(DOC, method="lexrank", damping=2.0)
    assert all(s.damping != 2.0 for s in summaries._shared_scorers.values())  # a refused scorer is never kept

FRENCH = ["Les chats et les chiens de la maison dorment dans le jardin.", "La réforme des retraites divise la France.",
          "Les syndicats contestent la réforme des retraites.", "De la pluie et du vent dans les rues de la ville.",
          "Le gouvernement défend sa réforme des retraites devant les députés."]


def test_summaries_read_french_and_portuguese_in_their_language():
    from salience.summarize import LexRank, score_sentences

    # In French, sentences 0 and 3 share only function words with the others ("les", "la", "de"):
    # read as French they are the least central; read with English stop words they look central.
    french = score_sentences(FRENCH).values
    english = score_sentences(FRENCH, language="en").values
    assert set(np.argsort(french)[:2].tolist()) == {0, 3} and french[[0, 3]].max() < 0.2 * french.max()
    assert english[[0, 3]].min() > 0.7 * english.max()
    assert summarize(FRENCH, sentences=2).indices == [1, 2] == summarize(FRENCH, sentences=2, language="fr").indices
    portuguese = ["Os gatos e os cães da casa dormem no jardim.", "A reforma das pensões divide o país.",
                  "Os sindicatos contestam a reforma das pensões.", "Da chuva e do vento nas ruas da cidade.",
                  "O governo defende a sua reforma das pensões perante os deputados."]
    values = score_sentences(portuguese).values
    assert set(np.argsort(values)[:2].tolist()) == {0, 3}
    # a scorer keeps one term cache per language
    scorer = LexRank()
    scorer.score(FRENCH), scorer.score(portuguese), scorer.score(DOC)
    assert sorted(scorer._encoders) == ["en", "fr", "pt"]
    with pytest.raises(InvalidParameterError, match="unknown language 'xx'"):
        summarize(FRENCH, language="xx")


@pytest.mark.skipif(not (Path(__file__).resolve().parents[3] / "shared" / "data").exists(),
                    reason="needs ../shared/data (the French and Portuguese keyphrase sets' texts)")
def test_summaries_of_the_real_french_and_portuguese_texts():
    data = Path(__file__).resolve().parents[3] / "shared" / "data" / "keyphrase"
    for name, code in (("wikinews_fr", "fr"), ("pt_bn_kp110", "pt")):
        texts = [json.loads(line)["text"] for _, line in zip(range(20), open(data / name / "docs.jsonl", encoding="utf-8"))]
        for text in texts:
            summary = summarize(text, sentences=2)
            assert 1 <= len(summary.indices) <= 2
        from salience.summarize.similarity import new_encoder

        encoder = new_encoder(code)
        terms = encoder.tokenizer.tokenize(texts[0])
        assert terms and not set(terms) & {"les", "des", "de", "os", "das", "que"}


def test_evaluation_against_several_references(tmp_path):
    pytest.importorskip("rouge_score")
    from salience.summarize.evaluate import evaluate_summaries, rouge_scorer

    sentences = FRENCH
    good, poor = "La réforme des retraites divise la France.\nLes syndicats contestent la réforme des retraites.", \
        "De la pluie et du vent dans les rues de la ville.\nLes chats dorment."
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"text": " ".join(sentences), "summaries": [good, poor]}) + "\n")
    report = evaluate_summaries(gold)
    output = summarize(" ".join(sentences), sentences=2).text
    scorer = rouge_scorer()
    each = [100 * scorer.score(ref, output)["rouge2"].fmeasure for ref in (good, poor)]
    assert report["rouge2"] == pytest.approx(max(each)) and report["rouge2_mean"] == pytest.approx(sum(each) / 2)
    assert report["rouge2"] > report["rouge2_mean"] and report.info["references"] == 2
    gold.write_text(json.dumps({"text": " ".join(sentences), "summaries": []}) + "\n")
    with pytest.raises(InputFormatError, match="gold.jsonl:1: record has no text field 'summary'"):
        evaluate_summaries(gold)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_starts_without_the_parents_shared_scorers():
    import os

    from salience.summarize import summaries

    expected = summarize(DOC, sentences=2, method="lexrank", language="en").indices
    assert summaries._shared_scorers
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no scorer, and a lock of its own; summarising still works
        ok = not summaries._shared_scorers and summarize(DOC, sentences=2, language="en").indices == expected
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"

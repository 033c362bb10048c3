import json

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.cli import main
from salience.core.base import create, method_names
from salience.summarize import LexRank, summarize, summarize_batch
from salience.summarize import similarity
from salience.text.sentences import split_sentences
from tests.conftest import data_path

DOC = ("Solar panels convert sunlight into electricity. Panels made of silicon cells convert light into electric "
       "current. The weather was pleasant on Tuesday. Electricity from solar cells powers homes and charges batteries. "
       "A cat slept on the warm roof.")
FRENCH = ("Les chats et les chiens de la maison dorment dans le jardin. La réforme des retraites divise la France. "
          "Les syndicats contestent la réforme des retraites. De la pluie et du vent dans les rues de la ville. "
          "Le gouvernement défend sa réforme des retraites devant les députés.")
PORTUGUESE = ["Os gatos e os cães da casa dormem no jardim.", "A reforma das pensões divide o país.",
              "Os sindicatos contestam a reforma das pensões.", "O governo defende a sua reforma das pensões."]


def _texts() -> list:
    """Texts of three languages, as strings and as sentence lists, an empty one, one without a
    single term, and enough text (over 20,000 characters) for the encoder's vectorised path."""
    reports = [f"{DOC} Report {i} says the price of panels fell by {i} percent in the north. "
               f"Engineers in region {i} install {2 * i} panels, “faster” than planned. The roof of house {i} is red."
               for i in range(60)]
    return [DOC, FRENCH, PORTUGUESE, "", "No terms here!!! ...", *reports, "the of and a", "Un été à Paris. Été."]


def _same(a, b) -> bool:
    return (a.sentences == b.sentences and a.indices == b.indices and a.scores.ids == b.scores.ids
            and np.array_equal(a.scores.values, b.scores.values))


@pytest.mark.parametrize("method, params", [("lexrank", {}), ("lexrank", {"threshold": 0.1}), ("textrank", {}),
                                            ("textrank", {"similarity": "overlap"}), ("centroid", {}), ("lead", {})])
def test_a_batch_gives_every_text_the_summary_of_one_call(method, params):
    texts = _texts()
    assert sum(len(t) for t in texts if isinstance(t, str)) > 20_000
    for language in ("auto", "en"):
        for options in ({"sentences": 2}, {"words": 15}, {"sentences": [1 + i % 3 for i in range(len(texts))]},
                        {"sentences": 2, "diversity": 0.5}):
            # a fresh scorer for each side: the batch's term caches start as empty as the calls'
            batch = summarize_batch(texts, scorer=create("summarize", method, language=language, **params), **options)
            scorer = create("summarize", method, language=language, **params)
            budgets = options.get("sentences")
            for i, (text, got) in enumerate(zip(texts, batch)):
                one = dict(options, sentences=budgets[i]) if isinstance(budgets, list) else options
                assert _same(got, summarize(text, scorer=scorer, **one)), (method, language, options, i)
    # the process's shared scorer, as summarize uses it
    assert all(_same(a, summarize(t, method=method, **params))
               for a, t in zip(summarize_batch(texts, method=method, **params), texts))


def test_term_counts_of_many_texts_equal_each_texts_counts_dense_and_sparse(monkeypatch):
    texts = [[s.text for s in split_sentences(t)] if isinstance(t, str) else t for t in _texts()]
    texts = [t for t in texts if t]
    for cells in (similarity.DENSE_MAX_CELLS, 40):  # 40 cells: most texts' counts are sparse
        monkeypatch.setattr(similarity, "DENSE_MAX_CELLS", cells)
        many = similarity.term_counts_many(texts, similarity.new_encoder("en"))
        encoder = similarity.new_encoder("en")
        kinds = set()
        for text, got in zip(texts, many):
            expected = similarity.term_counts(text, encoder)
            assert type(got) is type(expected) and got.shape == expected.shape
            dense = (lambda m: m if isinstance(m, np.ndarray) else m.toarray())
            assert np.array_equal(dense(got), dense(expected)) and dense(got).dtype == np.float64
            kinds.add(type(got).__name__)
        assert kinds == ({"ndarray", "csr_matrix"} if cells == 40 else {"ndarray"})


def test_score_batch_scores_each_text_as_score_does():
    texts = _texts()
    scorer = LexRank()
    batch = scorer.score_batch(texts)
    fresh = LexRank()
    for text, got in zip(texts, batch):
        expected = fresh.score(text)
        assert got.ids == expected.ids and np.array_equal(got.values, expected.values)
    assert sorted(scorer._encoders) == ["en", "fr", "pt"]  # one term cache per language, as one by one
    query = scorer.score_batch([DOC, FRENCH], query="solar cells")
    assert np.array_equal(query[0].values, LexRank().score(DOC, query="solar cells").values)


def test_a_query_is_read_text_by_text():
    texts = [DOC, FRENCH, ""]
    got = summarize_batch(texts, sentences=1, query="cat roof")
    assert [s.sentences for s in got] == [summarize(t, sentences=1, query="cat roof").sentences for t in texts]
    assert got[0].sentences == ["A cat slept on the warm roof."] and got[2].sentences == []


def test_bad_input_is_refused_by_name():
    with pytest.raises(InvalidParameterError, match="one number or one per text; got 2 for 3 texts"):
        summarize_batch([DOC, DOC, DOC], sentences=[1, 2])
    with pytest.raises(InvalidParameterError, match="text 1 must be a str or a list of sentences"):
        summarize_batch([DOC, 42])
    with pytest.raises(InvalidParameterError, match="not both"):
        summarize_batch([DOC], sentences=1, words=5)
    with pytest.raises(InvalidParameterError, match="sentences must be a positive integer"):
        summarize_batch([DOC, DOC], sentences=[1, 0])
    with pytest.raises(InvalidParameterError, match="diversity must be in"):
        summarize_batch([DOC], diversity="high")
    with pytest.raises(InvalidParameterError, match="unknown language"):
        summarize_batch([DOC], language="xx")
    assert summarize_batch([]) == [] and summarize_batch(["", "  "])[1].sentences == []
    # budgets as a numpy array, one per text
    assert [s.indices for s in summarize_batch([DOC, DOC], sentences=np.array([1, 2]))] == [
        summarize(DOC, sentences=1).indices, summarize(DOC, sentences=2).indices]
    assert set(method_names("summarize")) == {"lexrank", "textrank", "centroid", "lead"}


def test_the_cli_summarises_a_jsonl_file_in_batches(tmp_path, capsys):
    records = tmp_path / "docs.jsonl"
    texts = _texts()[:8]
    records.write_text("".join(json.dumps({"id": f"d{i}", "text": t if isinstance(t, str) else " ".join(t)}) + "\n"
                               for i, t in enumerate(texts)), encoding="utf-8")
    assert main(["summarize", "extract", str(records), "--sentences", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["id"] for line in lines] == [f"d{i}" for i in range(8)]
    for line, text in zip(lines, texts):
        expected = summarize(text if isinstance(text, str) else " ".join(text), sentences=2)
        assert line["indices"] == expected.indices and line["summary"] == expected.text


def test_bbc_articles_in_a_batch_as_one_by_one():
    path = data_path("summarize", "bbc_news_summary_100", "docs.jsonl")
    texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
    batch = summarize_batch(texts, sentences=4, scorer=LexRank())
    scorer = LexRank()
    assert all(_same(got, summarize(text, sentences=4, scorer=scorer)) for got, text in zip(batch, texts))

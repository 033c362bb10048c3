"""The sentences verifier: content left by hand, summarizers faithful on the shared set's dev
split, random scores not."""

import json
from pathlib import Path

import numpy as np
import pytest

from salience import Scores
from salience.core.base import create
from salience.core.verify import verify_subjects
from salience.exceptions import IdMismatchError, InvalidParameterError
from salience.summarize import score_sentences, split_sentences

SENTENCES = ["Wings lift the plane.", "The wings of the plane lift it in the air.", "Lunch was late.",
             "Air flows over the wings."]
SET = Path(__file__).resolve().parents[3] / "shared" / "data" / "summarize" / "bbc_news_summary_100"


def test_the_outcome_is_the_content_left_by_hand():
    verifier = create("verify", "sentences", language="en", steps=3, n_random=3)
    result = verifier.verify([0.9, 0.8, 0.0, 0.5], sentences=SENTENCES)
    assert result.curves["scores"][0] == pytest.approx(1.0)  # everything kept: the whole itself
    # after the two top sentences go, the rest ("Lunch was late", "Air flows over the wings") by hand
    from salience.summarize.similarity import new_encoder, term_counts, tfidf

    weights = tfidf(term_counts(SENTENCES, new_encoder("en")))
    whole = weights.sum(axis=0)
    rest = weights[2] + weights[3]
    expected = rest @ whole / np.linalg.norm(rest) / np.linalg.norm(whole)
    step = list(result.fractions).index(0.5)
    assert result.curves["scores"][step] == pytest.approx(expected)


def test_scores_by_position_and_bad_input():
    verifier = create("verify", "sentences", language="en", n_random=3)
    by_id = verifier.verify(score_sentences(SENTENCES, language="en"),
                            sentences=SENTENCES)
    assert by_id.n_units == 4
    with pytest.raises(IdMismatchError, match="no unit"):
        verifier.verify(Scores([1.0, 2.0, 3.0, 4.0], ids=["a", "b", "c", "d"]), sentences=SENTENCES)
    with pytest.raises(InvalidParameterError, match="list of texts"):
        verifier.verify([1.0], sentences="one text")
    with pytest.raises(InvalidParameterError, match="at least 2"):
        verifier.verify([1.0], sentences=["one"])


@pytest.mark.skipif(not SET.is_dir(), reason="../shared/data is absent (CI always has it)")
def test_summarizers_are_faithful_on_the_dev_split_and_random_scores_are_not():
    docs = [json.loads(line) for line in (SET / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    dev = set(json.loads((SET / "splits.json").read_text())["dev"])
    verifier = create("verify", "sentences", language="en")
    texts = [[s.text for s in split_sentences(d["text"])] for d in docs if d["id"] in dev]
    texts = [t for t in texts if len(t) >= 4]
    lexrank = verify_subjects([verifier.verify(score_sentences(t, method="lexrank"), sentences=t) for t in texts])
    assert lexrank.verdict == "faithful" and lexrank.gap > 0.03
    rng = np.random.default_rng(0)
    random = verify_subjects([verifier.verify(rng.random(len(t)), sentences=t) for t in texts])
    assert random.verdict == "no better than random"


def test_verify_sentences_from_the_command_line(tmp_path, capsys):
    from salience.cli import main

    text = tmp_path / "article.txt"
    text.write_text(" ".join(SENTENCES * 3), encoding="utf-8")
    report = tmp_path / "check.json"
    assert main(["verify", "sentences", str(text), "--method", "textrank", "--language", "en", "--random", "5",
                 "--out", str(report), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(report.read_text())
    assert printed["verdict"] == saved["verdict"] and saved["method"] == "textrank" and saved["n_units"] == 12
    assert main(["verify", "sentences", str(text), "--out", str(text), "--quiet"]) == 2
    assert "is the input" in capsys.readouterr().err


def test_against_a_reference_the_outcome_is_rouge1_recall():
    pytest.importorskip("rouge_score")
    from rouge_score import rouge_scorer

    reference = "The wings lift the plane in the air."
    verifier = create("verify", "sentences", language="en", steps=2, n_random=3)
    result = verifier.verify([0.9, 0.8, 0.0, 0.5], sentences=SENTENCES, reference=reference)
    rouge = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    assert result.curves["scores"][0] == pytest.approx(rouge.score(reference, " ".join(SENTENCES))["rouge1"].recall)
    rest = " ".join([SENTENCES[2], SENTENCES[3]])  # the two best gone
    assert result.curves["scores"][1] == pytest.approx(rouge.score(reference, rest)["rouge1"].recall)
    with pytest.raises(InvalidParameterError, match="reference must be"):
        verifier.verify([0.9, 0.8, 0.0, 0.5], sentences=SENTENCES, reference="  ")


def test_verify_sentences_against_a_reference_from_the_command_line(tmp_path, capsys):
    pytest.importorskip("rouge_score")
    from salience.cli import main

    text = tmp_path / "article.txt"
    text.write_text(" ".join(SENTENCES), encoding="utf-8")
    reference = tmp_path / "reference.txt"
    reference.write_text("The wings lift the plane in the air.", encoding="utf-8")
    assert main(["verify", "sentences", str(text), "--reference", str(reference), "--language", "en", "--random", "3",
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["curves"]["scores"][0] == pytest.approx(1.0)  # every word of the reference is in the article
    assert main(["verify", "sentences", str(text), "--reference", str(reference), "--out", str(reference)]) == 2
    assert "is the input" in capsys.readouterr().err


def test_summarize_extract_json_is_verified_as_written(tmp_path, capsys):
    """``summarize extract --json`` writes every sentence's score; ``verify sentences --scores``
    verifies exactly those (the same result as scoring by the method inline)."""
    from salience.cli import main

    text = tmp_path / "article.txt"
    text.write_text(" ".join(SENTENCES * 3), encoding="utf-8")
    assert main(["summarize", "extract", str(text), "--method", "textrank", "--language", "en", "--json"]) == 0
    extracted = json.loads(capsys.readouterr().out)
    assert len(extracted["scores"]) == 12 and extracted["method"] == "textrank"
    scores = tmp_path / "summary.json"
    scores.write_text(json.dumps(extracted), encoding="utf-8")
    common = ["--language", "en", "--random", "5", "--json"]
    assert main(["verify", "sentences", str(text), "--scores", str(scores), *common]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["verify", "sentences", str(text), "--method", "textrank", *common]) == 0
    inline = json.loads(capsys.readouterr().out)
    assert from_file["method"] == "textrank" and from_file["curves"] == inline["curves"]
    assert from_file["p_value"] == inline["p_value"]
    # the scores of another text, a file that is not extract's output, and the scores file as --out
    other = tmp_path / "other.txt"
    other.write_text(" ".join(SENTENCES), encoding="utf-8")
    assert main(["verify", "sentences", str(other), "--scores", str(scores), "--quiet"]) == 2
    assert "scores 12 sentences but" in capsys.readouterr().err
    scores_text = scores.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"scores": ["high"]}', encoding="utf-8")
    assert main(["verify", "sentences", str(text), "--scores", str(bad), "--quiet"]) == 2
    assert "summarize extract --json" in capsys.readouterr().err
    assert main(["verify", "sentences", str(text), "--scores", str(scores), "--out", str(scores), "--quiet"]) == 2
    assert "is the input" in capsys.readouterr().err and scores.read_text() == scores_text

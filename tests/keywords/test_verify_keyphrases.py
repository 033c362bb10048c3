"""The keyphrases verifier: occurrences deleted and the BM25 margin by hand, the embedding
outcome with a toy encoder, bad input named, and on Inspec's dev split the extractors' top
keyphrases carry their documents (reversed scores never do)."""

import json
from pathlib import Path

import numpy as np
import pytest

from salience import Scores
from salience.core.base import create
from salience.core.verify import verify_subjects
from salience.exceptions import InvalidParameterError

SET = Path(__file__).resolve().parents[3] / "shared" / "data" / "keyphrase" / "inspec"
DOCS = ["Sensor placement in wireless sensor networks. Sensor placement is costly.",
        "Graph kernels compare graphs by their walks.",
        "Wireless networks carry packets."]


def _bm25(tf: dict, length: float, avg: float, df: dict, n: int, k1=1.2, b=0.75) -> float:
    # Lucene 8+: no (k1 + 1) factor (a constant scale, as in the search indexes)
    return sum(np.log1p((n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + k1 * (1 - b + b * length / avg))
               for t in tf)


def test_occurrences_are_deleted_and_the_margin_is_bm25_by_hand():
    verifier = create("verify", "keyphrases", steps=2, n_random=3)
    scores = Scores([2.0, 1.0], ids=["sensor placement", "costly"])
    result = verifier.verify(scores, document=DOCS[0], title="wireless sensor placement", collection=DOCS[1:])
    # terms (stemmed, stop words out): doc 0 "sensor placement wireless sensor network sensor placement costly"
    n, lengths = 3, [8, 5, 4]  # doc 1: graph kernel compar graph walk ("by", "their" are stop words)
    avg = sum(lengths) / 3
    df = {"wireless": 2, "sensor": 1, "placement": 1}
    other = _bm25({"wireless": 1}, 4, avg, df, n)  # doc 2 is the best other for the title
    whole = _bm25({"wireless": 1, "sensor": 3, "placement": 2}, 8, avg, df, n) - other
    assert result.curves["scores"][0] == pytest.approx(whole)
    # "sensor placement" gone (both occurrences): 4 terms left, one "sensor" (in "wireless sensor networks")
    assert result.fractions.tolist() == [0.0, 0.5, 1.0]
    without = _bm25({"wireless": 1, "sensor": 1, "placement": 0}, 4, avg, df, n) - other
    assert result.curves["scores"][1] == pytest.approx(without)
    assert result.curves["reversed"][1] == pytest.approx(
        _bm25({"wireless": 1, "sensor": 3, "placement": 2}, 7, avg, df, n) - other)


def test_the_embedding_outcome_is_the_cosine_with_the_whole_document():
    seen = []

    def encoder(texts):
        seen.extend(texts)
        return np.array([[t.lower().count("sensor") + 1.0, t.count("costly") + 1.0, 1.0] for t in texts])

    verifier = create("verify", "keyphrases", outcome="embedding", encoder=encoder, steps=2, n_random=3)
    result = verifier.verify(Scores([2.0, 1.0], ids=["sensor placement", "costly"]), document=DOCS[0])
    # both occurrences deleted, case-insensitively; the rest of the text as it was
    assert seen[0] == DOCS[0] and " in wireless sensor networks.  is costly." in seen
    whole, rest = np.array([4.0, 2.0, 1.0]), np.array([2.0, 2.0, 1.0])  # the two "sensor placement" gone
    assert result.curves["scores"][1] == pytest.approx(whole @ rest / np.linalg.norm(whole) / np.linalg.norm(rest))
    assert result.curves["scores"][0] == pytest.approx(1.0)


def test_bad_input_is_named():
    verifier = create("verify", "keyphrases", steps=2, n_random=2)
    with pytest.raises(InvalidParameterError, match="needs a collection"):
        verifier.verify({"sensor placement": 1.0}, document=DOCS[0])
    with pytest.raises(InvalidParameterError, match="no keyphrase occurs in document 0"):
        verifier.verify({"protein folding": 1.0}, document=DOCS[0], collection=DOCS[1:])
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify({"sensor placement": np.nan, "costly": 1.0}, document=DOCS[0], collection=DOCS[1:])
    with pytest.raises(InvalidParameterError, match="document 1 is empty"):
        verifier.verify({"costly": 1.0}, document=DOCS[0], collection=["  "])
    with pytest.raises(InvalidParameterError, match="phrase -> score"):
        verifier.verify([1.0, 2.0], document=DOCS[0], collection=DOCS[1:])
    with pytest.raises(InvalidParameterError, match="shares no term"):
        verifier.verify({"costly": 1.0}, document=DOCS[0], title="zebra", collection=DOCS[1:])
    with pytest.raises(InvalidParameterError, match="outcome"):
        create("verify", "keyphrases", outcome="rouge")
    with pytest.raises(InvalidParameterError, match="2 keyphrase scores for 1 documents"):
        verifier.verify_collection([{"costly": 1.0}] * 2, DOCS, subjects=[0])


@pytest.mark.skipif(not SET.exists(), reason="needs ../shared/data (keyphrase/inspec)")
def test_on_inspec_dev_the_extractors_top_keyphrases_carry_their_documents():
    from salience.keywords import extract_keyphrases_batch

    docs = [json.loads(line) for line in (SET / "docs.jsonl").open(encoding="utf-8")]
    dev = set(json.loads((SET / "splits.json").read_text())["dev"])
    texts = [d["text"] for d in docs]
    subjects = [i for i, d in enumerate(docs) if d["id"] in dev][:30]
    titles = [texts[i].split("\n")[0] for i in subjects]
    verifier = create("verify", "keyphrases", n_random=10)
    for method in ("yake", "textrank"):
        scores = extract_keyphrases_batch([texts[i] for i in subjects], k=20, method=method)
        pooled = verify_subjects(verifier.verify_collection(scores, texts, titles=titles, subjects=subjects))
        assert pooled.verdict == "faithful" and pooled.p_value < 0.01, method
        reversed_scores = [Scores(-s.values, ids=s.ids) for s in scores]
        pooled = verify_subjects(verifier.verify_collection(reversed_scores, texts, titles=titles, subjects=subjects))
        assert pooled.verdict == "inverted", method


def test_verify_keyphrases_from_the_command_line_and_after_keywords_extract(tmp_path, capsys):
    from salience.cli import main

    docs = tmp_path / "docs.jsonl"
    records = [{"id": "a", "text": "Wireless sensor placement\n" + DOCS[0] * 2},
               {"id": "b", "text": "Graph kernels\n" + DOCS[1]}, {"id": "c", "text": "Packets\n" + DOCS[2]}]
    docs.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = tmp_path / "check.json"
    assert main(["verify", "keyphrases", str(docs), "--random", "4", "--steps", "3", "--out", str(report),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(report.read_text())
    assert printed["verdict"] == saved["verdict"] and saved["method"] == "yake_rake" and saved["n_subjects"] == 3
    assert [s["id"] for s in saved["subjects"]] == ["a", "b", "c"] and saved["format"] == "salience.verification"
    # the scoring command's output file, verified as it is
    assert main(["keywords", "extract", str(docs), "-k", "5", "--language", "en"]) == 0
    extracted = tmp_path / "kp.jsonl"
    extracted.write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["verify", "keyphrases", str(docs), "--keyphrases", str(extracted), "--random", "4", "--out",
                 str(report), "--json"]) == 0  # over its own earlier report
    again = json.loads(capsys.readouterr().out)
    assert again["method"] == "given" and again["n_subjects"] == 3
    # bad input named
    assert main(["verify", "keyphrases", str(docs), "--out", str(docs), "--quiet"]) == 2
    assert "is the input" in capsys.readouterr().err
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text(json.dumps({"id": "zz", "keyphrases": [{"phrase": "x", "score": 1.0}]}) + "\n")
    assert main(["verify", "keyphrases", str(docs), "--keyphrases", str(stranger)]) == 2
    assert "'zz'" in capsys.readouterr().err
    assert main(["verify", "keyphrases", str(docs), "--random", "1"]) == 2
    assert "--random must be at least 2" in capsys.readouterr().err

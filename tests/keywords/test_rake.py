import json

import pytest

from salience.keywords import evaluate_keyphrases, extract_keyphrases_batch, score_candidates
from tests.conftest import data_path, read_jsonl

TEXT = "Fast graph kernels compare graphs. Graph kernels are fast."


def test_rake_by_hand():
    # runs: "fast graph kernels compare graphs" (5 words), "graph kernels" (2), "fast" (1)
    plain = score_candidates(TEXT, method="rake", language="en", by_frequency=False, degree_cap=None)
    # degree / frequency: fast 6/2, graph 12/3, kernel 7/2, compar 5/1
    assert dict(zip(plain.ids, plain.values)) == pytest.approx(
        {"fast graph kernels compare graphs": 3 + 4 + 3.5 + 5 + 4, "graph kernels": 7.5, "fast": 3.0})
    # the 5-word run adds 4 to its words' degrees: fast 5/2, graph 10/3, kernel 6/2, compar 4/1
    capped = score_candidates(TEXT, method="rake", language="en")
    assert dict(zip(capped.ids, capped.values)) == pytest.approx(
        {"fast graph kernels compare graphs": 2.5 + 10 / 3 + 3 + 4 + 10 / 3, "graph kernels": 10 / 3 + 3, "fast": 2.5})


def test_rake_by_frequency_counts_occurrences_in_long_texts():
    text = " ".join(["Sensor placement matters."] * 3 + ["Quantum entanglement swapping protocol verification."])
    rake = score_candidates(text, method="rake", language="en", long_text_words=5)
    # n-gram candidates: every word scores 3 (capped degree 3 / frequency 1 per run); x 3 occurrences
    assert rake.ids[int(rake.values.argmax())] == "sensor placement matters"
    assert rake.values.max() == pytest.approx(27.0)
    # plain RAKE: the one-off 5-word run's words score 5 each and outrank the repeated phrase
    plain = score_candidates(text, method="rake", language="en", long_text_words=5, by_frequency=False, degree_cap=None)
    assert plain.values.max() == pytest.approx(15.0)
    assert "sensor" not in plain.ids[int(plain.values.argmax())]


@pytest.mark.parametrize("dataset", ["semeval2010", "citeulike180", "fao30"])
def test_rake_is_not_empty_on_long_documents(dataset):
    # plain RAKE scored 0.000 F1@10 on these sets (a long text's one-off runs ranked first)
    root = data_path("keyphrase", dataset)
    test = set(json.loads((root / "splits.json").read_text(encoding="utf-8"))["test"])
    docs = [d for d in read_jsonl(root / "docs.jsonl") if d["id"] in test][:40]
    predictions = [s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=10, method="rake")]
    result = evaluate_keyphrases(predictions, [d["text"] for d in docs], [d["keyphrases"] for d in docs], ks=(10,))
    assert result["F1@10"] > 0.08

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


def _plain_rake(text: str, language: str = "en", by_frequency: bool = True, degree_cap=4, long_text_words: int = 1000):
    """RAKE written plainly, one word at a time over one analysed text: the reference the batch
    arrays must equal to the last bit."""
    from salience.keywords.candidates import analyze, candidates

    doc = analyze(text, language=language)
    degree, frequency = {}, {}
    start, n = 0, len(doc.words)
    while start < n:  # maximal content runs
        if not doc.content[start]:
            start += 1
            continue
        end = start + 1
        while end < n and doc.content[end] and not doc.breaks[end] and doc.sentence[end] == doc.sentence[start]:
            end += 1
        added = end - start if degree_cap is None else min(end - start, degree_cap)
        for s in doc.stems[start:end]:
            frequency[s] = frequency.get(s, 0.0) + 1.0
            degree[s] = degree.get(s, 0.0) + added
        start = end
    found = candidates(doc, 3, False) if n > long_text_words else candidates(doc, 8, True)
    return {c.surface: sum(degree[s] / frequency[s] for s in c.key) * (c.frequency if by_frequency else 1)
            for c in found.values()}


@pytest.mark.parametrize("options", [{}, {"by_frequency": False, "degree_cap": None}, {"degree_cap": 2},
                                     {"long_text_words": 40}])
def test_batched_rake_equals_the_plain_loop(options):
    texts = [TEXT, "", "the of and", "Sensor networks. " * 30 + "Graph kernels, fast graph kernels compare graphs.",
             "Quantum error correction codes protect qubits; surface codes are quantum error correction codes."]
    batched = extract_keyphrases_batch(texts, method="rake", language="en", k=100, batch_size=2, **options)
    for text, scores in zip(texts, batched):
        expected = _plain_rake(text, **options)
        assert dict(zip(scores.ids, scores.values.tolist())) == expected  # exact: the same sums in the same order
        assert all(a >= b for a, b in zip(scores.values, scores.values[1:]))  # best first


def test_batched_rake_equals_the_plain_loop_on_real_abstracts():
    root = data_path("keyphrase", "inspec")
    dev = set(json.loads((root / "splits.json").read_text(encoding="utf-8"))["dev"])
    texts = [d["text"] for d in read_jsonl(root / "docs.jsonl") if d["id"] in dev][:200]
    for text, scores in zip(texts, extract_keyphrases_batch(texts, method="rake", language="en", k=1000)):
        assert dict(zip(scores.ids, scores.values.tolist())) == _plain_rake(text)

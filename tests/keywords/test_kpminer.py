import json
import math

import pytest

from salience.cli import main
from salience.core.base import create
from salience.exceptions import InvalidParameterError
from salience.keywords import DocumentFrequency, KpMiner, evaluate_keyphrases, extract_keyphrases_batch, score_candidates
from tests.conftest import data_path, read_jsonl

# runs: "graph kernels compare graphs" (words 0-3), "graph kernels" (4-5), "fast" (7), "sensor networks fail" (8-10)
TEXT = "Graph kernels compare graphs. Graph kernels are fast. Sensor networks fail."
OTHERS = ["Sensor networks are cheap.", "Graph kernels again."]


def _values(scores) -> dict:
    return dict(zip(scores.ids, scores.values.tolist()))


def test_kpminer_by_hand():
    # no document frequencies: frequency alone. 4 kept occurrences, 3 of them multi-word:
    # boost min(4 / (2.3 x 3), 3)
    boost = 4 / (2.3 * 3)
    assert _values(score_candidates(TEXT, method="kpminer", language="en")) == pytest.approx(
        {"graph kernels compare graphs": boost, "graph kernels": boost, "fast": 1.0, "sensor networks fail": boost})
    # log2(N / df) with N = 3 texts + 1; the 4-word run is no n-gram of the model (df 0 -> 1)
    model = DocumentFrequency(language="en").fit([TEXT] + OTHERS)
    assert model.df[("graph", "kernel")] == 2 and model.df[("fast",)] == 1
    assert _values(score_candidates(TEXT, method="kpminer", language="en", document_frequency=model)) == pytest.approx(
        {"graph kernels compare graphs": 2 * boost, "graph kernels": math.log2(4 / 2) * boost, "fast": 2.0,
         "sensor networks fail": math.log2(4 / 1) * boost})


def test_candidates_after_the_cutoff_rank_after_the_kept_ones_by_their_weight():
    model = DocumentFrequency(language="en").fit([TEXT] + OTHERS)
    scores = score_candidates(TEXT, method="kpminer", language="en", document_frequency=model, cutoff=6)
    # kept: the two runs starting before word 6 (2 occurrences, both multi-word): boost 2 / (2.3 x 2);
    # "fast" (word 7) and "sensor networks fail" (word 8) missed the cutoff: they keep their weight,
    # and the kept ones are lifted above the best of them (fast's 2)
    boost = 2 / (2.3 * 2)
    assert _values(scores) == pytest.approx({"graph kernels compare graphs": 2 + 2 * boost, "graph kernels": 2 + boost,
                                             "fast": 2.0, "sensor networks fail": 2 * boost})
    assert scores.ranked_ids()[:2] == ["graph kernels compare graphs", "graph kernels"]
    # no cutoff: every candidate kept, as without one
    assert _values(score_candidates(TEXT, method="kpminer", language="en", document_frequency=model, cutoff=None)) == \
        pytest.approx(_values(score_candidates(TEXT, method="kpminer", language="en", document_frequency=model)))


def test_min_frequency_holds_in_long_texts_only_and_never_empties_the_list():
    text = "Sensor placement matters. " * 3 + "Quantum entanglement swapping protocol verification."
    # a long text (n-gram candidates): only the recurring phrase's n-grams occur 3 times; the one-off
    # ones still follow, by their weight
    long = score_candidates(text, method="kpminer", language="en", long_text_words=5)
    ranked = long.ranked_ids()
    assert set(ranked[:6]) == {"sensor", "placement", "matters", "sensor placement", "placement matters",
                               "sensor placement matters"}
    assert len(ranked) == 6 + 5 + 4 + 3 and "quantum entanglement swapping" in ranked
    # every candidate once: all miss min_frequency (none kept, no boost), and each scores its weight
    once = "Quantum entanglement swapping protocol verification. Graph kernels compare trees."
    plain = score_candidates(once, method="kpminer", language="en", long_text_words=3)
    assert len(plain) == (5 + 4 + 3) + (4 + 3 + 2) and plain.values.tolist() == [1.0] * len(plain)
    # the same text short: every candidate kept (min_frequency does not apply)
    short = score_candidates(once, method="kpminer", language="en")
    assert len(short) == 2 and set(short.ids) == {"quantum entanglement swapping protocol verification",
                                                  "graph kernels compare trees"}


def test_parameters_are_checked():
    for bad in ({"cutoff": 0}, {"min_frequency": 0}, {"alpha": 0.0}, {"sigma": 0.5}, {"cutoff": 2.5}):
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            create("keywords", "kpminer", **bad)
    assert isinstance(create("keywords", "kpminer", cutoff=None), KpMiner)


def test_fit_and_the_fused_method_learn_the_texts_frequencies():
    texts = [TEXT] + OTHERS
    fitted = create("keywords", "kpminer", k=3, language="en").fit(texts)
    model = DocumentFrequency(language="en").fit(texts)
    assert [s.ids for s in fitted.score_batch(texts)] == [
        s.ids for s in extract_keyphrases_batch(texts, k=3, method="kpminer", language="en", document_frequency=model)]
    fused = create("keywords", "fused", methods=["kpminer", "yake"], language="en")
    assert fused._prepare(texts, "en")["document_frequency"].df == model.df


def test_cli_sets_its_parameters_and_evaluate_learns_the_frequencies(tmp_path, capsys):
    doc = tmp_path / "doc.txt"
    doc.write_text(TEXT)
    assert main(["keywords", "extract", str(doc), "--method", "kpminer", "--language", "en", "--param", "cutoff=6",
                 "-k", "4", "--json"]) == 0
    # no frequencies: weights are frequencies; two kept multi-word occurrences, boost 2 / (2.3 x 2);
    # the kept ones lifted by fast's 1
    boost = 2 / (2.3 * 2)
    assert {k["phrase"]: k["score"] for k in json.loads(capsys.readouterr().out)["keyphrases"]} == pytest.approx(
        {"graph kernels compare graphs": 1 + boost, "graph kernels": 1 + boost, "fast": 1.0,
         "sensor networks fail": boost})
    assert main(["keywords", "extract", str(doc), "--method", "kpminer", "--param", "cutoff=0"]) == 2
    assert "cutoff" in capsys.readouterr().err
    # records are one corpus: their document frequencies, learned as fit() learns them
    records = tmp_path / "docs.jsonl"
    records.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate([TEXT] + OTHERS)))
    assert main(["keywords", "extract", str(records), "--method", "kpminer", "--language", "en", "-k", "4"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    fitted = create("keywords", "kpminer", k=4, language="en").fit([TEXT] + OTHERS)
    assert [[(p["phrase"], p["score"]) for p in r["keyphrases"]] for r in lines] == [
        list(zip(s.ids, s.values.tolist())) for s in fitted.score_batch([TEXT] + OTHERS)]
    assert lines[0]["keyphrases"][0] == {"phrase": "fast", "score": 2.0}  # log2(4 / 1), not frequency alone
    gold = tmp_path / "gold.jsonl"
    records = [{"text": TEXT, "keyphrases": ["sensor networks fail"]},
               {"text": OTHERS[0], "keyphrases": ["sensor networks"]}, {"text": OTHERS[1], "keyphrases": ["graph kernels"]}]
    gold.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["keywords", "evaluate", str(gold), "--method", "kpminer", "--language", "en", "-k", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    texts = [r["text"] for r in records]
    model = DocumentFrequency(language="en").fit(texts)
    expected = evaluate_keyphrases(
        [s.ids for s in extract_keyphrases_batch(texts, k=1, method="kpminer", language="en", document_frequency=model)],
        texts, [r["keyphrases"] for r in records], (1,))
    assert result["method"] == "kpminer" and result["all_gold"]["F1@1"] == pytest.approx(expected["F1@1"])


@pytest.mark.parametrize("dataset", ["semeval2010"])
def test_kpminer_on_long_scientific_papers(dataset):
    """SemEval-2010's full papers: KP-Miner's early-and-often filter lifts tf-idf well above
    plain tf-idf on the dev split (0.216 against 0.126 F1@10 when written)."""
    root = data_path("keyphrase", dataset)
    dev = set(json.loads((root / "splits.json").read_text(encoding="utf-8"))["dev"])
    docs = [d for d in read_jsonl(root / "docs.jsonl") if d["id"] in dev][:40]
    texts, golds = [d["text"] for d in docs], [d["keyphrases"] for d in docs]
    model = DocumentFrequency().fit(texts)
    f1 = {method: evaluate_keyphrases([s.ids for s in extract_keyphrases_batch(texts, k=10, method=method,
                                                                               document_frequency=model)],
                                      texts, golds, ks=(10,))["F1@10"] for method in ("kpminer", "tfidf")}
    assert f1["kpminer"] > 0.18 and f1["kpminer"] > f1["tfidf"] + 0.05, f1


@pytest.mark.parametrize("method", ["kpminer", "tfidf"])
def test_the_clis_document_frequencies_use_the_methods_stop_words(tmp_path, capsys, method):
    # with en_full, SMART's vague words ("novel", "using") stay in candidates: the frequencies the
    # CLI learns must count those candidates, as fit() does with the same stop words
    texts = ["We propose a novel method using new sensor placement. Novel method results.",
             "A novel method for graph kernels.", "Sensor placement matters."]
    records = tmp_path / "docs.jsonl"
    records.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    argv = ["keywords", "extract", str(records), "--method", method, "--language", "en", "-k", "5",
            "--param", "stopwords=en_full"]
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    fitted = create("keywords", method, k=5, language="en", stopwords="en_full").fit(texts)
    expected = [list(zip(s.ids, s.values.tolist())) for s in fitted.score_batch(texts)]
    assert [[(p["phrase"], p["score"]) for p in r["keyphrases"]] for r in lines] == expected
    assert any("novel" in phrase for phrase, _ in expected[0])
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"text": t, "keyphrases": ["novel method"]}) + "\n" for t in texts))
    assert main(["keywords", "evaluate", str(gold), "--method", method, "--language", "en", "-k", "1", "--json",
                 "--param", "stopwords=en_full"]) == 0
    result = json.loads(capsys.readouterr().out)
    top = [s.ids[:1] for s in fitted.score_batch(texts)]
    assert result["all_gold"]["F1@1"] == pytest.approx(
        evaluate_keyphrases(top, texts, [["novel method"]] * 3, (1,))["F1@1"])

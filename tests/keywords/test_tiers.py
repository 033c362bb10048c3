"""The keyphrase tiers and the fused method: surfaces, fusion by hand, and bad input."""

import json
import time
import tracemalloc
import warnings

import pytest

from salience import InvalidParameterError
from salience.cli import main
from salience.core.base import create
from salience.keywords import extract_keyphrases, extract_keyphrases_batch
from salience.keywords.tiers import TIERS, tier_method
from salience.text.languages import LanguageWarning

ABSTRACT = ("Wireless sensor networks monitor large areas with many cheap sensors. Sensor placement decides the "
            "coverage of a wireless sensor network. We propose a sequential deployment of sensors that minimises path "
            "exposure, and evaluate target detection in simulated sensor networks.")


def test_tier_resolution():
    assert tier_method(None, None, {}) == ("yake_rake", {})  # the fast tier is the default
    assert tier_method("rake", None, {"k": 3}) == ("rake", {"k": 3})
    name, params = tier_method(None, "best", {"depth": 10})
    assert name == TIERS["best"][0] and params["depth"] == 10
    with pytest.raises(InvalidParameterError, match="not both"):
        tier_method("rake", "best", {})
    with pytest.raises(InvalidParameterError, match="unknown tier 'slow'"):
        tier_method(None, "slow", {})


def test_fused_is_rrf_of_its_methods_keyed_by_stems():
    # by hand: RRF (k=60) over the stemmed keys of each method's ranking
    from salience.keywords.evaluate import normalize_phrase

    members = ["yake", "rake"]
    fused = create("keywords", "fused", k=50, methods=members, language="en").score(ABSTRACT)
    total, surface = {}, {}
    for method in members:
        seen = []
        for phrase in create("keywords", method, k=30, language="en").score(ABSTRACT).sorted().ids:
            key = normalize_phrase(phrase)
            if key not in seen:
                seen.append(key)
                surface.setdefault(key, phrase)
        for rank, key in enumerate(seen, start=1):
            total[key] = total.get(key, 0.0) + 1 / (60 + rank)
    assert dict(zip(map(normalize_phrase, fused.ids), fused.values)) == pytest.approx(total)
    assert fused.ids[0] == surface[max(total, key=total.get)]


def test_case_and_inflection_variants_are_one_candidate():
    text = "Sensor Networks are cheap. A sensor network is cheap. Sensor networks sense."
    phrases = extract_keyphrases(text, tier="best", candidates_from="auto", language="en").ids
    from salience.keywords.evaluate import normalize_phrase

    keys = [normalize_phrase(p) for p in phrases]
    assert len(keys) == len(set(keys)) and "sensor network" in keys


def test_fused_learns_document_frequencies_from_the_batch():
    batch = [ABSTRACT, "Graph kernels compare graphs. We propose a method.", "Sensor data. We propose a method."]
    fused = extract_keyphrases_batch(batch, k=5, method="fused", methods=["tfidf", "yake"], language="en")
    assert all(len(s) > 0 for s in fused)
    alone = extract_keyphrases(batch[1], k=5, method="fused", methods=["tfidf", "yake"], language="en")
    assert fused[1].ids != alone.ids or fused[1].values.tolist() != alone.values.tolist()


def test_bad_fused_parameters():
    with pytest.raises(InvalidParameterError, match="methods"):
        create("keywords", "fused", methods=["yake"])
    with pytest.raises(InvalidParameterError, match="methods"):
        create("keywords", "fused", methods=["yake", "nope"])
    with pytest.raises(InvalidParameterError, match="one number per method"):
        create("keywords", "fused", methods=["yake", "rake"], weights=[1.0])
    with pytest.raises(InvalidParameterError, match="'embed', which is not one of methods"):
        create("keywords", "fused", methods=["yake", "rake"], method_params={"embed": {"diversity": 0.1}})
    with pytest.raises(InvalidParameterError, match="rrf_k"):
        create("keywords", "fused", methods=["yake", "rake"], fusion_params={"rrf_k": -1})


def test_text_shorter_than_a_candidate_and_a_language_without_stop_words():
    assert len(extract_keyphrases("the of", tier="best")) == 0
    # Maltese is not among the stop-word tables: detected as undetermined, read on statistics, with a warning
    maltese = ("Il-Gvern ħabbar pjan ġdid għall-enerġija rinnovabbli. Il-pjan tal-enerġija rinnovabbli jnaqqas "
               "l-emissjonijiet. L-enerġija rinnovabbli hija prijorità tal-Gvern.")
    with pytest.warns(LanguageWarning):
        phrases = extract_keyphrases(maltese, tier="best").ids
    assert any("enerġija" in p for p in phrases)  # (its own most frequent words are its stop words)


def test_a_tagger_that_is_not_installed_falls_back_with_its_name():
    with pytest.warns(LanguageWarning, match="salience\\[pos\\]"):
        phrases = extract_keyphrases(ABSTRACT, tier="best", tagger="xx_not_a_pipeline").ids
    assert phrases and any("sensor" in p for p in phrases)


def test_a_20_megabyte_text_is_bounded_in_time_and_memory():
    text = (ABSTRACT + " ") * (20_000_000 // (len(ABSTRACT) + 1))
    tracemalloc.start()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cut to MAX_TEXT_CHARS is announced
        phrases = extract_keyphrases(text, tier="best").ids
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert any("sensor" in p for p in phrases)
    assert seconds < 120 and peak < 1_500_000_000


def test_cli_and_service_take_a_tier(tmp_path, capsys):
    path = tmp_path / "a.txt"
    path.write_text(ABSTRACT, encoding="utf-8")
    assert main(["keywords", "extract", str(path), "--tier", "best", "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == TIERS["best"][0] and out["tier"] == "best" and len(out["keyphrases"]) == 3
    assert main(["keywords", "extract", str(path), "--tier", "slow"]) != 0
    assert "invalid choice: 'slow'" in capsys.readouterr().err
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"text": ABSTRACT, "keyphrases": ["wireless sensor network"]}) + "\n", encoding="utf-8")
    assert main(["keywords", "evaluate", str(gold), "--tier", "best", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all_gold"]["F1@5"] > 0


def test_yake_rake_is_rrf_of_yake_and_rake_by_hand():
    from salience.keywords import score_candidates

    # by hand: each method's ranking of the text's candidates (1-based, best first, ties by first
    # occurrence), 1 / (20 + rank) from each method's best 30; RAKE ranks its own candidates (whole runs)
    from salience.keywords.evaluate import normalize_phrase

    def ranks(scores):  # keyed by stems: a candidate's surface may be another inflection in each method
        order = sorted(range(len(scores)), key=lambda i: -scores.values[i])  # stable: ties by first occurrence
        return {normalize_phrase(scores.ids[i]): r for r, i in enumerate(order, start=1)}

    yake = ranks(score_candidates(ABSTRACT, method="yake", language="en"))
    rake = ranks(score_candidates(ABSTRACT, method="rake", language="en"))
    expected = {p: (1 / (20 + r) if r <= 30 else 0.0) + (1 / (20 + rake[p]) if rake.get(p, 99) <= 30 else 0.0)
                for p, r in yake.items()}
    assert set(rake) <= set(yake)  # RAKE's whole runs are among YAKE's candidates, with their sub-phrases
    fused = score_candidates(ABSTRACT, method="yake_rake", language="en")
    assert dict(zip(map(normalize_phrase, fused.ids), fused.values.tolist())) == pytest.approx(expected)
    # the top: RRF's sum, not either method's alone
    top = create("keywords", "yake_rake", k=3, language="en").score(ABSTRACT)
    assert list(map(normalize_phrase, top.ids)) == sorted(expected, key=lambda p: (-expected[p], list(yake).index(p)))[:3]
    # French texts: YAKE alone (RAKE lowered the French and Portuguese dev sets)
    french = ("Les réseaux de capteurs sans fil surveillent de grandes zones. Le placement des capteurs décide de la "
              "couverture du réseau de capteurs.")
    assert score_candidates(french, method="yake_rake", language="fr").ids == score_candidates(
        french, method="yake", language="fr").ids
    assert score_candidates(french, method="yake_rake", language="fr", rake_languages=["en", "fr"]).values.max() < 1
    with pytest.raises(InvalidParameterError, match="rake_languages"):
        create("keywords", "yake_rake", rake_languages="en")

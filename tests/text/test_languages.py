import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.text.languages import (LANGUAGES, LanguageWarning, check_language, detect_language, detect_languages,
                                     frequent_words, resolve_language, stemmer_for, stopwords_for)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.exists(), reason="needs ../shared/data (the keyphrase sets and the dsir pool)")

SAMPLES = {
    "en": "The committee approved the budget after a long debate about the costs of the new hospital.",
    "fr": "Le comité a approuvé le budget après un long débat sur les coûts du nouvel hôpital.",
    "pt": "O comité aprovou o orçamento depois de um longo debate sobre os custos do novo hospital.",
    "es": "El comité aprobó el presupuesto después de un largo debate sobre los costes del nuevo hospital.",
    "de": "Der Ausschuss hat den Haushalt nach einer langen Debatte über die Kosten des neuen Krankenhauses gebilligt.",
    "it": "Il comitato ha approvato il bilancio dopo un lungo dibattito sui costi del nuovo ospedale.",
    "ru": "Комитет утвердил бюджет после долгих споров о стоимости новой больницы, и это было важно для всех.",
    "el": "Η επιτροπή ενέκρινε τον προϋπολογισμό μετά από μια μακρά συζήτηση για το κόστος του νέου νοσοκομείου.",
    "zh": "委员会在关于新医院费用的长时间辩论之后批准了预算。这是一个重要的决定。",
    "ja": "委員会は新しい病院の費用についての長い議論の後で予算を承認しました。",
}


def test_at_least_twenty_languages_have_stop_words_and_most_a_stemmer():
    with_stop_words = [code for code, lang in LANGUAGES.items() if lang.has_stopwords]
    stemmed = [code for code, lang in LANGUAGES.items() if lang.snowball]
    assert len(with_stop_words) >= 20 and len(stemmed) >= 20
    assert {"les", "des", "de"} <= stopwords_for("fr") and {"os", "das", "de"} <= stopwords_for("pt")
    assert "the" in stopwords_for("en") and "research" not in stopwords_for("en")  # salience's own English list
    assert stemmer_for("fr")("manifestations") == "manifest" and stemmer_for("ru")("больницы") == "больниц"
    assert stemmer_for("vi") is None  # no Snowball stemmer: not stemmed


def test_language_names_codes_and_errors():
    assert resolve_language("French") == "fr" and resolve_language("pt-BR") == "pt" and check_language("AUTO") == "auto"
    with pytest.raises(InvalidParameterError, match="unknown language 'xx'.*ISO 639-1 codes af, ar"):
        resolve_language("xx")
    with pytest.raises(InvalidParameterError, match="must be a str"):
        resolve_language(3)


def test_detection_of_scripts_and_close_languages():
    codes = list(SAMPLES)
    assert detect_languages([SAMPLES[c] for c in codes]) == codes
    assert detect_language("") == "und" and detect_language("42 17") == "und"
    assert detect_language("in a") == "en"  # a tie between many lists goes to the more written language
    with pytest.raises(InvalidParameterError, match="not one str"):
        detect_languages("one text")


def test_frequent_words_stand_in_for_a_stop_list():
    counts = np.array([50, 3, 40, 2, 5, 1])
    # the most frequent words until 30% of the 101 tokens are covered, each seen 3 times or more
    assert frequent_words(counts).tolist() == [0]
    assert frequent_words(counts, share=0.6).tolist() == [0, 2]
    assert frequent_words(np.array([2, 2])).tolist() == []


@needs_data
def test_detection_accuracy_on_the_keyphrase_sets_and_the_udhr():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from languages import UDHR_TO_ISO1, read_udhr

    for name in ("wikinews_fr", "pt_bn_kp110", "kdd"):
        docs = [json.loads(line) for line in open(DATA / "keyphrase" / name / "docs.jsonl", encoding="utf-8")]
        assert detect_languages([d["text"] for d in docs]) == [d.get("language", "en") for d in docs]
    udhr = read_udhr()
    supported = {code for code, lang in LANGUAGES.items() if lang.has_stopwords}
    truth = [UDHR_TO_ISO1.get(c) for c, _ in udhr]
    predicted = detect_languages([t for _, t in udhr])
    pairs = [(p, t) for p, t in zip(predicted, truth) if t in supported]
    assert len(pairs) >= 60 and sum(p == t for p, t in pairs) / len(pairs) >= 0.9  # 0.926 measured
    others = [p for p, t in zip(predicted, truth) if t not in supported]
    assert sum(p == "und" for p in others) / len(others) >= 0.4  # unsupported ones: 0.424 left undetermined


def test_keyphrases_in_many_scripts():
    from salience.keywords import extract_keyphrases, extract_keyphrases_batch

    zh = "机器学习是人工智能的一个分支。机器学习算法从数据中学习。深度学习是机器学习的一种方法。"
    phrases = extract_keyphrases(zh, k=5)
    assert phrases.ids and all(" " not in p for p in phrases.ids)  # ideographs are written without spaces
    assert any("机器学习" in p or p == "机器" for p in phrases.ids)
    ru = ("Машинное обучение изучает алгоритмы. Алгоритмы машинного обучения строят модели по данным. "
          "Машинное обучение применяется в медицине.")
    el = "Η μηχανική μάθηση μελετά αλγορίθμους. Οι αλγόριθμοι μηχανικής μάθησης χτίζουν μοντέλα από δεδομένα."
    fr = "Le réchauffement climatique menace les glaciers. Les glaciers des Alpes fondent à cause du réchauffement climatique."
    out = extract_keyphrases_batch([ru, el, fr], k=3)
    assert "машинное обучение" in out[0].ids
    assert any("μάθηση" in p or "μηχανική" in p for p in out[1].ids)
    assert "réchauffement climatique" in out[2].ids and "les" not in " ".join(out[2].ids).split()


def test_undetermined_language_warns_and_falls_back_without_a_crash():
    from salience.keywords import extract_keyphrases

    # Yoruba-like text: no stop list of salience's matches it
    text = ("Gbogbo ènìyàn ni a bí ní òmìnira; iyì àti ẹ̀tọ́ kọ̀ọ̀kan sì dọ́gba. Wọ́n ní ẹ̀bùn ti làákàyè àti ti ẹ̀rí-ọkàn. "
            "Ó yẹ kí wọn ó máa hùwà sí ara wọn gẹ́gẹ́ bí ọmọ ìyá. ") * 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        phrases = extract_keyphrases(text, k=5, language="yo")  # a stop list, no stemmer
        undetermined = extract_keyphrases("Zorblat quim vexo. Zorblat quim tarn. Vexo tarn zorblat.", k=3)
    messages = [str(w.message) for w in caught if issubclass(w.category, LanguageWarning)]
    assert any("yoruba (yo) has no Snowball stemmer" in m for m in messages)
    assert any("not detected" in m for m in messages)
    assert len(phrases) == 5 and len(undetermined) > 0
    # no English stop list for an undetermined text: its own most frequent word is the stop word
    assert "zorblat" not in " ".join(undetermined.ids).split()


@needs_data
def test_a_huge_text_is_cut_with_a_warning_and_bounded_memory(capsys):
    import tracemalloc

    from salience.keywords import extract_keyphrases_batch

    with gzip.open(DATA / "dsir" / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as f:
        pieces = [json.loads(line)["text"] for _, line in zip(range(2000), f)]
    big = "\n\n".join(pieces)
    big = (big + "\n\n") * (20_000_000 // len(big) + 1)
    big = big[:20_000_000]
    tracemalloc.start()
    with pytest.warns(LanguageWarning, match="text 1 has 20,000,000 characters"):
        out = extract_keyphrases_batch(["Graph kernels compare graphs.", big, ""], k=5, show_progress=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(out[1]) == 5 and out[2].ids == [] and out[0].ids
    assert peak < 600e6  # about 45 bytes per character read, of the 4M read
    assert "keyphrases" in capsys.readouterr().err  # the progress bar


def test_stop_word_lists_by_language_for_any_tokenizer():
    from salience.text import Tokenizer, get_stopwords

    assert get_stopwords("fr") == stopwords_for("fr") and get_stopwords("German") == stopwords_for("de")
    assert get_stopwords("en") != stopwords_for("en")  # "en" stays the short Lucene list of the search tokenizer
    assert Tokenizer(stopwords="fr", stemmer="french").tokenize("Les manifestations contre la réforme") == ["manifest", "réform"]
    with pytest.raises(InvalidParameterError, match="unknown stopword list 'xx'"):
        get_stopwords("xx")


def test_one_text_is_detected_as_in_a_batch():
    texts = list(SAMPLES.values()) + ["", "42", "in a", "l'avion d'un x-ray", "Zorblat quim vexo."]
    assert [detect_language(t) for t in texts] == detect_languages(texts)


def test_a_batch_detects_as_one_text_by_dense_or_sparse_votes(monkeypatch):
    import salience.text.languages as languages

    texts = list(SAMPLES.values()) + ["", "42", "l’avion d’un x-ray", "Zorblat quim vexo.", "日本語のテキストです。"]
    texts += ["the " * 2500 + "der die das und " * 500, "x" * 90_000 + " le la les des", "Der Hund und die Katze. " * 120]
    one = [detect_language(t) for t in texts]
    assert detect_languages(texts) == one
    assert [detect_languages([t])[0] for t in texts] == one
    monkeypatch.setattr(languages, "_DENSE_VOTE_CELLS", 0)  # every batch counted in a sparse matrix
    assert detect_languages(texts) == one


def test_the_ascii_path_detects_as_the_regex(monkeypatch):
    import random

    import salience.text.languages as languages

    rng = random.Random(3)
    words = ["the", "and", "de", "la", "der", "und", "don't", "it's", "l'", "-la", "--", "'", "£", "x", "o-", "_", "est"]
    texts = [" ".join(rng.choice(words) + rng.choice(["", "-", "'", "."]) for _ in range(rng.randint(0, 40)))
             for _ in range(1500)]
    texts += ["the " * 2500, "the " * 10 + "x" * 90_000 + " der die das und"]
    fast = [detect_language(t) for t in texts]
    monkeypatch.setattr(languages, "ascii_joined_words", lambda text: None)
    assert fast == [detect_language(t) for t in texts]

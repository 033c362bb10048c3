
import numpy as np
import pytest

from salience import InvalidParameterError
from salience.core.faithfulness import deletion_curve
from salience.explain import Lime, attribute_text, attribution_html, text_units
from salience.explain.text import masked_texts



def polarity(texts):
    return [t.count("good") + t.count("great") - t.count("bad") for t in texts]


def test_words_tokens_and_sentences():
    text = "A good film, not bad. Truly great!"
    assert [text[a:b] for a, b in text_units(text)] == ["A", "good", "film", "not", "bad", "Truly", "great"]
    assert [text[a:b] for a, b in text_units(text, "token")][:4] == ["A", "good", "film", ","]
    assert [text[a:b] for a, b in text_units(text, "sentence")] == ["A good film, not bad.", "Truly great!"]
    exact = attribute_text(polarity, text, method="exact_shapley")
    assert exact.feature_names == ["A", "good", "film", "not", "bad", "Truly", "great"]
    assert exact.values[0].tolist() == [0.0, 1.0, 0.0, 0.0, -1.0, 0.0, 1.0]  # additive model: exact credit
    by_sentence = attribute_text(polarity, text, unit="sentence", method="occlusion")
    assert by_sentence.values[0].tolist() == [0.0, 1.0]
    masked = attribute_text(polarity, text, method="occlusion", mask="[MASK]")
    assert masked.values[0].tolist() == [0.0, 1.0, 0.0, 0.0, -1.0, 0.0, 1.0]
    page = attribution_html(exact, title="why")
    assert page.count("<span") == 7 and "rgba(214, 39, 40, 1.000)" in page and "rgba(31, 119, 180, 1.000)" in page
    assert "<h3>why</h3>" in page and "http" not in page


def test_bad_text_input():
    with pytest.raises(InvalidParameterError, match="no words"):
        attribute_text(polarity, "   ")
    with pytest.raises(InvalidParameterError, match="unit must be one of"):
        attribute_text(polarity, "good", unit="letter")
    with pytest.raises(InvalidParameterError, match="over max_units=3: explain it by sentence"):
        attribute_text(polarity, "one two three four", max_units=3)
    with pytest.raises(InvalidParameterError, match="limited to 16 features"):
        attribute_text(polarity, " ".join(["word"] * 17), method="exact_shapley")
    with pytest.raises(InvalidParameterError, match="scorer must be a callable"):
        attribute_text("model", "good")


def test_lime_recovers_a_linear_model():
    f = lambda X: X @ np.array([3.0, -2.0, 1.0, 0.0])  # noqa: E731
    lime = Lime(f).attribute(np.ones(4), n_samples=2000, seed=0)
    assert np.abs(lime.values[0] - [3.0, -2.0, 1.0, 0.0]).max() < 0.1
    sparse = Lime(f, n_features=2).attribute(np.ones(4), n_samples=2000, seed=0)
    assert np.count_nonzero(sparse.values[0]) == 2 and set(np.flatnonzero(sparse.values[0])) == {0, 1}
    with pytest.raises(InvalidParameterError, match="n_features"):
        Lime(f, n_features=0)


def test_a_sentiment_classifier_on_real_reviews_is_explained_faithfully(movie_reviews, sentiment_classifier):
    scorer = sentiment_classifier
    review = movie_reviews[1][0][:1500]
    attribution = attribute_text(scorer, review, method="kernel_shap", n_samples=512, seed=0)
    n = len(attribution.feature_names)
    # deleting the words it ranks highest lowers the score faster than a random order
    words = lambda rows: scorer(masked_texts(review, attribution.info["spans"], rows > 0.5, ""))  # noqa: E731
    explained = deletion_curve(words, np.ones(n), attribution.values[0], baseline=np.zeros(n), steps=20).auc
    rng = np.random.default_rng(0)
    random_order = np.mean([deletion_curve(words, np.ones(n), rng.normal(size=n), baseline=np.zeros(n), steps=20).auc
                            for _ in range(5)])
    assert explained < random_order

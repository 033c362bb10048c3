"""A bi-encoder adapted here to a corpus's training groups: contrastive training brings each
query nearer its positive than its negatives, margin distillation follows a cross-encoder's
margins, the result loads as an ordinary encoder folder, and bad input is refused."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.exceptions import InvalidParameterError  # noqa: E402
from salience.models.bi_encoder import is_bi_folder, train_bi_encoder  # noqa: E402
from salience.models.cross_encoder import CrossEncoder, train_cross_encoder  # noqa: E402
from salience.models.encoders import TransformerEncoder  # noqa: E402
from tests.models.test_cross_encoder import _groups  # noqa: E402
from tests.models.tiny import tiny_encoder_folder  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(tiny_encoder_folder(tmp_path_factory.mktemp("tiny") / "encoder"))


def _wins(folder) -> float:
    """How often a group's query is nearer its positive than every one of its negatives."""
    encoder = TransformerEncoder(str(folder))
    wins = []
    for q, p, n in _groups():
        vectors = encoder.encode([q, p] + n)
        wins.append(np.argmax(vectors[1:] @ vectors[0]) == 0)
    return float(np.mean(wins))


def test_contrastive_training_ranks_positives_first_and_saves_an_encoder_folder(base, tmp_path):
    options = dict(base=base, epochs=10, batch_size=4, negatives=2, learning_rate=3e-3, max_length=32, minutes=5)
    report = train_bi_encoder(_groups(), tmp_path / "bi", **options)
    assert report["loss"] == "contrastive" and report["stopped_by"] == "epochs"
    assert report["loss_last"] < 0.5 * report["loss_first"]
    assert is_bi_folder(tmp_path / "bi") and (tmp_path / "bi" / "modules.json").is_file()
    assert _wins(tmp_path / "bi") >= 0.9 > _wins(base)
    again = train_bi_encoder(_groups(), tmp_path / "again", **options)
    assert again["loss_last"] == report["loss_last"]  # the same seed: the same run


def test_margin_distillation_follows_the_cross_encoders_margins(base, tmp_path):
    train_cross_encoder(_groups(), tmp_path / "cross", base=base, epochs=12, batch_size=4, learning_rate=2e-3,
                        max_length=32)
    report = train_bi_encoder(_groups(), tmp_path / "bi", base=base, teacher=tmp_path / "cross", epochs=10,
                              batch_size=4, negatives=2, learning_rate=3e-3, max_length=32)
    assert report["loss"] == "margin-mse" and report["loss_last"] < 0.5 * report["loss_first"]
    teacher, student = CrossEncoder(tmp_path / "cross", max_length=32), TransformerEncoder(str(tmp_path / "bi"))
    agree = []
    for q, p, n in _groups():
        judged = teacher.scores(q, [p] + n)
        vectors = student.encode([q, p] + n)
        agree.append(np.argmax(judged) == np.argmax(vectors[1:] @ vectors[0]))
    assert np.mean(agree) >= 0.8


def test_bad_input_is_refused(base, tmp_path):
    with pytest.raises(InvalidParameterError, match="teacher .* not a cross-encoder folder"):
        train_bi_encoder(_groups(), tmp_path / "x", base=base, teacher=tmp_path)
    with pytest.raises(InvalidParameterError, match="scale must be a number > 0"):
        train_bi_encoder(_groups(), tmp_path / "x", base=base, scale=0)
    with pytest.raises(InvalidParameterError, match="at least 16 are needed"):
        train_bi_encoder(_groups()[:3], tmp_path / "x", base=base)
    assert not (tmp_path / "x").exists()


def test_train_reranker_kind_bi_from_the_command_line_gives_a_dense_encoder(base, tmp_path, capsys):
    import json

    from salience.cli import main
    from salience.search import Dense

    words = ["heat flow", "wing shock", "cell protein", "stock price", "membrane cell", "shock wave", "market price",
             "heat wave", "protein membrane", "flow wave"]
    docs = [{"_id": f"d{i}", "title": f"{topic} {extra}", "text": f"the {topic} of a {topic} in the {extra} . "
             f"a {extra} in the {topic} ."} for i, (topic, extra) in enumerate((t, e) for t in words
                                                                           for e in ("market", "wing"))]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "bi"
    assert main(["search", "train-reranker", str(corpus), "--kind", "bi", "--out", str(out), "--base", base,
                 "--epochs", "2", "--batch-size", "4", "--max-length", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "bi" and report["loss"] == "contrastive" and is_bi_folder(out)
    index = Dense(encoder=str(out)).index([{"id": d["_id"], "text": d["text"]} for d in docs])
    assert len(index.search("heat flow", k=3).ids) == 3
    assert main(["search", "train-reranker", str(corpus), "--kind", "cross", "--teacher", str(out), "--out",
                 str(tmp_path / "c")]) == 2
    assert "--teacher distils a cross-encoder into a bi-encoder" in capsys.readouterr().err

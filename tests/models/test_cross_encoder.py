"""A cross-encoder trained here from an encoder's weights, starting as its bi-encoder (gated
pairs) or with a new head: the listwise loss falls, the model ranks its training positives
first, the same seed gives the same model, a killed run resumes from its checkpoint to the same
model, and the output folder is whole or absent. Gated pairs with the gate shut are the
bi-encoder exactly."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.exceptions import InvalidParameterError  # noqa: E402
from salience.models.cross_encoder import CrossEncoder, is_cross_folder, train_cross_encoder  # noqa: E402
from tests.models.tiny import tiny_encoder_folder  # noqa: E402

TOPICS = ["heat flow", "wing shock", "cell protein", "stock price", "membrane cell", "shock wave", "market price",
          "heat wave"]


def _groups():
    groups = []
    for i, topic in enumerate(TOPICS * 3):
        others = [t for t in TOPICS if t != topic]
        groups.append((topic, f"the {topic} of a {topic}", [f"the {others[(i + j) % len(others)]}" for j in range(3)]))
    return groups


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(tiny_encoder_folder(tmp_path_factory.mktemp("tiny") / "encoder"))


@pytest.mark.parametrize("start", ["bi-encoder", "head"])
def test_training_lowers_the_loss_and_ranks_positives_first_deterministically(base, tmp_path, start):
    options = dict(base=base, start=start, epochs=12, batch_size=4, negatives=3, learning_rate=2e-3, max_length=32,
                   minutes=5)
    report = train_cross_encoder(_groups(), tmp_path / "cross", **options)
    assert report["stopped_by"] == "epochs" and report["steps"] == report["planned_steps"] == 72
    assert report["loss_last"] < 0.5 * report["loss_first"]
    assert is_cross_folder(tmp_path / "cross") and not (tmp_path / ".cross.training").exists()
    judge = CrossEncoder(tmp_path / "cross", max_length=32)
    wins = [np.argmax(judge.scores(q, [p] + n)) == 0 for q, p, n in _groups()]
    assert np.mean(wins) >= 0.9
    again = train_cross_encoder(_groups(), tmp_path / "again", **options)
    assert again["loss_last"] == report["loss_last"]
    q, p, n = _groups()[0]
    assert np.array_equal(CrossEncoder(tmp_path / "again", max_length=32).scores(q, [p] + n), judge.scores(q, [p] + n))


def test_a_killed_run_resumes_from_its_checkpoint_to_the_same_model(base, tmp_path, monkeypatch):
    import torch

    options = dict(base=base, epochs=2, batch_size=4, negatives=2, learning_rate=1e-3, max_length=32, minutes=5,
                   checkpoint_every=2)
    whole = train_cross_encoder(_groups(), tmp_path / "whole", **options)
    real_step, calls = torch.optim.AdamW.step, [0]

    def dies_at_five(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt  # killed between checkpoints (after step 4's)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", dies_at_five)
    with pytest.raises(KeyboardInterrupt):
        train_cross_encoder(_groups(), tmp_path / "cut", **options)
    monkeypatch.undo()
    assert not (tmp_path / "cut").exists() and (tmp_path / ".cut.training" / "checkpoint.pt").is_file()
    resumed = train_cross_encoder(_groups(), tmp_path / "cut", **options)
    assert resumed["steps"] == whole["steps"] and resumed["loss_last"] == pytest.approx(whole["loss_last"], abs=1e-6)
    q, p, n = _groups()[3]
    np.testing.assert_allclose(CrossEncoder(tmp_path / "cut").scores(q, [p] + n),
                               CrossEncoder(tmp_path / "whole").scores(q, [p] + n), atol=1e-5)


def test_bad_training_input_is_refused(base, tmp_path):
    from tests.models.tiny import tiny_lm

    with pytest.raises(InvalidParameterError, match="at least 16 are needed"):
        train_cross_encoder(_groups()[:5], tmp_path / "x", base=base)
    model, tokenizer = tiny_lm()
    model.save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    with pytest.raises(InvalidParameterError, match="is a llama model, not a transformer encoder"):
        train_cross_encoder(_groups(), tmp_path / "x", base=str(tmp_path / "lm"))
    with pytest.raises(InvalidParameterError, match="not a model folder"):
        train_cross_encoder(_groups(), tmp_path / "x", base=str(tmp_path))
    # a checkpoint of another run (here another batch size) is refused, naming both settings
    options = dict(base=base, epochs=1, batch_size=2, negatives=1, max_length=32, checkpoint_every=1)
    work = tmp_path / ".y.training"
    from salience.models import training

    real = training._save_checkpoint

    def save_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    training._save_checkpoint = save_then_die
    try:
        with pytest.raises(KeyboardInterrupt):
            train_cross_encoder(_groups(), tmp_path / "y", **options)
    finally:
        training._save_checkpoint = real
    assert (work / "checkpoint.pt").is_file()
    with pytest.raises(InvalidParameterError, match=r"another training run \(\{'batch_size': \(2, 4\)\}"):
        train_cross_encoder(_groups(), tmp_path / "y", **{**options, "batch_size": 4})
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_train_reranker_and_rerank_with_it_from_the_command_line(base, tmp_path, capsys):
    import json

    from salience.cli import main
    from salience.core.run import Run

    words = ["heat flow", "wing shock", "cell protein", "stock price", "membrane cell", "shock wave", "market price",
             "heat wave", "protein membrane", "flow wave"]
    docs = [{"_id": f"d{i}", "title": f"{topic} {extra}", "text": f"the {topic} of a {topic} in the {extra} . "
             f"a {extra} in the {topic} ."}
            for i, (topic, extra) in enumerate((t, e) for t in words for e in ("market", "wing"))]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "cross"
    assert main(["search", "train-reranker", str(corpus), "--out", str(out), "--base", base, "--epochs", "2",
                 "--batch-size", "4", "--negatives", "2", "--max-length", "32", "--learning-rate", "1e-3",
                 "--minutes", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pairs_made"][str(corpus)]["pairs"] >= 16 and report["steps"] > 0 and is_cross_folder(out)
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q1", "text": "heat flow market"}) + "\n")
    assert main(["search", "run", str(tmp_path / "ix"), "--queries", str(queries), "-k", "5", "--out",
                 str(tmp_path / "bm25.trec")]) == 0
    capsys.readouterr()
    assert main(["search", "rerank", str(tmp_path / "bm25.trec"), "--index", str(tmp_path / "ix"), "--queries",
                 str(queries), "--judge", "cross", "--model", str(out), "--depth", "5", "--out",
                 str(tmp_path / "cross.trec")]) == 0
    assert set(Run.read_trec(tmp_path / "cross.trec")["q1"].ids) == set(Run.read_trec(tmp_path / "bm25.trec")["q1"].ids)
    assert main(["search", "rerank", str(tmp_path / "bm25.trec"), "--index", str(tmp_path / "ix"), "--queries",
                 str(queries), "--judge", "cross", "--model", str(out), "--precision", "int8", "--out",
                 str(tmp_path / "int8.trec")]) == 0
    assert set(Run.read_trec(tmp_path / "int8.trec")["q1"].ids) == set(Run.read_trec(tmp_path / "bm25.trec")["q1"].ids)
    capsys.readouterr()
    assert main(["search", "rerank", str(tmp_path / "bm25.trec"), "--index", str(tmp_path / "ix"), "--queries",
                 str(queries), "--judge", "cross", "--model", str(out), "--backend", "auto", "--out",
                 str(tmp_path / "y.trec")]) == 2
    assert "unknown backend of CrossJudge 'auto'; valid values are: onnx, torch" in capsys.readouterr().err
    assert main(["search", "rerank", str(tmp_path / "bm25.trec"), "--index", str(tmp_path / "ix"), "--queries",
                 str(queries), "--judge", "cross", "--out", str(tmp_path / "x.trec")]) == 2
    assert "--judge cross needs --model" in capsys.readouterr().err
    assert main(["search", "train-reranker", str(corpus), "--out", str(corpus), "--base", base]) == 2
    capsys.readouterr()
    assert main(["search", "train-reranker", str(corpus), "--out", str(tmp_path / "bi"), "--base", base, "--kind", "bi",
                 "--gate", "-3"]) == 2
    assert "--start and --gate say how a cross-encoder starts: they need --kind cross" in capsys.readouterr().err
    assert main(["search", "train-reranker", str(corpus), "--out", str(tmp_path / "head"), "--base", base, "--start",
                 "head", "--epochs", "1", "--max-length", "32", "--minutes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["start"] == "head"
    assert json.loads((tmp_path / "head" / "cross.json").read_text())["start"] == "head"


def test_onnx_gives_the_same_scores_and_bf16_and_int8_the_same_rankings(base, tmp_path):
    folder = tmp_path / "cross"
    train_cross_encoder(_groups(), folder, base=base, start="head", epochs=12, batch_size=4, learning_rate=2e-3,
                        max_length=32)
    groups = _groups()
    exact = [CrossEncoder(folder, max_length=32).scores(q, [p] + n) for q, p, n in groups]
    pytest.importorskip("onnxruntime")
    onnx = CrossEncoder(folder, max_length=32, backend="onnx")
    assert max(np.abs(onnx.scores(q, [p] + n) - e).max() for (q, p, n), e in zip(groups, exact)) < 1e-5
    for precision in ("bf16", "int8"):
        near = CrossEncoder(folder, max_length=32, precision=precision)
        scored = [near.scores(q, [p] + n) for q, p, n in groups]
        assert not all(np.array_equal(a, b) for a, b in zip(scored, exact))
        assert np.mean([np.argmax(a) == np.argmax(b) for a, b in zip(scored, exact)]) >= 0.9
    with pytest.raises(InvalidParameterError, match="precision 'int8' runs on the torch backend"):
        CrossEncoder(folder, precision="int8", backend="onnx")
    with pytest.raises(InvalidParameterError, match="precision must be one of fp32, bf16, int8; got 'fp16'"):
        CrossEncoder(folder, precision="fp16")


def test_gated_pairs_with_the_gate_shut_are_the_bi_encoder_and_open_as_they_train(base, tmp_path):
    """The joint pass, each segment positioned from 0 and attention between them shut, gives the
    bi-encoder's scaled cosine of separately mean-pooled texts; the trained gate moves and is
    saved; the folder is also the encoder (a sentence-transformers-style folder)."""
    import json

    import torch
    import transformers

    from salience.models.gated_pairs import gated_pairs, pair_batch

    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    encoder = transformers.AutoModel.from_pretrained(base).eval()
    queries, passages = ["heat flow", "a shock wave of the wing"], ["the heat flow of a heat flow", "stock price"]

    def alone(texts):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
        hidden = encoder(**batch).last_hidden_state
        weights = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)

    with torch.inference_mode():
        expected = (20.0 * (alone(queries) * alone(passages)).sum(-1)).numpy()
        shut = gated_pairs(encoder, gate=-1e9)(*pair_batch(tokenizer, queries, passages, 32)).numpy()
        ajar = gated_pairs(encoder, gate=0.0)(*pair_batch(tokenizer, queries, passages, 32)).numpy()
    np.testing.assert_allclose(shut, expected, atol=1e-5)
    assert np.abs(ajar - expected).max() > 1e-3  # open, the segments read each other
    train_cross_encoder(_groups(), tmp_path / "cross", base=base, epochs=4, batch_size=4, learning_rate=2e-3,
                        max_length=32)
    saved = json.loads((tmp_path / "cross" / "cross.json").read_text())
    assert saved["start"] == "bi-encoder" and saved["pooling"] == "mean" and saved["gate"] != -4.0
    assert transformers.AutoModel.from_pretrained(tmp_path / "cross").config.model_type == "bert"
    with pytest.raises(InvalidParameterError, match="runs on the torch backend; ONNX Runtime runs cross-encoders "
                                                    "with a scoring head"):
        CrossEncoder(tmp_path / "cross", backend="onnx").scores("heat", ["flow"])


def test_bad_starts_and_gates_are_refused(base, tmp_path):
    import json

    from salience.exceptions import CorruptIndexError

    with pytest.raises(InvalidParameterError, match="start must be one of bi-encoder, head; got 'tower'"):
        train_cross_encoder(_groups(), tmp_path / "x", base=base, start="tower")
    with pytest.raises(InvalidParameterError, match="gate is a finite number and only for start='bi-encoder'"):
        train_cross_encoder(_groups(), tmp_path / "x", base=base, start="head", gate=-3.0)
    with pytest.raises(InvalidParameterError, match="gate is a finite number"):
        train_cross_encoder(_groups(), tmp_path / "x", base=base, gate=float("nan"))
    assert not (tmp_path / "x").exists()
    train_cross_encoder(_groups(), tmp_path / "cross", base=base, epochs=1, batch_size=8, max_length=16)
    config = tmp_path / "cross" / "cross.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "gate": "open"}))
    with pytest.raises(CorruptIndexError, match="gate, scale and pooling are missing or not numbers"):
        CrossEncoder(tmp_path / "cross").scores("heat", ["flow"])

"""Nothing lost on the newer surface (issue 50), the model-writing commands' cases: the user's
files kept when an earlier output is written over, training checkpointed by time, models of the
wrong kind named, quantize's default group, model files' modes. Each test failed before its fix."""

import json

import numpy as np
import pytest

from salience.cli import main
from tests.test_new_surface import _corpus_rows, _jsonl, _still_there, _user_files


def test_model_writing_commands_keep_the_users_files(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_encoder_folder

    encoder = tiny_encoder_folder(tmp_path / "encoder")
    out = tmp_path / "static"
    assert main(["search", "distill", str(encoder), "--out", str(out), "--dims", "8", "--quiet"]) == 0
    placed = _user_files(out)
    assert main(["search", "distill", str(encoder), "--out", str(out), "--dims", "4", "--quiet"]) == 0
    _still_there(out, placed)
    from salience.models.static import StaticEncoder

    assert StaticEncoder(out).encode(["heat flow"]).shape == (1, 4)

    docs = [{"_id": f"d{i}", "title": f"{a} {b}", "text": f"the {a} of a {b} . a {b} in the {a} ."}
            for i, (a, b) in enumerate((a, b) for a in ("heat", "wing", "cell", "shock", "price", "membrane") for b in ("flow", "wave", "market"))]
    corpus = _jsonl(tmp_path / "corpus.jsonl", docs)
    trained = tmp_path / "bi"
    options = ["--kind", "bi", "--base", str(encoder), "--epochs", "1", "--batch-size", "4", "--max-length", "16",
               "--quiet"]
    assert main(["search", "train-reranker", str(corpus), "--out", str(trained), *options]) == 0
    placed = _user_files(trained)
    (trained / "onnx").mkdir()
    (trained / "onnx" / "model.onnx").write_bytes(b"a stale export of the earlier model")
    assert main(["search", "train-reranker", str(corpus), "--out", str(trained), *options]) == 0
    _still_there(trained, placed)
    assert not (trained / "onnx").exists()  # the earlier model's export is the command's: gone with it
    capsys.readouterr()


def test_compress_commands_keep_the_users_files(tmp_path, capsys):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = _tiny_llama_folder(tmp_path)
    calib = tmp_path / "calib.txt"
    calib.write_text(" ".join(f"w{i}" for i in np.random.default_rng(0).integers(0, 63, 400)))
    out = tmp_path / "out"
    common = ["--calib", str(calib), "--seqlen", "16", "--calib-windows", "4", "--out", str(out), "--quiet"]
    assert main(["compress", "prune", str(model), "--method", "magnitude", "--sparsity", "0.5", "--out", str(out),
                 "--quiet"]) == 0
    placed = _user_files(out)
    for command in (["compress", "prune", str(model), "--method", "wanda", "--sparsity", "0.5", *common],
                    ["compress", "quantize", str(model), "--method", "rtn", "--group", "16", "--out", str(out),
                     "--quiet"],
                    ["compress", "layers", str(model), "--remove", "1", *common],
                    ["compress", "structured", str(model), "--unit", "ffn_channels", "--fraction", "0.25",
                     "--criterion", "output", *common]):
        assert main(command) == 0, command
        _still_there(out, placed)
    assert not (out / "salience-quantize.json").exists()  # the earlier run's report went with its model
    assert transformers.AutoModelForCausalLM.from_pretrained(out).config.intermediate_size == 48
    capsys.readouterr()


def test_training_checkpoints_by_time_too(tmp_path, monkeypatch):
    """Steps of a minute each: a kill before the 100th step kept nothing; now a checkpoint is
    written every CHECKPOINT_SECONDS as well, and the run resumes from it to the same model."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.models import training
    from salience.models.cross_encoder import train_cross_encoder
    from tests.models.tiny import tiny_encoder_folder

    base = str(tiny_encoder_folder(tmp_path / "encoder"))
    words = ["heat", "flow", "wing", "shock", "wave", "cell"]
    groups = [(f"{a} {b}", f"the {a} and the {b}", [f"the {b}"]) for a in words for b in words if a != b]
    options = dict(base=base, epochs=1, batch_size=4, negatives=1, max_length=16)  # checkpoint_every: 100
    whole = train_cross_encoder(groups, tmp_path / "whole", **options)
    monkeypatch.setattr(training, "CHECKPOINT_SECONDS", 0.0)
    real, saved = training._save_checkpoint, []

    def save_then_die(*args, **kwargs):
        real(*args, **kwargs)
        saved.append(args[4])  # the step
        if len(saved) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(training, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_cross_encoder(groups, tmp_path / "killed", **options)
    assert saved == [1, 2, 3] and (tmp_path / ".killed.training" / "checkpoint.pt").is_file()
    monkeypatch.setattr(training, "_save_checkpoint", real)
    resumed = train_cross_encoder(groups, tmp_path / "killed", **options)
    assert resumed["steps"] == whole["steps"] and resumed["loss_last"] == pytest.approx(whole["loss_last"], abs=1e-6)


def test_an_encoder_folder_is_refused_where_a_causal_lm_is_needed(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.exceptions import InvalidParameterError
    from salience.models.lm import load_causal_lm
    from tests.models.tiny import tiny_cross_folder, tiny_encoder_folder

    bert = tiny_encoder_folder(tmp_path / "bert")
    cross = tiny_cross_folder(tmp_path / "cross")
    for folder in (bert, cross):
        with pytest.raises(InvalidParameterError, match="not a causal language model"):
            load_causal_lm(folder)
    corpus = _jsonl(tmp_path / "corpus.jsonl", _corpus_rows())
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5 t\n")
    queries = _jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "heat wing"}])
    for command in (["search", "rerank", str(tmp_path / "run.trec"), "--index", str(tmp_path / "ix"), "--queries",
                     str(queries), "--judge", "pointwise", "--model", str(bert), "--out", str(tmp_path / "r.trec")],
                    ["search", "queries", str(corpus), "--lm", str(cross), "--out", str(tmp_path / "pairs.jsonl")]):
        assert main(command + ["--quiet"]) == 2
        err = capsys.readouterr().err
        assert "not a causal language model" in err and "Traceback" not in err
    assert not (tmp_path / "r.trec").exists() and not (tmp_path / "pairs.jsonl").exists()


def _tiny_llama_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from tests.compress.models import tiny_llama

    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    model = tmp_path / "model"
    tiny_llama(max_position_embeddings=256).save_pretrained(model)
    transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(model)
    return model


def test_models_of_the_wrong_kind_are_named_with_what_to_do(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_encoder_folder

    bert = tiny_encoder_folder(tmp_path / "bert")
    corpus = _jsonl(tmp_path / "corpus.jsonl", _corpus_rows())
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    queries = _jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "heat wing"}])
    assert main(["search", "rerank", str(tmp_path / "run.trec"), "--index", str(tmp_path / "ix"), "--queries",
                 str(queries), "--judge", "cross", "--model", str(bert), "--out", str(tmp_path / "r.trec"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a cross-encoder: rank with it as --judge encoder" in err and "train-reranker --kind cross" in err
    assert main(["compress", "quantize", str(bert), "--method", "rtn", "--group", "16", "--out",
                 str(tmp_path / "q"), "--quiet"]) == 2
    assert "not a causal language model" in capsys.readouterr().err
    model = _tiny_llama_folder(tmp_path)
    assert main(["compress", "quantize", str(model), "--method", "rtn", "--group", "16", "--out",
                 str(tmp_path / "q"), "--quiet"]) == 0
    assert main(["compress", "quantize", str(tmp_path / "q"), "--method", "rtn", "--group", "16", "--out",
                 str(tmp_path / "qq"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "already quantized" in err and "Traceback" not in err and not (tmp_path / "qq").exists()


def test_quantize_defaults_to_a_group_that_divides_the_model_and_refuses_groups_that_do_not_pay(tmp_path, capsys):
    pytest.importorskip("torch")
    model = _tiny_llama_folder(tmp_path)  # widths 32 and 64: the preset's groups of 128 divide neither
    assert main(["compress", "quantize", str(model), "--method", "rtn", "--out", str(tmp_path / "q"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["scheme"]["group_size"] == 32
    config = json.loads((tmp_path / "q" / "config.json").read_text())["quantization_config"]
    assert json.dumps(config).count('"group_size": 32') >= 1
    for group, bits_word in (("4", "12.00 bits"), ("8", "8.00 bits")):
        assert main(["compress", "quantize", str(model), "--method", "rtn", "--group", group, "--out",
                     str(tmp_path / f"g{group}"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert bits_word in err and "larger file than 8-bit weights" in err and not (tmp_path / f"g{group}").exists()
    assert main(["compress", "quantize", str(model), "--method", "rtn", "--group", "16", "--out",
                 str(tmp_path / "g16"), "--quiet"]) == 0
    # an explicit group that does not divide is still refused, naming the dividing ones
    assert main(["compress", "quantize", str(model), "--method", "rtn", "--group", "128", "--out",
                 str(tmp_path / "g128"), "--quiet"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_model_files_follow_the_umask_like_every_other_output(tmp_path):
    pytest.importorskip("torch")
    import os
    import stat

    model = _tiny_llama_folder(tmp_path)
    old = os.umask(0o022)
    try:
        for command in (["compress", "quantize", str(model), "--method", "rtn", "--out", str(tmp_path / "q")],
                        ["compress", "prune", str(model), "--method", "magnitude", "--sparsity", "0.5", "--out",
                         str(tmp_path / "p")]):
            assert main(command + ["--quiet"]) == 0
    finally:
        os.umask(old)
    for folder in (tmp_path / "q", tmp_path / "p"):
        modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()}
        assert set(modes.values()) == {0o644}, modes
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755

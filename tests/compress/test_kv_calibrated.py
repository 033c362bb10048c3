"""Q-Filters and DuoAttention: what they learn from the model, checked against the maths
written out; eviction by them; what they refuse."""

import math

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress.test_kv import tiny_llama, tokens  # noqa: E402
from tests.compress.test_kv_presses import _masked_reference  # noqa: E402
from salience.compress import check_budget, continue_from, duo_attention_head_scores, prefill, query_filters  # noqa: E402
from salience.core.base import create  # noqa: E402


def _attention_inputs(model, window):
    """Each layer's attention input for one window (the normed residual stream), by hooks."""
    seen = {}
    handles = [layer.self_attn.register_forward_pre_hook(
        lambda module, args, kwargs, i=i: seen.__setitem__(i, kwargs["hidden_states"][0].double()), with_kwargs=True)
        for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(input_ids=torch.as_tensor(window)[None])
    for handle in handles:
        handle.remove()
    return seen


def _rotate(x, positions, model):
    """Rotary positions applied as transformers applies them: x (heads, n, d)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cos, sin = model.model.rotary_emb(x.float(), torch.as_tensor(positions)[None])
    rotated, _ = apply_rotary_pos_emb(x[None].float(), x[None].float(), cos, sin)
    return rotated[0].double()


@torch.no_grad()
def test_query_filters_are_each_groups_first_singular_direction_oriented_along_the_queries():
    model = tiny_llama(seed=3)
    windows = [tokens(40, seed=1).tolist(), tokens(30, seed=2).tolist()]
    filters = query_filters(model, windows)
    assert filters.shape == (2, 2, 8)
    for layer in range(2):
        attention = model.model.layers[layer].self_attn
        stacked = []
        for window in windows:
            hidden = _attention_inputs(model, window)[layer]
            q = (hidden.float() @ attention.q_proj.weight.T).double().view(len(window), 4, 8).transpose(0, 1)
            stacked.append(_rotate(q, np.arange(len(window)), model))
        q = torch.cat(stacked, dim=1)  # (heads, all tokens, d)
        for kv_head in range(2):
            group = q[2 * kv_head: 2 * kv_head + 2].reshape(-1, 8).numpy()
            first = np.linalg.svd(group, full_matrices=False)[2][0]
            first = first * np.sign(group.sum(axis=0) @ first)
            assert np.allclose(filters[layer, kv_head], first, atol=1e-5)
            assert (group @ filters[layer, kv_head]).mean() > 0


def test_qfilter_scores_each_key_by_its_projection_and_evicts_by_it():
    model = tiny_llama(seed=3)
    policy = create("kv", "qfilter").calibrate(model, [tokens(40, seed=1).tolist()])
    keys = torch.randn(1, 2, 10, 8, dtype=torch.float64)
    scores = policy.token_scores(keys, keys, layer=1)
    assert torch.allclose(scores, torch.einsum("bhnd,hd->bhn", keys, torch.as_tensor(policy.filters[1])))
    ids = tokens(60, seed=4)
    read = prefill(model, ids, policy=policy, budget=0.25)
    full = prefill(model, ids)
    for index, (layer, whole) in enumerate(zip(read.cache.layers, full.cache.layers)):
        projection = torch.einsum("bhnd,hd->bhn", whole.keys.double(), torch.as_tensor(policy.filters[index]))
        best = projection.topk(15, dim=-1).indices.sort(dim=-1).values
        assert torch.equal(layer.keys, whole.keys.gather(2, best[..., None].expand(-1, -1, -1, 8)))


@torch.no_grad()
def test_duo_attention_head_scores_are_the_area_under_the_last_querys_cumulative_attention():
    model = tiny_llama(seed=5)
    windows = [tokens(30, seed=1).tolist(), tokens(20, seed=2).tolist()]
    q_len = 12
    scores = duo_attention_head_scores(model, windows, q_len=q_len)
    expected = np.zeros((2, 2))
    for window in windows:
        inputs = _attention_inputs(model, window)
        for layer in range(2):
            attention = model.model.layers[layer].self_attn
            hidden = inputs[layer].float()
            q = (hidden @ attention.q_proj.weight.T).double().view(len(window), 4, 8).mean(dim=0)
            k = (hidden @ attention.k_proj.weight.T).double().view(len(window), 2, 8).mean(dim=0)
            q = _rotate(q[:, None].expand(-1, q_len, -1), np.arange(q_len), model)
            k = _rotate(k[:, None].expand(-1, q_len, -1), np.arange(q_len), model)
            for head in range(4):
                logits = [float(q[head, -1] @ k[head // 2, j]) / math.sqrt(8) for j in range(q_len)]
                weights = np.exp(np.array(logits) - max(logits))
                weights /= weights.sum()
                expected[layer, head // 2] += np.cumsum(weights).mean() / 2 / len(windows)
    assert np.allclose(scores, expected, atol=1e-6)


def test_duo_attention_streams_the_lowest_heads_the_budget_needs_and_continues_exactly(monkeypatch):
    import salience.compress.kv.eviction as kv_module

    model = tiny_llama(seed=5)
    policy = create("kv", "duo_attention", head_scores=[[0.4, 0.1], [0.3, 0.2]], sink_size=2, recent_size=4)
    # 80 tokens, 40 kept per head on average: ceil(4 x 40 / (80 - 6)) = 3 heads stream
    assert policy.streaming_heads(40, 80).tolist() == [[False, True], [True, True]]
    assert not policy.streaming_heads(80, 80).any()
    ids = tokens(100, seed=7)
    kept_by_layer = {}

    def spy(keys, values, kept, _original=kv_module._compact):
        kept_by_layer[len(kept_by_layer)] = kept[0].clone()
        return _original(keys, values, kept)

    monkeypatch.setattr(kv_module, "_compact", spy)
    read = prefill(model, ids[:80], policy=policy, budget=40)
    assert [kept.sum(dim=1).tolist() for kept in kept_by_layer.values()] == [[80, 6], [6, 6]]
    streamed = kept_by_layer[1][0]
    assert streamed[:2].all() and streamed[-4:].all() and not streamed[2:-4].any()  # sinks and recent tokens
    ours = continue_from(model, read.cache, ids[80:], 80)[0]
    assert torch.allclose(ours, _masked_reference(model, ids, 80, kept_by_layer), atol=1e-5)


def test_calibrated_policies_refuse_what_they_cannot_use():
    model = tiny_llama()
    ids = tokens(60)
    with pytest.raises(InvalidParameterError, match="policy.calibrate\\(model, windows\\)"):
        prefill(model, ids, policy="qfilter", budget=0.25)
    with pytest.raises(InvalidParameterError, match="learned for another model"):
        prefill(model, ids, policy="qfilter", budget=0.25, filters=np.ones((3, 2, 8)))
    with pytest.raises(InvalidParameterError, match="learned for another model"):
        prefill(model, ids, policy="duo_attention", budget=0.5, head_scores=np.ones((2, 4)))
    for bad in (np.full((2, 2), np.nan), np.ones(4), [[]]):
        with pytest.raises(InvalidParameterError, match="head_scores must be a finite 2-D array"):
            create("kv", "duo_attention", head_scores=bad)
    with pytest.raises(InvalidParameterError, match="filters must be a finite 3-D array"):
        create("kv", "qfilter", filters=np.ones((2, 8)))
    # a budget below what a streaming head keeps
    with pytest.raises(InvalidParameterError, match="streaming head's 128 sinks and 256 recent tokens"):
        check_budget(0.25, 600, "duo_attention", head_scores=np.ones((2, 2)))
    for windows in ([], [[5]]):
        with pytest.raises(InvalidParameterError, match="at least one window of two or more tokens"):
            query_filters(model, windows)
    with pytest.raises(InvalidParameterError, match="q_len must be"):
        duo_attention_head_scores(model, [[1, 2, 3]], q_len=1)


def test_kv_eval_command_calibrates_them_on_calib(model_folder, capsys):
    import json

    from salience.cli import main

    model, text = model_folder
    base = ["compress", "kv-eval", str(model), "--data", str(text), "--context", "80", "--continuation", "20", "--json"]
    calib = ["--calib", str(text), "--seqlen", "32", "--calib-windows", "2"]
    assert main(base + ["--policy", "qfilter", "--budget", "0.25"] + calib) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 20
    assert main(base + ["--policy", "duo_attention", "--budget", "0.5", "--streaming", "2", "8"] + calib) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "duo_attention"
    assert main(base + ["--policy", "adakv", "--press", "qfilter", "--budget", "0.5"] + calib) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 40
    for wrong, message in ((base + ["--policy", "qfilter"], "learns its filters from the model: give --calib"),
                           (base + ["--policy", "key_norm"] + calib, "this command would ignore it"),
                           (base + ["--policy", "key_norm", "--streaming", "2", "8"], "no parameter 'sink_size'")):
        assert main(wrong) == 2
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# KVzap: a linear surrogate of KVzip+ scores
def test_ridge_surrogate_is_scikit_learns_ridge():
    linear_model = pytest.importorskip("sklearn.linear_model")
    from salience.compress import ridge_surrogate

    rng = np.random.default_rng(0)
    x = [rng.normal(size=(50, 6)) for _ in range(2)]
    y = [rng.normal(size=(50, 3)) + 2.0 for _ in range(2)]
    ours = ridge_surrogate(x, y, alpha=0.7)
    assert ours.shape == (2, 3, 7)
    for layer in range(2):
        theirs = linear_model.Ridge(alpha=0.7).fit(x[layer], y[layer])
        assert np.allclose(ours[layer, :, :-1], theirs.coef_) and np.allclose(ours[layer, :, -1], theirs.intercept_)


def test_kvzip_plus_scores_are_the_reconstruction_attention_written_out():
    """One chunk: KVzip's softmax over the context and the reconstruction's own keys is the
    whole causal attention of context + reconstruction read at once, so KVzip+ is read off the
    model's own attention weights: log max over the reconstruction's rows q and the group's
    heads h of a[h, q, j] x ||W_O,h v_j|| / ||x_q||."""
    from salience.compress.kv.reconstruction import FIRST_PROMPT, kvzip_plus_scores
    from tests.compress.models import tiny_llama as build
    from tests.compress.test_kv import CharTokenizer

    model = build(0, attn_implementation="eager", max_position_embeddings=256)
    ids = tokens(30, seed=12).tolist()
    tokenizer = CharTokenizer()
    inputs, scores = kvzip_plus_scores(model, tokenizer, ids)
    repeat = tokenizer.encode(FIRST_PROMPT) + tokenizer.encode("\n") + ids
    whole = torch.as_tensor(ids + repeat)[None]
    seen = _attention_inputs(model, whole[0].tolist())
    with torch.no_grad():
        out = model(input_ids=whole, output_attentions=True, use_cache=True)
    n = len(ids)
    for layer in range(2):
        assert np.allclose(inputs[layer], seen[layer][:n].detach().numpy(), atol=1e-5)
        attention = out.attentions[layer][0, :, n:, :n].double()  # (heads, reconstruction rows, context)
        values = out.past_key_values.layers[layer].values[0, :, :n].double()  # (kv, n, d)
        w_o = model.model.layers[layer].self_attn.o_proj.weight.double()  # (hidden, heads x d)
        d, heads = values.shape[-1], attention.shape[0]
        for head in range(2):  # key-value head: query heads 2 head, 2 head + 1
            best = np.full(n, -np.inf)
            for h in (2 * head, 2 * head + 1):
                written = (values[head] @ w_o[:, h * d:(h + 1) * d].T).norm(dim=-1)  # (n,)
                rows = seen[layer][n:].norm(dim=-1)  # ||x_q||
                weighted = attention[h] / rows[:, None] * written[None, :]
                best = np.maximum(best, weighted.amax(dim=0).detach().numpy())
            assert np.allclose(scores[layer, head], np.log(best), atol=1e-4), (layer, head)
        assert heads == 4


def test_kvzap_learns_a_surrogate_and_evicts_by_its_predictions():
    from tests.compress.test_kv import CharTokenizer

    model = tiny_llama()
    windows = [tokens(40, seed=s).tolist() for s in (1, 2, 3)]
    policy = create("kv", "kvzap", tokenizer=CharTokenizer()).calibrate(model, windows)
    surrogate = np.asarray(policy.surrogate)
    assert surrogate.shape == (2, 2, 33) and np.isfinite(surrogate).all()
    ids = tokens(60, seed=4)
    seen = _attention_inputs(model, ids.tolist())
    read = prefill(model, ids, policy=policy, budget=0.25)
    for layer in range(2):
        predicted = seen[layer].detach().numpy() @ surrogate[layer, :, :-1].T + surrogate[layer, :, -1]  # (n, kv)
        whole = prefill(model, ids).cache.layers[layer]
        for head in range(2):
            # the best 15 predictions; among equal ones (a token repeated: layer 0) the later stays
            kept = sorted(sorted(range(60), key=lambda j: (-round(predicted[j, head], 5), -j))[:15])
            assert torch.allclose(read.cache.layers[layer].keys[0, head], whole.keys[0, head, kept], atol=1e-6)
    # with a threshold instead of a budget (kvpress pairs KVzap with its threshold press)
    cut = prefill(model, ids, policy="dms", press=policy, threshold=float(np.median(predicted)), sliding_window_size=8)
    assert 8 < cut.kept < 60
    with pytest.raises(InvalidParameterError, match="hidden state"):
        create("kv", "decoding", press=policy)
    with pytest.raises(InvalidParameterError, match="give tokenizer="):
        create("kv", "kvzap").calibrate(model, windows)
    with pytest.raises(InvalidParameterError, match="learned for another model"):
        prefill(tiny_llama(layers=3), ids, policy=policy, budget=0.25)
    with pytest.raises(InvalidParameterError, match="no surrogate= yet"):
        prefill(model, ids, policy="kvzap", budget=0.25)

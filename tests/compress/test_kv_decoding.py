"""Eviction while decoding (kvpress's DecodingPress, CompressionRatioDecodingPress,
PrefillDecodingPress): the cache cut back every ``compression_interval`` steps, against the
same cuts made by hand on a cache read one token at a time, and what it refuses. Parity with
kvpress on SmolLM2 is measured by ``bench/kvcache.py`` (BENCHMARKS.md)."""

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress import models  # noqa: E402
from tests.compress.test_kv import tiny_llama, tokens  # noqa: E402
from salience.compress import continue_from, decode_speed, evict, kv_eval, prefill, prefill_and_continue  # noqa: E402
from salience.core.base import create  # noqa: E402


def cut_by_key_norm(cache, keep):
    """Every layer's cache cut by hand to the ``keep`` tokens per head with the smallest key
    norms, in position order (ties: the earlier token leaves first)."""
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        norms = torch.linalg.vector_norm(keys, dim=-1)[0].double().numpy()  # float32, as the policy computes them
        kept = np.zeros(norms.shape, dtype=bool)
        for head, row in enumerate(norms):
            # largest norm leaves first; among equal norms the earlier token
            order = sorted(range(len(row)), key=lambda j: (-row[j], j))
            kept[head, order[len(row) - keep:]] = True
        index = [np.flatnonzero(row) for row in kept]
        index = torch.as_tensor(np.stack(index))[None, :, :, None]
        layer.keys = keys.gather(2, index.expand(-1, -1, -1, keys.shape[-1]))
        layer.values = values.gather(2, index.expand(-1, -1, -1, values.shape[-1]))


def decoded_by_hand(model, prompt, continuation, *, interval, target):
    """The continuation's logits read one token at a time, the cache cut to ``target(seen)``
    tokens per head by key norm after every ``interval`` steps (``seen``: tokens read so far)."""
    read = prefill(model, prompt)
    logits, seen = [], len(prompt)
    for step, token in enumerate(continuation):
        logits.append(continue_from(model, read.cache, [token], len(prompt) + step))
        seen += 1
        if (step + 1) % interval == 0 and read.cache.layers[0].keys.shape[2] > target(seen):
            cut_by_key_norm(read.cache, target(seen))
    return torch.cat(logits, dim=1), read.cache


@pytest.mark.parametrize("budget,target", [(24, lambda seen: 24), (0.5, lambda seen: int(seen * 0.5))])
def test_the_cache_is_cut_every_interval_as_by_hand(budget, target):
    model = tiny_llama()
    ids = tokens(70, seed=6)
    prompt, continuation = ids[:40], ids[40:]
    read, ours = prefill_and_continue(model, prompt, continuation, policy="decoding", budget=budget, press="key_norm",
                                      compression_interval=5)
    theirs, cache = decoded_by_hand(model, prompt, continuation, interval=5, target=target)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert read.kept == target(70)  # the last cut: after step 30, 70 tokens seen
    # the prompt itself was read whole: before the first cut nothing changed
    whole = continue_from(model, prefill(model, prompt).cache, continuation, 40)
    assert torch.allclose(ours[:, :5], whole[:, :5], atol=1e-5)
    assert not torch.allclose(ours[:, 6:], whole[:, 6:], atol=1e-3)


def test_prefill_evicts_the_prompt_first_and_decoding_keeps_to_the_budget():
    """PrefillDecodingPress: the prompt evicted by one policy, the decoding cut by another."""
    model = tiny_llama()
    ids = tokens(60, seed=7)
    snap = create("kv", "snapkv", window=8)
    with evict(model, "decoding", budget=20, press="key_norm", prefill=snap, compression_interval=4) as state:
        first = prefill(model, ids[:40])
        assert state.kept == 20 and [layer.keys.shape[2] for layer in first.cache.layers] == [20, 20]
        sizes = []
        for step, token in enumerate(ids[40:52]):
            continue_from(model, first.cache, [token], 40 + step)
            sizes.append(first.cache.layers[0].keys.shape[2])
    assert sizes == [21, 22, 23, 20] * 3
    # the prompt's cut is SnapKV's own
    alone = prefill(model, ids[:40], policy=snap, budget=20)
    reread = prefill(model, ids[:40], policy="decoding", budget=20, prefill=snap)
    for ours, theirs in zip(reread.cache.layers, alone.cache.layers):
        assert torch.equal(ours.keys, theirs.keys)


def test_a_query_reading_press_reads_the_buffered_steps_queries():
    """SnapKV inside decoding: its observation window is the steps decoded since the last cut
    (at most the buffer), each query at its own position; the window's tokens are kept."""
    model = tiny_llama(layers=1)
    ids = tokens(60, seed=8)
    with evict(model, "decoding", budget=24, press=create("kv", "snapkv", window=4),
               compression_interval=6, hidden_states_buffer_size=3) as state:
        read = prefill(model, ids[:40])
        for step, token in enumerate(ids[40:46]):
            continue_from(model, read.cache, [token], 40 + step)
    layer = read.cache.layers[0]
    assert state.kept == 24 and layer.keys.shape[2] == 24
    # the last three steps (the buffer, the observation window) are the cache's last three tokens
    whole = prefill(model, ids[:46]).cache.layers[0]
    assert torch.allclose(layer.keys[:, :, -3:], whole.keys[:, :, -3:], atol=1e-5)


def test_kv_eval_and_decode_speed_run_decoding():
    model = tiny_llama()
    ids = tokens(300, seed=9)
    full = kv_eval(model, ids, policy=None, context=60, continuation=30, max_windows=2)
    same = kv_eval(model, ids, policy="decoding", budget=1.0, context=60, continuation=30, max_windows=2,
                   compression_interval=4)
    assert np.allclose(same.nll, full.nll, atol=1e-5)  # a budget of everything seen cuts nothing
    cut = kv_eval(model, ids, policy="decoding", budget=0.5, context=60, continuation=30, max_windows=2,
                  compression_interval=4)
    assert cut.kept == 44 and cut.nll != full.nll
    speed = decode_speed(model, ids[:60], policy="decoding", budget=40, new_tokens=12, compression_interval=4)
    assert speed["policy"] == "decoding" and speed["cache_tokens"] == 40 + 12 % 4


def test_decoding_refuses_what_it_cannot_run():
    for press, why in (("h2o", "every token's query or hidden state"), ("rerotate", "moves the kept keys"),
                       ("finch", "moves the kept keys"), ("kvzip", "passes of the model after the prefill")):
        with pytest.raises(InvalidParameterError, match=why):
            create("kv", "decoding", press=press)
    with pytest.raises(InvalidParameterError, match="prefill policy 'decoding'"):
        create("kv", "decoding", prefill="decoding")
    with pytest.raises(InvalidParameterError, match="compression_interval"):
        create("kv", "decoding", compression_interval=0)
    model = tiny_llama()
    ids = tokens(50, seed=1)
    read = prefill(model, ids[:40])
    with pytest.raises(InvalidParameterError, match="not prefilled inside evict"):
        with evict(model, "decoding", budget=10, compression_interval=1):
            continue_from(model, read.cache, ids[40:41], 40)
    with pytest.raises(InvalidParameterError, match="observation window"):  # the budget cannot hold SnapKV's window
        prefill_and_continue(model, ids[:40], ids[40:], policy="decoding", budget=4, compression_interval=2,
                             press=create("kv", "snapkv", window=8))


def cam_cut(scores, received, values, *, target, steps, merge_budget):
    """CaM's cut of one layer (b = 1, one key-value head) through the policy's own step."""
    cam = create("kv", "cam", merge_budget=merge_budget)
    run = cam.run(target, n_layers=1)
    run.steps[0], run.received[0] = steps, torch.tensor([[received]], dtype=torch.float32)
    kept, merged = cam.kept_after_cut(run, 0, None, torch.tensor([[values]], dtype=torch.float64),
                                      np.array([[scores]], dtype=float), target, None)
    return kept[0, 0].tolist(), merged[0, 0], run.received[0][0, 0].tolist()


def test_cam_merges_evicted_values_into_the_kept_tokens_after_them():
    values = [[float(10 * i + j) for j in range(2)] for i in range(8)]
    # evicted: the three lowest scores (tokens 1, 3, 5); one step decoded: token 5 (the best of them) merges
    # into the two kept tokens after it (6, 7) with probability A_5 / mean(A_6, A_7) = 1
    kept, merged, received = cam_cut([5, 1, 4, 2, 6, 3, 7, 8], [0.1, 0.2, 0.1, 0.4, 0.2, 0.3, 0.3, 0.3], values,
                                     target=5, steps=1, merge_budget=2)
    assert kept == [True, False, True, False, True, False, True, True]
    expected = torch.tensor(values, dtype=torch.float64)
    expected[6] += expected[5] / 2
    expected[7] += expected[5] / 2
    assert torch.allclose(merged, expected)
    assert received == pytest.approx([0.1, 0.1, 0.2, 0.3, 0.3])  # pruned with the cache
    # two steps: tokens 3 and 5 merge; 3's window is (4, 6), 5's (6, 7); a token that received no attention
    # never merges (probability 0), one with no kept token after it has nowhere to go
    kept, merged, _ = cam_cut([5, 1, 4, 2, 6, 3, 7, 8], [0.1, 0.2, 0.1, 0.0, 0.2, 0.3, 0.3, 0.3], values,
                              target=5, steps=2, merge_budget=2)
    assert torch.allclose(merged, expected)  # token 3 (A = 0) did not merge
    kept, merged, _ = cam_cut([5, 1, 4, 2, 6, 8, 7, 3], [0.1, 0.2, 0.1, 0.0, 0.2, 0.3, 0.3, 0.3], values,
                              target=5, steps=1, merge_budget=2)
    assert kept == [True, False, True, False, True, True, True, False]
    assert torch.allclose(merged, torch.tensor(values, dtype=torch.float64))  # 7 merges into nothing


def test_cam_keeps_the_same_tokens_in_every_head_while_decoding():
    model = tiny_llama()
    ids = tokens(70, seed=10)
    plain, cam = (prefill_and_continue(model, ids[:40], ids[40:], policy=name, budget=24, compression_interval=5)
                  for name in ("decoding", "cam"))
    assert [layer.keys.shape[2] for layer in cam[0].cache.layers] == [24, 24]
    # layer 0's keys depend on the token alone (later layers read the merged values): match them
    layer, whole = cam[0].cache.layers[0], prefill(model, ids).cache.layers[0]
    positions = [[int((whole.keys[0, h] - k).abs().amax(-1).argmin()) for k in layer.keys[0, h]] for h in range(2)]
    assert positions[0] == positions[1] == sorted(positions[0])  # the same tokens in both heads, in order
    assert torch.allclose(layer.keys, whole.keys[:, :, positions[0]], atol=1e-5)
    assert not torch.allclose(cam[1], plain[1], atol=1e-4)
    assert torch.equal(prefill_and_continue(model, ids[:40], ids[40:], policy="cam", budget=24,
                                            compression_interval=5)[1], cam[1])  # seeded: the same draws


def test_decoding_plugs_into_generate():
    """generate under a decoding policy: the cache cut every 4 steps, and the logits those of
    the same steps read at their logical positions one by one."""
    model = tiny_llama()
    model.generation_config.eos_token_id = None
    ids = tokens(50, seed=2)
    with evict(model, "decoding", budget=30, compression_interval=4) as state:
        out = model.generate(torch.as_tensor(ids)[None], max_new_tokens=12, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    assert state.kept == 30
    generated = out.sequences[0, 50:].tolist()
    with evict(model, "decoding", budget=30, compression_interval=4):
        read = prefill(model, ids)
        ours = [read.logits] + [continue_from(model, read.cache, [token], 50 + step)[:, -1]
                                for step, token in enumerate(generated[:-1])]
    assert torch.allclose(torch.cat(out.logits), torch.cat(ours), atol=1e-5)


def dms_reference(model, ids, n, window, threshold, decoding):
    """The continuation's logits of a one-layer, one-key-head model with DMS written out as an
    attention mask: the whole sequence read at once, the prompt densely; a row at position r
    cannot see a token p below the threshold (-||k_p|| < threshold) once it left the window
    (p < r - window: decoding; p < n - window: the prefill's evictions only)."""
    full = prefill(model, ids).cache.layers[0]
    below = (-torch.linalg.vector_norm(full.keys[0, 0], dim=-1) < threshold).numpy()
    allowed = torch.tril(torch.ones(len(ids), len(ids), dtype=torch.bool))
    for row in range(n, len(ids)):
        edge = row - window if decoding else n - window
        allowed[row, [p for p in range(max(edge, 0)) if below[p]]] = False
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids)[None], attention_mask=allowed[None, None]).logits[:, n:], below


@pytest.mark.parametrize("decoding", [False, True])
def test_dms_evicts_below_its_threshold_once_out_of_the_window(decoding):
    model = models.tiny_llama(0, num_hidden_layers=1, num_key_value_heads=1, max_position_embeddings=256)
    ids, n, window = tokens(70, seed=11), 40, 8
    norms = torch.linalg.vector_norm(prefill(model, ids).cache.layers[0].keys[0, 0], dim=-1)
    threshold = float(-norms.median())  # about half the tokens below it
    read, ours = prefill_and_continue(model, ids[:n], ids[n:], policy="dms", press="key_norm", threshold=threshold,
                                      sliding_window_size=window, decoding=decoding)
    theirs, below = dms_reference(model, ids, n, window, threshold, decoding)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert read.kept == n - int(below[: n - window].sum())  # the prefill's cut: as many as the threshold left
    assert 0 < below[: n - window].sum() < n - window


def test_dms_takes_no_budget_and_needs_a_threshold():
    model = tiny_llama()
    ids = tokens(50, seed=1)
    with pytest.raises(InvalidParameterError, match="not a budget"):
        prefill(model, ids, policy="dms", budget=0.5, threshold=-1.0)
    with pytest.raises(InvalidParameterError, match="give threshold="):
        prefill(model, ids, policy="dms")
    with pytest.raises(InvalidParameterError, match="finite number"):
        create("kv", "dms", threshold=float("nan"))
    # a threshold below every score evicts nothing; above every score, all but the window
    assert prefill(model, ids, policy="dms", threshold=-1e9, sliding_window_size=8).kept == 50
    assert prefill(model, ids, policy="dms", threshold=1e9, sliding_window_size=8).kept == 8

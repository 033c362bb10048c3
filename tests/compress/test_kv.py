import math

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress import models  # noqa: E402
from salience.compress import (check_budget, continue_from, evict, kv_eval, kv_token_scores, passkey,  # noqa: E402
                               prefill)
from salience.core.base import create, method_factory, method_names  # noqa: E402

KV_POLICIES = method_names("kv")


class CharTokenizer:
    """Text to ids in the tiny models' vocabulary of 64: one id per character."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 64 for c in text]


def window_of(policy, window=8):
    """Parameters sized for short prompts: ``window=`` for the policies that have an
    observation window, ``lag_size=`` for LagKV's partitions."""
    names = method_factory("kv", policy)._param_names()
    if "block_size" in names:  # block: a key/value-only policy, blocks sized for short prompts
        return {"press": "keydiff", "block_size": window}
    if "compression_interval" in names:  # decoding: the prompt evicted by SnapKV too, cuts every 4 steps
        snap = create("kv", "snapkv", window=window)
        return {"press": snap, "prefill": snap, "compression_interval": 4}
    if "press" in names:  # a wrapper: the policy it wraps sized the same way
        return {"press": create("kv", "snapkv", window=window)}
    if "surrogate" in names:  # kvzap: a surrogate per layer and key-value head of tiny_llama over its 32 inputs
        return {"surrogate": np.random.default_rng(0).normal(size=(2, 2, 33))}
    if "tokenizer" in names:  # kvzip: its reconstruction prompt tokenized; the budget per layer
        return {"tokenizer": CharTokenizer(), "layerwise": True}
    if "filters" in names:  # qfilter: one filter per layer and key-value head of tiny_llama
        return {"filters": np.random.default_rng(0).normal(size=(2, 2, 8))}
    if "lazy_threshold" in names:  # simlayerkv: every layer lazy, so every layer keeps exactly the budget
        return {"lazy_threshold": 0.0}
    if "head_scores" in names:  # duo_attention: head scores of tiny_llama; windows sized for short prompts
        return {"head_scores": np.random.default_rng(0).random((2, 2)), "sink_size": 2, "recent_size": 4}
    return {name: value for name, value in (("window", window), ("lag_size", window)) if name in names}


def tiny_llama(seed=0, layers=2):
    return models.tiny_llama(seed, num_hidden_layers=layers, max_position_embeddings=256)


def tokens(n, seed=0):
    return np.random.default_rng(seed).integers(0, 64, n)


def random_layer(seed=0, n=12, d=4, kv=2, heads=4):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, kv, n, d, generator=g, dtype=torch.float64),
            torch.randn(1, kv, n, d, generator=g, dtype=torch.float64),
            torch.randn(1, heads, n, d, generator=g, dtype=torch.float64))


def softmax_row(q, keys, upto):
    """Attention of one query over keys[:upto + 1], written out by hand."""
    logits = [float(q @ keys[j]) / math.sqrt(len(q)) for j in range(upto + 1)]
    top = max(logits)
    e = [math.exp(x - top) for x in logits]
    return [x / sum(e) for x in e]


def test_scores_equal_the_formulas_written_out():
    keys, values, queries = random_layer()
    n = keys.shape[2]
    k, v, q = keys[0], values[0], queries[0]
    # key norm: minus the L2 norm
    assert torch.allclose(kv_token_scores("key_norm", keys, values)[0], -k.norm(dim=-1))
    # h2o: attention received from every later query, over the number of such queries, mean over the group
    h2o = kv_token_scores("h2o", keys, values, queries)[0]
    vatp = kv_token_scores("vatp", keys, values, queries)[0]
    for head in range(2):
        for j in range(n):
            received = [sum(softmax_row(q[h, i], k[head], i)[j] for i in range(j, n)) / (n - j) for h in (2 * head, 2 * head + 1)]
            assert h2o[head, j].item() == pytest.approx(np.mean(received), abs=1e-12)
            assert vatp[head, j].item() == pytest.approx(np.mean(received) * float(v[head, j].abs().sum()), abs=1e-12)
    # snapkv: the last w queries' mean attention, average-pooled over 3 neighbours (zero padding), window kept
    w = 4
    snap = kv_token_scores("snapkv", keys, values, queries, window=w, kernel_size=3)[0]
    for head in range(2):
        mean = np.mean([[softmax_row(q[h, i], k[head], i) + [0.0] * (n - 1 - i) for i in range(n - w, n)]
                        for h in (2 * head, 2 * head + 1)], axis=(0, 1))[: n - w]
        pooled = np.convolve(np.pad(mean, 1), np.ones(3) / 3, mode="valid")
        assert np.allclose(snap[head, : n - w].numpy(), pooled, atol=1e-12)
        assert (snap[head, n - w :] > snap[head, : n - w].max()).all()
    # tova: the last query's attention averaged over all heads, the last token kept
    tova = kv_token_scores("tova", keys, values, queries)[0]
    last = np.mean([softmax_row(q[h, n - 1], k[h // 2], n - 1) for h in range(4)], axis=0)
    assert np.allclose(tova[0, :-1].numpy(), last[:-1]) and np.allclose(tova[1, :-1].numpy(), last[:-1])
    # caote: a/(1-a) ||v_j - o|| for each window query, mean over the window and the group
    caote = kv_token_scores("caote", keys, values, queries, window=w)[0]
    for head in range(2):
        errors = []
        for h in (2 * head, 2 * head + 1):
            for i in range(n - w, n):
                a = np.array(softmax_row(q[h, i], k[head], i) + [0.0] * (n - 1 - i))
                o = a @ v[head].numpy()
                errors.append(a / (1 - a) * np.linalg.norm(v[head].numpy() - o, axis=1))
        assert np.allclose(caote[head, : n - w].numpy(), np.mean(errors, axis=0)[: n - w], atol=1e-12)
    # streaming: the sinks first, then the most recent tokens
    order = kv_token_scores("streaming_llm", keys, values, n_sink=2)[0, 0].argsort(descending=True)
    assert order[:2].sort().values.tolist() == [0, 1] and order[2].item() == n - 1


def test_a_registered_scorer_gives_scores_over_head_and_position():
    keys, values, queries = (a[0].numpy() for a in random_layer())
    scores = create("kv", "snapkv", window=4, kernel_size=3).score(keys, values, queries=queries)
    assert len(scores) == 2 * 12 and scores.ids[13] == "1:1"
    direct = kv_token_scores("snapkv", *(torch.as_tensor(a)[None] for a in (keys, values, queries)), window=4,
                             kernel_size=3)
    assert np.allclose(scores.values, direct[0].numpy().ravel())


def test_what_a_policy_needs_is_one_value_that_wrappers_compose_and_refuses_a_typo():
    from salience.compress.kv import KVNeeds

    assert create("kv", "streaming_llm").needs == KVNeeds()
    assert create("kv", "snapkv", window=8).needs == KVNeeds(queries="window")
    assert create("kv", "kvzip").needs.when == "after_prefill"
    finch = create("kv", "finch")
    assert finch.needs.question and finch.needs.rerotates and not create("kv", "finch", rerotate_keys=False).needs.rerotates
    # a wrapper reads what it wraps reads, and its own
    criti = create("kv", "criticalkv", press=create("kv", "snapkv", window=8))
    assert criti.needs.queries == "window" and set(criti.needs.reads) == {"output_weight", "keep"}
    assert create("kv", "rerotate", press="snapkv").needs.rerotates
    dms = create("kv", "dms", threshold=-1.0)
    assert not dms.needs.budgeted and dms.needs.when == "prefill"
    assert create("kv", "dms", threshold=-1.0, decoding=True).needs.when == "decoding"
    decoding = create("kv", "decoding", press="key_norm", prefill=create("kv", "snapkv", window=8))
    assert decoding.needs.when == "decoding" and decoding.needs.queries == 0
    for bad in ({"queries": "some"}, {"queries": True}, {"reads": ("rotation",)}, {"reads": ["rotary"]},
                {"when": "later"}, {"budget": "share"}):
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            KVNeeds(**bad)


def test_the_cache_keeps_exactly_the_budget_and_a_full_budget_changes_nothing():
    model = tiny_llama()
    ids = tokens(600)
    full = kv_eval(model, ids, policy=None, context=80, continuation=20, max_windows=3)
    for policy in KV_POLICIES:
        built = create("kv", policy, **window_of(policy))
        if not built.needs.budgeted:  # dms: evicts by its threshold (tests/compress/test_kv_decoding.py)
            continue
        question = 8 if built.needs.question else 0  # finch: the context's last 8 tokens are the question
        same = kv_eval(model, ids, policy=built, budget=1.0, context=80, continuation=20, max_windows=3,
                       keep_last=question)
        if built.needs.when == "decoding":  # read one token per step: the same to float rounding
            assert np.allclose(same.nll, full.nll, rtol=1e-6), policy
        else:
            assert same.nll == full.nll
        read = prefill(model, ids[:80], policy=built, budget=0.25, keep_last=question)
        kept = int(0.25 * (80 - question)) + question
        assert read.kept == kept and read.length == (kept if built.needs.rerotates else 80), policy
        held = []
        for layer in read.cache.layers:
            padding = getattr(layer, "salience_padding")
            held.append(layer.keys.shape[1] * layer.keys.shape[2] - (0 if padding is None else int(padding.sum())))
            assert layer.values.shape == layer.keys.shape
        if policy == "duo_attention":  # whole heads stream: at most the budget's total, unevenly over layers
            assert 0 < sum(held) <= 20 * 2 * len(held)
        elif policy == "kvcompose":  # the budget's total, shared unevenly over layers
            assert sum(held) == kept * 2 * len(held), held
        else:  # adakv: unevenly over heads, the same in every layer
            assert held == [kept * 2] * len(held), policy
    read = prefill(model, ids[:80], policy="snapkv", budget=30, window=8)  # a token count
    assert read.kept == 30


def test_keep_last_scores_the_question_but_never_evicts_it():
    """``keep_last``: the prompt's last tokens (a question read with the context) stay in the
    cache whatever their scores; the budget applies to the tokens before them."""
    model = tiny_llama()
    ids = tokens(90, seed=3)
    full = prefill(model, ids)
    for policy in ("key_norm", "snapkv", "tova"):
        read = prefill(model, ids, policy=policy, budget=0.25, keep_last=10, **window_of(policy))
        assert read.kept == 20 + 10 and read.length == 90
        for layer, whole in zip(read.cache.layers, full.cache.layers):
            assert layer.keys.shape[2] == 30
            assert torch.equal(layer.keys[:, :, -10:], whole.keys[:, :, -10:])  # the question, whole
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidParameterError, match="keep_last"):
            prefill(model, ids, policy="h2o", budget=0.5, keep_last=bad)
    with pytest.raises(InvalidParameterError, match="keep_last \\(90\\) must leave tokens"):
        prefill(model, ids, policy="h2o", budget=0.5, keep_last=90)


def test_the_continuation_keeps_its_original_positions():
    """Evicting after the prefill equals the whole sequence read at once with the continuation
    barred from the evicted tokens: the same positions, the same logits."""
    model = tiny_llama(layers=1)
    ids = tokens(100, seed=1)
    n, sinks, keep = 80, 4, 30
    read = prefill(model, ids[:n], policy="streaming_llm", budget=keep, n_sink=sinks)
    ours = continue_from(model, read.cache, ids[n:], n)[0]
    kept = list(range(sinks)) + list(range(n - (keep - sinks), n))
    allowed = torch.tril(torch.ones(100, 100, dtype=torch.bool))
    for row in range(n, 100):
        allowed[row, [j for j in range(n) if j not in kept]] = False
    with torch.no_grad():
        reference = model(input_ids=torch.as_tensor(ids)[None], attention_mask=allowed[None, None]).logits[0, n:]
    assert torch.allclose(ours, reference, atol=1e-5)
    # and without eviction, prefill + continuation equals one forward pass
    read = prefill(model, ids[:n])
    with torch.no_grad():
        whole = model(input_ids=torch.as_tensor(ids)[None]).logits[0, n:]
    assert torch.allclose(continue_from(model, read.cache, ids[n:], n)[0], whole, atol=1e-5)


def test_evict_plugs_into_generate():
    model = tiny_llama()
    model.generation_config.eos_token_id = None
    ids = tokens(80, seed=2)
    with evict(model, "snapkv", budget=0.5, window=8) as state:
        generated = model.generate(torch.as_tensor(ids)[None], max_new_tokens=6, do_sample=False,
                                   pad_token_id=0)[0, 80:].tolist()
    assert state.kept == 40 and state.layers == 2
    read = prefill(model, ids, policy="snapkv", budget=0.5, window=8)
    token, ours = read.logits.argmax(-1), []
    for step in range(6):
        ours.append(int(token))
        token = continue_from(model, read.cache, [ours[-1]], 80 + step)[:, -1].argmax(-1)
    assert generated == ours


def test_passkey_reports_nll_rank_and_exact_retrieval():
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {c: i for i, c in enumerate(sorted(set("0123456789 .?TRWabceghiklmnoprsty") | {"[UNK]"}))}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    model = tiny_llama()
    full = passkey(model, tok, policy=None, needles=3, context=120)
    evicted = passkey(model, tok, policy="h2o", budget=0.5, needles=3, context=120)
    assert full.needles == 3 and full.depths == [0.0, 0.5, 1.0]
    assert full.rank >= 1 and 0 <= full.accuracy <= 1 and full.nll > 0
    assert evicted.nll != full.nll
    # query-aware with the full cache reads the same tokens at the same positions: the same NLL
    aware_full = passkey(model, tok, policy=None, needles=3, context=120, query_aware=True)
    assert aware_full.per_needle_nll == pytest.approx(full.per_needle_nll, rel=1e-5)
    aware = passkey(model, tok, policy="snapkv", budget=0.5, needles=3, context=120, query_aware=True, window=8)
    agnostic = passkey(model, tok, policy="snapkv", budget=0.5, needles=3, context=120, window=8)
    assert aware.nll != agnostic.nll  # the observation window now holds the question


def test_bad_input():
    model = tiny_llama()
    ids = tokens(300)
    with pytest.raises(InvalidParameterError, match="fewer than snapkv always keeps"):
        check_budget(0.05, 768, "snapkv", window=64)
    with pytest.raises(InvalidParameterError, match="the 4 sinks"):
        check_budget(4, 768, "streaming_llm")
    for bad in (0, -0.5, float("nan"), 1.5, "half", True):
        with pytest.raises(InvalidParameterError, match="budget"):
            check_budget(bad, 100, "h2o")
    with pytest.raises(InvalidParameterError, match="Did you mean 'snapkv'"):
        prefill(model, ids[:50], policy="snapk", budget=0.5)
    with pytest.raises(InvalidParameterError, match="observation window"):
        kv_eval(model, ids, policy="snapkv", budget=0.1, context=80, continuation=20)
    with pytest.raises(InvalidParameterError, match="exceed the model's window"):
        kv_eval(model, ids, policy=None, context=200, continuation=100)
    with pytest.raises(InvalidParameterError, match="fewer than one window"):
        kv_eval(model, ids[:50], policy=None, context=80, continuation=20)
    with pytest.raises(InvalidParameterError, match="no decoder blocks found"):
        with evict(torch.nn.Linear(2, 2), "h2o", budget=0.5):
            pass
    with pytest.raises(InvalidParameterError, match="kernel_size must be odd"):
        with evict(model, "snapkv", budget=0.5, kernel_size=4):
            pass
    with pytest.raises(InvalidParameterError, match="keys must be a non-empty 3-D array"):
        create("kv", "key_norm").score(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(InvalidParameterError, match="NaN"):
        create("kv", "key_norm").score(np.full((1, 2, 2), np.nan), np.ones((1, 2, 2)))
    with pytest.raises(InvalidParameterError, match="'h2o' has no parameter 'window' \\(it is a parameter of snapkv, caote, pyramidkv\\)"):
        with evict(model, "h2o", budget=0.5, window=8):
            pass


def test_kv_eval_command(model_folder, capsys):
    import json

    from salience.cli import main

    model, text = model_folder
    base = ["compress", "kv-eval", str(model), "--data", str(text), "--context", "80", "--continuation", "20", "--json"]
    assert main(base + ["--policy", "full"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(base + ["--policy", "vatp", "--budget", "0.25"]) == 0
    evicted = json.loads(capsys.readouterr().out)
    assert evicted["kept"] == 20 and evicted["windows"] == 4 and full["kept"] == 80
    assert evicted["perplexity"] != full["perplexity"]
    assert main(base + ["--policy", "snapkv", "--observation-window", "8", "--budget", "0.05"]) == 2
    assert "observation window" in capsys.readouterr().err
    assert main(base + ["--policy", "vatp", "--observation-window", "8"]) == 2  # an option vatp does not have
    assert "no parameter 'window'" in capsys.readouterr().err
    # a wrapping policy: the options go to the policy it wraps
    assert main(base + ["--policy", "adakv", "--press", "snapkv", "--observation-window", "8", "--budget", "0.5"]) == 0
    ada = json.loads(capsys.readouterr().out)
    assert ada["kept"] == 40 and ada["policy"] == "adakv"
    assert main(base + ["--policy", "h2o", "--press", "snapkv"]) == 2
    assert "no parameter 'press'" in capsys.readouterr().err
    # KVzip: the command gives it the model's tokenizer for its reconstruction prompt
    assert main(base + ["--policy", "kvzip", "--budget", "0.25"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 20
    # FINCH scores with a question: the windows' last tokens read as one; rerotate continues after the kept
    assert main(base + ["--policy", "finch", "--budget", "0.25", "--question-tokens", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 18 + 8
    for wrong in (base + ["--policy", "finch"], base + ["--policy", "finch", "--question-tokens", "8", "--needles", "2"],
                  base + ["--policy", "finch", "--question-tokens", "80"]):
        assert main(wrong) == 2
        assert "--question-tokens" in capsys.readouterr().err
    assert main(base + ["--policy", "rerotate", "--press", "streaming_llm", "--sinks", "2", "--budget", "0.25"]) == 0
    turned = json.loads(capsys.readouterr().out)
    assert turned["kept"] == 20 and turned["perplexity"] != full["perplexity"]
    # while decoding: cut every 5 continuation tokens to a quarter of everything seen (20 + 20 read: 25)
    assert main(base + ["--policy", "decoding", "--press", "key_norm", "--compression-interval", "5"]) == 0
    decoded = json.loads(capsys.readouterr().out)
    assert decoded["kept"] == 25 and decoded["perplexity"] != full["perplexity"]
    assert main(base + ["--policy", "decoding", "--prefill-policy", "key_norm", "--compression-interval", "5",
                        "--budget", "30"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 30
    # dms: no budget, a threshold (key_norm: minus the key's norm); refused with a budget or another's option
    assert main(base + ["--policy", "dms", "--threshold=-1e9", "--sliding-window", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 80  # nothing scores below -1e9
    assert main(base + ["--policy", "dms", "--threshold", "1e9", "--sliding-window", "8", "--decode"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 8  # everything but the window
    assert main(base + ["--policy", "dms", "--threshold", "1", "--budget", "0.5"]) == 2
    assert "not a budget" in capsys.readouterr().err
    assert main(base + ["--policy", "snapkv", "--threshold", "1"]) == 2
    assert "no parameter 'threshold'" in capsys.readouterr().err
    # kvzap learns its surrogate from --calib (KVzip+ scores, which the model's tokenizer prompts for)
    assert main(base + ["--policy", "kvzap", "--calib", str(text), "--seqlen", "32", "--calib-windows", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 20
    assert main(base + ["--policy", "kvzap"]) == 2
    assert "--calib" in capsys.readouterr().err
    # key channels (ThinK) alone, and refused out of range before the model loads
    assert main(base + ["--policy", "full", "--key-channels", "0.5"]) == 0
    thinned = json.loads(capsys.readouterr().out)
    assert thinned["key_channels"] == 0.5 and thinned["kept"] == 80 and thinned["perplexity"] != full["perplexity"]
    assert main(base + ["--policy", "full", "--key-channels", "0"]) == 2
    assert "key_channels must be" in capsys.readouterr().err
    # per-layer budgets from layer importance measured on a calibration text
    layered = base + ["--policy", "layer_budget", "--press", "snapkv", "--observation-window", "8", "--budget", "0.5"]
    assert main(layered + ["--layer-importance", "block_influence", "--calib", str(text), "--seqlen", "32",
                           "--calib-windows", "2"]) == 0
    layer = json.loads(capsys.readouterr().out)
    assert layer["kept"] == 40 and len(layer["layer_importance"]["scores"]) == 2
    assert sum(layer["layer_importance"]["tokens_per_layer"]) == 80
    for wrong, message in ((layered, "needs it"), (layered + ["--layer-importance", "block_influence"], "needs --calib"),
                           (base + ["--policy", "snapkv", "--layer-importance", "block_influence", "--calib", str(text)],
                            "goes with --policy layer_budget"),
                           (base + ["--policy", "snapkv", "--floor", "0.5"], "--floor applies")):
        assert main(wrong) == 2
        assert message in capsys.readouterr().err


def test_a_missing_torch_or_transformers_names_the_extra(monkeypatch):
    import sys

    from salience.exceptions import MissingDependencyError
    from salience.models.lm import load_causal_lm

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match="pip install 'salience\\[lm\\]'"):
        load_causal_lm("smollm2")
    monkeypatch.setitem(sys.modules, "torch", None)
    for call in (lambda: kv_token_scores("key_norm", None, None), lambda: prefill(None, [1, 2]),
                 lambda: check_budget(0.5, 10, "h2o") and evict(None, "h2o", budget=0.5).__enter__()):
        with pytest.raises(MissingDependencyError, match="pip install 'salience\\[torch\\]'"):
            call()

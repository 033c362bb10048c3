"""The scorer contract, run over every registered method (issue 10).

Each family says how to build its input and call its verb; every method then must: return
``Scores`` aligned with its ids, give the same output for the same seed, give results that do
not depend on batching, round-trip its parameters through ``clone``, pickle, and refuse empty or
invalid input with the library's error naming the input.
"""

import pickle

import numpy as np
import pytest

from salience import Scores
from salience.core.base import create, registered
from salience.core.judges import ScorerJudge
from salience.exceptions import InvalidParameterError, SalienceError
from salience.compress.kv import KV_POLICIES

TEXTS = [
    "Wireless sensor networks are useful. A wireless sensor network has many sensors. "
    "Sensor placement decides the coverage of the network.",
    "Protein folding decides how a protein binds its receptor. Misfolded proteins form clumps in cells.",
    "Stock prices fell today. Markets in Asia fell after the bank raised interest rates again.",
]
TARGET = [("protein binding assay cells receptor folding " * 40)] * 5
RAW = [f"document {i} about " + ("stock markets prices" if i % 2 else "protein cells binding") * 20 for i in range(20)]
CORPUS = [{"_id": f"d{i}", "text": text} for i, text in enumerate(TEXTS + ["the weather was fine", "heat transfer in wings"])]


def _judge():
    return ScorerJudge(lambda query, items: [float(len(str(i))) + 0.1 * int(str(i)[1:]) for i in items])


def _run(method, scorer):
    """(outputs, batched outputs, ids expected) for one scorer, by family."""
    family = method.family
    if family == "search":
        scorer.fit(CORPUS)
        queries = ["sensor network", "protein receptor", "prices fell"]
        one = [scorer.search(q, k=3) for q in queries]
        return one, scorer.search_batch(queries, k=3, n_jobs=2), None
    if family == "keywords":
        if method.name == "embed":
            pytest.importorskip("sentence_transformers")
        scorer.fit(TEXTS)
        return [scorer.score(t) for t in TEXTS], scorer.set_params(batch_size=1).fit(TEXTS).score_batch(TEXTS), None
    if family == "summarize":
        return [scorer.score(t) for t in TEXTS], scorer.score_batch(TEXTS), None
    if family == "data":
        scorer.fit(TARGET, RAW)
        one = scorer.score(RAW, ids=[f"r{i}" for i in range(len(RAW))])
        halves = [scorer.score(RAW[:7]), scorer.score(RAW[7:])]
        joined = Scores(np.concatenate([h.values for h in halves]), ids=one.ids)
        return [one], [joined], [[f"r{i}" for i in range(len(RAW))]]
    if family == "fusion":
        a = Scores([3.0, 2.0, 1.0], ids=["x", "y", "z"])
        b = Scores([5.0, 4.0], ids=["z", "x"])
        rankings = [a, b] if method.name != "wsum" else [a, b]
        return [scorer.score(rankings)], scorer.score_batch([rankings]), None
    if family == "aggregate":
        rankings = [["a", "b", "c"], ["a", "c", "b"], ["b", "a", "c"]]
        return [scorer.score(rankings)], scorer.score_batch([rankings]), None
    if family == "sort":
        items = [f"d{i}" for i in range(12)]
        return [scorer.score(items, _judge())], [scorer.score(items, _judge())], [items]
    if family == "select":
        values = Scores([0.9, 0.2, 0.7, 0.4], ids=list("abcd"))
        return [scorer.score(values)], scorer.score_batch([values]), None
    if family == "explain":
        if method.name in GRADIENT_METHODS + ATTENTION_METHODS:
            pytest.importorskip("torch")
        if method.name in ATTENTION_METHODS:
            rows = [[3, 1, 4], [1, 5, 9]]
            return [scorer.score(row) for row in rows], scorer.score_batch(rows), None
        rows = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 2.0]])
        one = [scorer.score(row, baselines=np.zeros(3), n_samples=6, seed=3) for row in rows]
        return one, scorer.score_batch(rows, baselines=np.zeros(3), n_samples=6, seed=3), None
    if family == "compress":
        if method.name in ("block_influence", "perplexity_change", "ffn_channels", "attention_heads"):
            torch = pytest.importorskip("torch")
            transformers = pytest.importorskip("transformers")
            torch.manual_seed(0)
            config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                              num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
            model = transformers.LlamaForCausalLM(config).eval()
            windows = np.random.default_rng(0).integers(0, 32, (2, 8))
            return [scorer.score(model, windows)], scorer.score_batch([(model, windows)]), None
        if method.name in KV_POLICIES:
            pytest.importorskip("torch")
            rng = np.random.default_rng(0)
            keys, values, queries = rng.normal(size=(2, 12, 4)), rng.normal(size=(2, 12, 4)), rng.normal(size=(4, 12, 4))
            options = {"queries": queries, "window": 3, "kernel_size": 3}
            return ([scorer.score(keys, values, **options)], scorer.score_batch([(keys, values)], **options), None)
        weights = np.array([[1.0, -2.0, 0.5], [0.3, 4.0, -1.0]])
        return [scorer.score(weights)], scorer.score_batch([weights]), None
    raise AssertionError(f"no contract probe for family {family!r}")


GRADIENT_METHODS = ("saliency", "input_x_gradient", "integrated_gradients", "smoothgrad", "deeplift")
ATTENTION_METHODS = ("attention_rollout", "attention_flow")


def _attention_model(input_ids, attention_mask, output_attentions):
    """Two layers of two heads whose attention is a softmax over products of token ids."""
    import torch

    products = input_ids[:, None, :, None].double() * input_ids[:, None, None, :].double() / 10
    padded = attention_mask[:, None, None, :] == 0
    layers = [torch.softmax(sign * products.masked_fill(padded, float("-inf") * sign), dim=-1).expand(-1, 2, -1, -1)
              for sign in (1.0, -1.0)]
    return tuple(layers)


def _options(method) -> dict:
    options = _OPTIONS.get((method.family, method.name), {})
    return options() if callable(options) else options


def _sequential_model():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return {"model": torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()}


def _hash_encoder(texts):
    """A deterministic bag-of-words encoder (32 hashed buckets) for the dense index's contract."""
    import zlib

    out = np.zeros((len(texts), 32))
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, zlib.crc32(word.encode()) % 32] += 1.0
        out[row, 31] += 0.5
    return out


def _explained_model(rows):
    """A small non-additive model for the explainers' contract."""
    return 2.0 * rows[:, 0] + rows[:, 1] * rows[:, 2]


_OPTIONS = {
    ("fusion", "wsum"): {"weights": [0.6, 0.4]},
    ("search", "dense"): {"encoder": _hash_encoder, "encoder_name": "hash32"},
    ("sort", "heapsort"): {"options": {"k": 5}},
    ("sort", "bubble"): {"options": {"k": 5}},
    ("sort", "setwise"): {"options": {"k": 5}},
    ("sort", "sliding_window"): {"options": {"window": 4, "stride": 2}},
    ("sort", "jointrank"): {"options": {"block_size": 4, "seed": 3}},
    ("sort", "permutation_self_consistency"): {"options": {"shuffles": 3, "seed": 3}},
    ("select", "top_k"): {"options": {"k": 2}},
    ("select", "threshold"): {"options": {"threshold": 0.5}},
    ("select", "fraction"): {"options": {"fraction": 0.5}},
    ("select", "sample"): {"options": {"k": 2, "seed": 7}},
    ("data", "dsir"): {"min_target_tokens": 1, "buckets": 512},
    ("data", "classifier"): {"buckets": 512},
    ("data", "perplexity"): {"buckets": 512},
    **{("explain", name): {"model": _explained_model}
       for name in ("exact_shapley", "kernel_shap", "permutation_shapley", "banzhaf", "occlusion", "lime",
                    "saliency", "input_x_gradient", "integrated_gradients", "smoothgrad", "shapley_interaction")},
    ("explain", "rise"): {"model": _explained_model, "image_shape": (1, 3), "grid": 2},
    ("explain", "deeplift"): _sequential_model,
    **{("explain", name): {"model": _attention_model} for name in ATTENTION_METHODS},
    ("compress", "wanda"): {"options": {"input_norms": np.array([1.0, 2.0, 3.0])}},
    ("compress", "taylor"): {"options": {"gradient": np.array([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]])}},
}

METHODS = registered()
FLOAT32_METHODS = {("search", "dense"): 1e-6}


def family_of(method) -> str:
    return method.family


def test_every_family_has_methods():
    assert {m.family for m in METHODS} == {"search", "keywords", "summarize", "data", "fusion", "aggregate", "sort", "select",
                                           "explain", "compress"}
    assert len(METHODS) >= 45


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.family}-{m.name}")
def test_contract(method):
    options = _options(method)
    scorer = method.create(**options)
    # parameters round-trip, and pickling keeps them (process and Ray executors need it)
    assert scorer.clone().get_params().keys() == scorer.get_params().keys()
    assert repr(scorer.clone()) == repr(scorer)
    restored = pickle.loads(pickle.dumps(scorer))
    assert repr(restored) == repr(scorer)
    first, batched, ids = _run(method, scorer)
    again, _, _ = _run(method, method.create(**options))
    for i, (out, out_batched, out_again) in enumerate(zip(first, batched, again)):
        assert isinstance(out, Scores)
        assert len(out.ids) == len(out.values) and len(set(map(repr, out.ids))) == len(out.ids)
        if ids is not None:
            assert set(out.ids) <= set(ids[i] if isinstance(ids[i], list) else ids)
        assert out == out_again, "same seed, same output"
        # dense retrieval scores by float32 matrix products, whose rounding depends on the batch
        rtol = FLOAT32_METHODS.get((family_of(method), method.name), 1e-9)
        assert out.ids == out_batched.ids and np.allclose(out.values, out_batched.values, rtol=rtol, atol=1e-12), \
            "batching must not change results"
    # the fitted scorer still pickles
    pickle.loads(pickle.dumps(scorer))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.family}-{m.name}")
def test_bad_input_is_refused_by_name(method):
    options = _options(method)
    scorer = method.create(**options)
    family = method.family
    with pytest.raises(SalienceError) as caught:
        if family == "search":
            scorer.fit([])
        elif family == "keywords":
            scorer.score(None)
        elif family == "summarize":
            scorer.score([1, 2])
        elif family == "data":
            scorer.fit(TARGET, RAW) if method.name != "perplexity" else scorer.fit(TARGET)
            scorer.score("one text, not a list")
        elif family in ("fusion",):
            scorer.score([Scores([1.0], ids=["a"])])
        elif family == "aggregate":
            scorer.score([["a", "a"]])
        elif family == "sort":
            scorer.score(["a", "a"], _judge())
        elif family == "select":
            bad = {"top_k": {"k": 0}, "threshold": {"threshold": float("nan")}, "fraction": {"fraction": 0.0},
                   "sample": {"k": 0}, "cutoff": {}}[method.name]
            scorer.score(Scores([2.0]), **bad)
        elif family == "explain":
            scorer.score([1.0, float("nan"), 2.0])
        elif family == "compress" and method.name in ("block_influence", "perplexity_change", "ffn_channels",
                                                      "attention_heads"):
            scorer.score(object(), np.ones((2, 4), dtype=int))  # not a decoder model
        elif family == "compress" and method.name in KV_POLICIES:
            scorer.score(np.ones((2, 3)), np.ones((2, 3)))  # not (heads, tokens, head_dim)
        elif family == "compress":
            scorer.score(np.array([1.0, 2.0]))  # a vector, not a weight matrix
    assert str(caught.value)


def test_unknown_names_and_options_are_refused_with_suggestions():
    with pytest.raises(InvalidParameterError, match="Did you mean 'lexrank'"):
        create("summarize", "lexrnk")
    with pytest.raises(InvalidParameterError, match="'threshold' does not apply to method 'textrank'"):
        create("summarize", "textrank", threshold=0.1)
    with pytest.raises(InvalidParameterError, match="'similarity' does not apply to method 'lexrank'"):
        create("summarize", "lexrank", similarity="bm25")
    with pytest.raises(InvalidParameterError, match="continuous LexRank"):
        create("summarize", "textrank", similarity="cosine")
    with pytest.raises(InvalidParameterError, match="fixes method"):
        create("keywords", "rake", method="yake")
    with pytest.raises(InvalidParameterError, match="parameter of BM25"):
        create("search", "lucene").set_params(k2=1.0)
    with pytest.raises(InvalidParameterError, match="'window' does not apply to sort method 'allpairs'"):
        create("sort", "allpairs", options={"window": 3})


def test_set_params_validates_and_clone_is_unfitted():
    bm25 = create("search", "lucene").fit(CORPUS)
    copy = bm25.clone()
    assert copy.get_params() == bm25.get_params() and len(copy) == 0
    with pytest.raises(InvalidParameterError):
        bm25.set_params(b=2.0)
    assert bm25.set_params(k1=0.9).k1 == 0.9


def test_methods_command_lists_the_registry(capsys):
    import json

    from salience.cli import main

    assert main(["methods", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["methods"]
    assert {(r["family"], r["name"]) for r in rows} == {(m.family, m.name) for m in METHODS}
    assert main(["methods", "--domain", "summarize"]) == 0
    text = capsys.readouterr().out
    assert "lexrank" in text and "textrank" in text and "bm25" not in text.split("summarize:")[0]


def test_the_methods_page_is_the_registry():
    from pathlib import Path

    from salience.cli.methods import methods_markdown

    rows = [{"family": m.family, "name": m.name, "class": m.factory.__name__, "description": m.description,
             "params": m.params()} for m in METHODS]
    page = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
    assert page.read_text(encoding="utf-8") == methods_markdown(rows), \
        "docs/methods.md is stale: run salience methods --markdown > docs/methods.md"

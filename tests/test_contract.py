"""The scorer contract, run over every registered method (issue 10).

Each family says how to build its input and call its verb; every method then must: return
``Scores`` aligned with its ids, give the same output for the same seed, give results that do
not depend on batching, round-trip its parameters through ``clone``, pickle, and refuse empty or
invalid input with the library's error naming the input.
"""

import functools
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from salience import Scores
from salience.core.base import create, registered
from salience.core.judges import ScorerJudge
from salience.exceptions import InvalidParameterError, SalienceError

TEXTS = [
    "Wireless sensor networks are useful. A wireless sensor network has many sensors. "
    "Sensor placement decides the coverage of the network.",
    "Protein folding decides how a protein binds its receptor. Misfolded proteins form clumps in cells.",
    "Stock prices fell today. Markets in Asia fell after the bank raised interest rates again.",
]
TARGET = [("protein binding assay cells receptor folding " * 40)] * 5
RAW = [f"document {i} about " + ("stock markets prices" if i % 2 else "protein cells binding") * 20 for i in range(20)]
_GAME_X = np.random.default_rng(5).normal(size=(14, 2))
#: (train, test) for the valuation methods: 10 rows to value, 4 to test on
VALUATION_GAME = ((_GAME_X[:10], [0, 1] * 5), (_GAME_X[10:], [0, 1, 1, 0]))
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
        from salience.keywords.judged import JudgedKeyphrases

        if method.name == "embed" or isinstance(scorer, JudgedKeyphrases):
            pytest.importorskip("transformers")  # an encoder or a language model reads the text
        scorer.fit(TEXTS)
        return [scorer.score(t) for t in TEXTS], scorer.set_params(batch_size=1).fit(TEXTS).score_batch(TEXTS), None
    if family == "summarize":
        return [scorer.score(t) for t in TEXTS], scorer.score_batch(TEXTS), None
    if family == "valuation":
        pytest.importorskip("sklearn")  # without it, the error names the extra to install
        train, test = VALUATION_GAME
        one = scorer.score(train, test, ids=[f"r{i}" for i in range(len(train[1]))])
        return [one], scorer.score_batch([(train, test)], ids=[f"r{i}" for i in range(len(train[1]))]), None
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
    if family == "quantizers":
        pytest.importorskip("torch")
        weights = np.array([[1.0, -2.0, 0.5, 0.25], [0.3, 4.0, -1.0, 2.0]])
        x = np.random.default_rng(1).normal(size=(20, 4))
        return ([scorer.score(weights, hessian=x.T @ x)], scorer.score_batch([weights], hessian=x.T @ x), None)
    if family in ("layers", "structure", "precision"):
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
        model = transformers.LlamaForCausalLM(config).eval()
        windows = np.random.default_rng(0).integers(0, 32, (2, 8))
        return [scorer.score(model, windows)], scorer.score_batch([(model, windows)]), None
    if family == "kv":
        pytest.importorskip("torch")
        rng = np.random.default_rng(0)
        keys, values, queries = rng.normal(size=(2, 12, 4)), rng.normal(size=(2, 12, 4)), rng.normal(size=(4, 12, 4))
        # what a policy reads of the layer besides its cache: a rotation, the output projection, the budget,
        # the layer, the question's length (finch), the attention's input (kvzap)
        context = {"rotary": lambda positions: (np.ones((len(positions), 4)), np.zeros((len(positions), 4))),
                   "output_weight": rng.normal(size=(6, 16)), "keep": 6, "layer": 0, "question": 3,
                   "hidden": rng.normal(size=(12, 5))}
        extra = {name: context[name] for name in scorer.needs.reads}
        return ([scorer.score(keys, values, queries=queries, **extra)],
                scorer.score_batch([(keys, values, queries)], **extra), None)
    if family == "kv_channels":
        pytest.importorskip("torch")
        rng = np.random.default_rng(0)
        keys, queries = rng.normal(size=(2, 12, 4)), rng.normal(size=(4, 12, 4))
        return [scorer.score(keys, queries)], scorer.score_batch([(keys, queries)]), None
    if family == "weights":
        weights = np.array([[1.0, -2.0, 0.5], [0.3, 4.0, -1.0]])
        data = {"wanda": {"input_norms": np.array([1.0, 2.0, 3.0])},
                "taylor": {"gradient": np.array([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]])},
                "sparsegpt": {"hessian_inverse_diagonal": np.array([0.5, 1.0, 2.0])}}.get(method.name, {})
        return [scorer.score(weights, **data)], scorer.score_batch([weights], **data), None
    if family == "global":
        rows = np.random.default_rng(4).normal(size=(12, 3))
        return [scorer.score(rows)], scorer.score_batch([rows]), None
    if family == "classify":
        scorer.fit(TEXTS * 2, [True, False, True] * 2)
        return [scorer.score(TEXTS)], scorer.score_batch([TEXTS]), None
    if family == "pack":
        scores = Scores([0.9, 0.8, 0.3, 0.1], ids=["a", "b", "c", "d"])
        lengths = [10, 20, 10, 5]
        similarity = np.array([[1, .9, 0, 0], [.9, 1, 0, 0], [0, 0, 1, .2], [0, 0, .2, 1]])
        extra = {"similarity": similarity} if method.name == "mmr" else {}
        return [scorer.score(scores, lengths, **extra)], scorer.score_batch([(scores, lengths)], **extra), None
    if family == "judge":
        queries = ["cats sleep", "dogs bark"] if method.name != "encoder" else ["sensor network", "protein"]
        passages = ["cats sleep", "dogs bark . fish swim", "fish"] if method.name != "encoder" else TEXTS
        return ([scorer.score(q, passages) for q in queries], scorer.score_batch([(q, passages) for q in queries]),
                None)
    if family == "context":
        items = [({"a": "cats sleep", "b": "dogs bark", "c": "fish swim"}, "Which cats ?", "cats sleep"),
                 (["dogs bark", "cats sleep"], "Which dogs ?", "dogs bark")]
        return [scorer.score(*item) for item in items], scorer.score_batch(items), None
    if family == "prompt":
        prompts = ["the cat sat", "a dog ran far"]
        return [scorer.score(p, target=" on") for p in prompts], scorer.score_batch(prompts, target=" on"), None
    if family == "rerank":
        first = Scores([9.0, 8, 7, 6, 5], ids=["d1", "d22", "d3", "d4444", "d55"])
        texts = {i: i for i in first.ids}
        pairs = [("q", first), ("r", first.take([4, 3, 2, 1, 0]))]
        return ([scorer.score(q, c, _LengthJudge(), texts) for q, c in pairs],
                scorer.score_batch(pairs, _LengthJudge(), texts), None)
    raise AssertionError(f"no contract probe for family {family!r}")


class _LengthJudge:
    """A scoring judge for the rerank contract: longer passages first."""

    method = "length"

    def scores(self, query, passages):
        return np.array([float(len(p)) for p in passages])

    def judge(self, texts):
        return ScorerJudge(lambda query, ids: self.scores(query, [texts[i] for i in ids]))


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


def _dense_hash():
    from salience.search import Dense

    return Dense(encoder=_hash_encoder, encoder_name="hash32")


def _explained_model(rows):
    """A small non-additive model for the explainers' contract."""
    return 2.0 * rows[:, 0] + rows[:, 1] * rows[:, 2]


def _tiny_lm():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_lm

    model, tokenizer = tiny_lm()
    return {"model": model, "tokenizer": tokenizer}


@functools.lru_cache(maxsize=1)
def _tiny_cross():
    import tempfile

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_cross_folder

    return tiny_cross_folder(Path(tempfile.mkdtemp(prefix="tiny-cross-")) / "cross")


_OPTIONS = {
    ("global", "permutation_importance"): {"model": _explained_model},
    ("classify", "logistic"): {"buckets": 1024},
    **{("pack", name): {"tokens": 25} for name in ("knapsack", "mmr", "topk")},
    **{("judge", name): _tiny_lm for name in ("pointwise", "qlm", "pairwise", "listwise", "icr")},
    ("prompt", "lm"): _tiny_lm,
    **{("context", name): _tiny_lm for name in ("contextcite", "loo", "attention", "kernel_shap", "gradient")},
    ("judge", "encoder"): {"encoder": _hash_encoder, "encoder_name": "hash32"},
    ("judge", "cross"): lambda: {"model": str(_tiny_cross())},
    ("fusion", "wsum"): {"weights": [0.6, 0.4]},
    ("search", "dense"): {"encoder": _hash_encoder, "encoder_name": "hash32"},
    ("search", "hybrid"): lambda: {"dense": _dense_hash()},
    ("sort", "heapsort"): {"k": 5},
    ("sort", "bubble"): {"k": 5},
    ("sort", "setwise"): {"k": 5},
    ("sort", "sliding_window"): {"window": 4, "stride": 2},
    ("sort", "jointrank"): {"block_size": 4, "seed": 3},
    ("sort", "permutation_self_consistency"): {"shuffles": 3, "seed": 3},
    ("select", "top_k"): {"k": 2},
    ("select", "threshold"): {"threshold": 0.5},
    ("select", "fraction"): {"fraction": 0.5},
    ("select", "sample"): {"k": 2, "seed": 7},
    ("kv", "snapkv"): {"window": 3, "kernel_size": 3},
    ("kv", "caote"): {"window": 3},
    ("kv", "pyramidkv"): {"window": 3, "kernel_size": 3},
    ("kv", "compactor"): {"sink_size_start": 2, "sink_size_end": 1, "sketch_dimension": 3},
    ("kv", "leverage"): {"sketch_dimension": 3},
    **{("kv", name): {"press": "key_norm"} for name in ("adakv", "criticalkv", "chunkkv", "entropy_chunkkv", "block", "layer_budget",
                                                               "rerotate", "merging")},
    ("kv", "qfilter"): {"filters": np.linspace(-1, 1, 16).reshape(1, 2, 8)[..., :4]},
    ("kv", "kvzap"): {"surrogate": np.linspace(-1, 1, 12).reshape(1, 2, 6)},
    ("kv", "dms"): {"threshold": 0.0},
    ("kv", "duo_attention"): {"head_scores": [[0.1, 0.2]], "sink_size": 1, "recent_size": 2},
    ("data", "dsir"): {"min_target_tokens": 1, "buckets": 512},
    ("data", "classifier"): {"buckets": 512},
    ("data", "perplexity"): {"buckets": 512},
    **{("valuation", name): {"budget": 30} for name in ("tmc_shapley", "beta_shapley", "data_banzhaf")},
    **{("explain", name): {"model": _explained_model}
       for name in ("exact_shapley", "kernel_shap", "permutation_shapley", "banzhaf", "occlusion", "lime",
                    "saliency", "input_x_gradient", "integrated_gradients", "smoothgrad", "shapley_interaction")},
    ("explain", "rise"): {"model": _explained_model, "image_shape": (1, 3), "grid": 2},
    ("explain", "deeplift"): _sequential_model,
    **{("explain", name): {"model": _attention_model} for name in ATTENTION_METHODS},
}

#: verifiers return a Verification, not Scores: their contract is test_verifier_contract's
METHODS = [m for m in registered() if m.family != "verify"]
VERIFIERS = registered("verify")
#: the LM judges hold a loaded transformers model, which transformers does not pickle (its
#: output-capturing hooks are local functions): they run in the process that loaded it
HOLDS_A_LOADED_MODEL = {("judge", name) for name in ("pointwise", "qlm", "pairwise", "listwise", "icr")} | {("prompt", "lm")} | \
    {("context", name) for name in ("contextcite", "loo", "attention", "kernel_shap", "gradient")}
FLOAT32_METHODS = {("search", "dense"): 1e-6, ("search", "hybrid"): 1e-6}


#: batch forms that call the single-item verb in a loop (nothing computed differently to compare)
LOOP_BATCHES = {"SentenceScorer.score_batch", "Fuser.score_batch", "Aggregator.score_batch", "FunctionMethod.score_batch",
                "RerankAlgorithm.score_batch", "WeightCriterion.score_batch", "StructureImportance.score_batch",
                "LayerImportance.score_batch", "KVPolicy.score_batch", "Judge.score_batch",
                "Packer.score_batch", "PermutationImportance.score_batch", "TextClassifier.score_batch",
                "LMAttribution.score_batch", "Valuation.score_batch"}


def _batch_is_a_loop(scorer) -> bool:
    batch = getattr(type(scorer), "score_batch", None) or getattr(type(scorer), "search_batch")
    return batch.__qualname__ in LOOP_BATCHES


def _same_params(a: dict, b: dict) -> bool:
    """Parameters equal by value (arrays element-wise, nested scorers by their parameters,
    callables by identity)."""
    from salience.core.base import Scorer

    if a.keys() != b.keys():
        return False
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, Scorer) and isinstance(y, Scorer):
            if type(x) is not type(y) or not _same_params(x.get_params(), y.get_params()):
                return False
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x is not y and x != y:
            return False
    return True


def test_batch_forms_that_compute_differently_are_checked():
    """The families whose batch form is its own code (search, keywords, data, explain)."""
    checked = {m.family for m in METHODS if not _batch_is_a_loop(m.factory.__new__(m.factory))}
    assert {"search", "keywords", "data", "explain"} <= checked


def family_of(method) -> str:
    return method.family


def test_every_family_has_methods():
    from salience.core.base import FAMILIES

    assert {m.family for m in METHODS + VERIFIERS} == set(FAMILIES)
    assert len(METHODS) >= 45


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.family}-{m.name}")
def test_contract(method):
    options = _options(method)
    scorer = method.create(**options)
    # parameters round-trip by value, and pickling keeps them (process and Ray executors need it)
    assert _same_params(scorer.clone().get_params(), scorer.get_params())
    assert repr(scorer.clone()) == repr(scorer)
    if (method.family, method.name) not in HOLDS_A_LOADED_MODEL:
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
        if _batch_is_a_loop(scorer):
            continue  # the batch form calls the verb item by item: comparing them would test nothing
        # dense retrieval scores by float32 matrix products, whose rounding depends on the batch
        rtol = FLOAT32_METHODS.get((family_of(method), method.name), 1e-9)
        assert out.ids == out_batched.ids and np.allclose(out.values, out_batched.values, rtol=rtol, atol=1e-12), \
            "batching must not change results"
    # the fitted scorer still pickles
    if (method.family, method.name) not in HOLDS_A_LOADED_MODEL:
        pickle.loads(pickle.dumps(scorer))


def _verifier_inputs(name: str) -> tuple:
    """(scores, the verb's inputs) that each verifier checks: a probe per unit kind."""
    if name == "features":
        x = np.array([1.0, 2.0, -1.0, 0.5, 3.0])
        return 2.0 * x, {"model": lambda rows: np.asarray(rows) @ np.full(5, 2.0), "x": x}
    if name == "examples":
        pytest.importorskip("sklearn")
        train, test = VALUATION_GAME
        return np.arange(10.0), {"train": train, "test": test}
    if name == "layers":
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=6,
                                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
        model = transformers.LlamaForCausalLM(config).eval()
        return np.arange(6.0), {"model": model, "windows": np.random.default_rng(0).integers(0, 32, (2, 8))}
    if name == "sentences":
        sentences = [s for text in TEXTS for s in text.split(". ")]
        return np.arange(len(sentences), dtype=float), {"sentences": sentences}
    if name in ("structures", "weights", "kv"):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
        from tests.compress.models import tiny_llama

        model, windows = tiny_llama(), np.random.default_rng(0).integers(0, 64, (2, 8))
        if name == "structures":
            return np.arange(4.0), {"model": model, "windows": windows}  # 2 layers x 2 key/value groups, by position
        if name == "weights":
            weight = model.model.layers[0].mlp.down_proj.weight.detach().numpy()
            return {"model.layers.0.mlp.down_proj": np.abs(weight)}, {"model": model, "windows": windows}
        return np.arange(10.0), {"model": model, "context_ids": np.arange(10), "continuation_ids": np.arange(10, 14)}
    if name == "selection":
        return np.arange(len(TEXTS), dtype=float), {"texts": TEXTS, "target": TEXTS[:1]}
    if name == "passages":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
        from tests.models.tiny import tiny_lm

        model, tokenizer = tiny_lm()
        return np.array([2.0, 0.5, 1.0]), {"passages": ["cats sleep", "dogs bark", "fish swim"], "question": "Which cats ?",
                                           "response": "cats sleep", "model": model, "tokenizer": tokenizer}
    if name == "keyphrases":
        document = ("Wireless sensor networks need sensor placement. Sensor placement in wireless sensor networks is "
                    "costly, and the network lifetime depends on it.")
        return Scores([3.0, 2.0, 1.0], ids=["sensor placement", "wireless sensor networks", "network lifetime"]), \
            {"document": document, "title": "Sensor placement in wireless networks",
             "collection": ["Graph kernels compare graphs.", "Protein folding in the cell membrane."]}
    raise AssertionError(f"no contract probe for verifier {name!r}")


@pytest.mark.parametrize("method", VERIFIERS, ids=lambda m: f"verify-{m.name}")
def test_verifier_contract(method):
    from salience.core.verify import VERDICTS, Verification

    verifier = method.create(n_random=4, steps=3)
    assert _same_params(verifier.clone().get_params(), verifier.get_params()) and repr(verifier.clone()) == repr(verifier)
    assert repr(pickle.loads(pickle.dumps(verifier))) == repr(verifier)
    scores, inputs = _verifier_inputs(method.name)
    first = verifier.verify(scores, **inputs)
    again = method.create(n_random=4, steps=3).verify(scores, **inputs)
    (batched,) = verifier.verify_batch([(scores, inputs)])
    assert isinstance(first, Verification) and first.verdict in VERDICTS and first.unit == method.name
    for other in (again, batched):  # same seed, same curves and verdict
        assert other.verdict == first.verdict and np.allclose(other.curves["scores"], first.curves["scores"])
        assert np.allclose(other.areas["random"], first.areas["random"])
    assert first.evaluations <= (4 + 2) * 3 + 1
    if isinstance(scores, Scores):
        nan = dict(zip(scores.ids, np.full(len(scores), np.nan)))
    elif isinstance(scores, dict):
        nan = {name: np.full_like(value, np.nan) for name, value in scores.items()}
    else:
        nan = np.full(len(scores), np.nan)
    with pytest.raises(SalienceError, match="nan"):
        verifier.verify(nan, **inputs)


#: what each family's bad-input error must name (the input, or the parameter, that was wrong)
NAMED = {"search": "corpus", "keywords": "text must be a str", "summarize": "sentences must be", "data": "texts must be",
         "valuation": "train must be a pair",
         "fusion": "rankings must be", "aggregate": "ranking 0 lists item 'a' twice", "sort": "item 'a' appears twice",
         "explain": "inputs holds nan|token ids must be", "weights": "weight matrix", "structure": "decoder blocks",
         "layers": "decoder blocks", "kv": "keys must be", "kv_channels": "keys must be", "rerank": "no text, e.g. 'b'", "judge": "query must be",
         "pack": "lengths has 1 entries for 2 passages", "global": "inputs holds nan", "classify": "texts",
         "prompt": "prompt must be a non-empty text", "quantizers": "weight matrix", "context": "source 'a' is empty",
         "precision": "decoder blocks"}
SELECT_BAD = {"top_k": ({"k": 0}, "k must be"), "threshold": ({"threshold": float("nan")}, "threshold must be"),
              "fraction": ({"fraction": 0.0}, "fraction must be"), "sample": ({"k": 0}, "k must be"),
              "cutoff": ({"objective": "recall"}, "objective")}


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.family}-{m.name}")
def test_bad_input_is_refused_by_name(method):
    options = _options(method)
    scorer = method.create(**options)
    family = method.family
    named = NAMED.get(family)
    if family in ("layers", "structure", "kv", "kv_channels", "prompt", "quantizers", "precision", "context"):
        pytest.importorskip("torch")  # without it, the error names the extra to install
    with pytest.raises(SalienceError) as caught:
        if family == "search":
            scorer.fit([])
        elif family == "keywords":
            scorer.score(None)
        elif family == "summarize":
            scorer.score([1, 2])
        elif family == "valuation":
            scorer.score("one text, not a list", VALUATION_GAME[1])
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
            bad, named = SELECT_BAD[method.name]
            method.create(**bad).score(Scores([0.5]))
        elif family == "explain":
            scorer.score([1.0, float("nan"), 2.0])
        elif family in ("layers", "structure", "precision"):
            scorer.score(object(), np.ones((2, 4), dtype=int))  # not a decoder model
        elif family in ("kv", "kv_channels"):
            scorer.score(np.ones((2, 3)), np.ones((2, 3)))  # not (heads, tokens, head_dim)
        elif family in ("weights", "quantizers"):
            scorer.score(np.array([1.0, 2.0]))  # a vector, not a weight matrix
        elif family == "judge":
            scorer.score("  ", ["a passage"])
        elif family == "pack":
            scorer.score(Scores([0.5, 0.4], ids=["a", "b"]), [5])
        elif family == "global":
            scorer.score([[1.0, float("nan"), 2.0], [0.0, 1.0, 2.0]])
        elif family == "classify":
            scorer.fit(TEXTS * 2, [True, False, True] * 2).score("one text, not a list")
        elif family == "prompt":
            scorer.score("  ", target=" on")
        elif family == "context":
            scorer.score({"a": " ", "b": "cats"}, "Which cats ?", "cats sleep")
        elif family == "rerank":
            scorer.score("q", Scores([1.0, 2.0], ids=["a", "b"]), _LengthJudge(), {"a": "a"})  # no text for 'b'
    assert re.search(named, str(caught.value)), f"{caught.value} does not name the bad input ({named})"


def _constrained(method) -> list[str]:
    """The parameters a method checks itself (those exempt, with a reason, are checked where used)."""
    from salience.core.params import Exempt

    constraints = method.factory._constraints() if hasattr(method.factory, "_constraints") else {}
    return [name for name, allowed in constraints.items()
            if name in method.params() and not any(isinstance(c, Exempt) for c in allowed)]


@pytest.mark.parametrize("method", [m for m in METHODS if _constrained(m)], ids=lambda m: f"{m.family}-{m.name}")
def test_a_bad_parameter_value_is_refused_by_its_name(method):
    """Every parameter that declares its constraints refuses a value of the wrong type, naming it."""
    for name in _constrained(method):
        with pytest.raises(InvalidParameterError, match=f"{name} (must be|of)"):
            method.create(**{**_options(method), name: object()})


def _invalid_values(constraints: list) -> list:
    """Values none of ``constraints`` accepts, made from each: past an interval's ends (and at
    an open end), a fraction for an integer, NaN, an option that is not one, text for a bool."""
    from salience.core.params import Interval, Options, _accepts

    candidates: list = []
    for c in constraints:
        if isinstance(c, Interval):
            for end, step, open_ends in ((c.low, -1, ("right", "neither")), (c.high, 1, ("left", "neither"))):
                if end is not None:
                    candidates += [end + step, end + step / 2] + ([end] if c.closed in open_ends else [])
            candidates += [1.5, float("nan")] if c.kind == "int" else [float("nan"), float("inf")]
        elif isinstance(c, Options):
            candidates.append("no-such-option")
        elif c is bool:
            candidates.append("yes")
    return [v for v in candidates if not any(_accepts(c, v) for c in constraints)]


@pytest.mark.parametrize("method", [m for m in METHODS if _constrained(m)], ids=lambda m: f"{m.family}-{m.name}")
def test_an_out_of_range_value_is_refused_by_its_name(method):
    """Beyond the wrong type: each constraint's own bad values (out of range, a fraction for a
    count, NaN, an unknown option), generated from the constraint, are refused naming the
    parameter."""
    constraints = method.factory._constraints()
    for name in _constrained(method):
        for value in _invalid_values(constraints[name]):
            with pytest.raises(InvalidParameterError, match=re.escape(name)):
                method.create(**{**_options(method), name: value})


def test_unknown_names_and_options_are_refused_with_suggestions():
    with pytest.raises(InvalidParameterError, match="Did you mean 'lexrank'"):
        create("summarize", "lexrnk")
    with pytest.raises(InvalidParameterError, match="'textrank' has no parameter 'threshold' \\(it is a parameter of "
                                                    "lexrank\\)"):
        create("summarize", "textrank", threshold=0.1)
    with pytest.raises(InvalidParameterError, match="'lexrank' has no parameter 'similarity'"):
        create("summarize", "lexrank", similarity="bm25")
    with pytest.raises(InvalidParameterError, match="continuous LexRank"):
        create("summarize", "textrank", similarity="cosine")
    with pytest.raises(InvalidParameterError, match="fixes variant"):
        create("search", "atire", variant="lucene")
    with pytest.raises(InvalidParameterError, match="'rake' has no parameter 'method'"):
        create("keywords", "rake", method="yake")
    with pytest.raises(InvalidParameterError, match="parameter of BM25"):
        create("search", "lucene").set_params(k2=1.0)
    with pytest.raises(InvalidParameterError, match="'allpairs' has no parameter 'window' \\(it is a parameter of "
                                                    "sliding_window\\)"):
        create("sort", "allpairs", window=3)


def test_set_params_validates_and_clone_is_unfitted():
    bm25 = create("search", "lucene").fit(CORPUS)
    copy = bm25.clone()
    assert copy.get_params() == bm25.get_params() and len(copy) == 0
    with pytest.raises(InvalidParameterError):
        copy.set_params(b=2.0)
    assert copy.set_params(k1=0.9).k1 == 0.9
    with pytest.raises(InvalidParameterError, match="holds indexed documents"):  # it would empty the index
        bm25.set_params(k1=0.9)


def test_methods_command_lists_the_registry(capsys):
    import json

    from salience.cli import main

    assert main(["methods", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["methods"]
    assert {(r["family"], r["name"]) for r in rows} == {(m.family, m.name) for m in METHODS + VERIFIERS}
    assert main(["methods", "--domain", "summarize"]) == 0
    text = capsys.readouterr().out
    assert "lexrank" in text and "textrank" in text and "bm25" not in text.split("summarize:")[0]


def test_the_methods_page_is_the_registry():
    from pathlib import Path

    from salience.cli.methods import methods_markdown

    from salience.core.base import method_rows

    rows = method_rows()
    page = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
    assert page.read_text(encoding="utf-8") == methods_markdown(rows), \
        "docs/methods.md is stale: run salience methods --markdown > docs/methods.md"


def test_the_contributing_guides_family_table_is_the_registry():
    """Every family is documented: docs/contributing.md's table is generated from FAMILIES,
    and core/base.py's docstring lists none by hand (it points at the table)."""
    import re
    from pathlib import Path

    from salience.cli.methods import families_markdown
    from salience.core import base

    guide = (Path(__file__).resolve().parents[1] / "docs" / "contributing.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- families: generated -->\n(.*?)<!-- /families -->", guide, re.S).group(1)
    assert table == families_markdown(), "docs/contributing.md's family table is stale: salience methods --families"
    assert all(f"| `{family}` |" in table for family in base.FAMILIES)
    assert "salience methods\n--families" in base.__doc__ or "salience methods --families" in base.__doc__


def test_library_code_cites_no_benchmark():
    """Benchmark history lives in BENCHMARKS.md and the benches; a default chosen on a dev split
    says so in its docstring and guide, never by pointing at a bench or the report."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "salience"
    citing = [f"{path.relative_to(package.parent)}:{n}" for path in sorted(package.rglob("*.py"))
              for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
              if "BENCHMARKS" in line or "bench/" in line or "DEV_CHOSEN" in line]
    assert not citing, citing


def test_set_params_never_empties_an_index_and_clone_copies_by_value():
    import numpy as np

    from salience.search import BM25

    index = BM25().index(["red fox", "red dog", "blue"])
    with pytest.raises(InvalidParameterError, match="holds indexed documents.*clone\\(\\).set_params\\(k1=...\\)"):
        index.set_params(k1=1.2)
    assert index.n_docs == 3 and index.search("red", k=3).ids  # untouched
    fresh = index.clone().set_params(k1=1.2)
    assert fresh.k1 == 1.2 and not fresh._has_data()
    assert index.set_params() is index  # nothing asked: nothing dropped
    # by value: the clone's containers are its own
    policy = create("kv", "layer_budget", importance=np.array([1.0, 2.0]))
    copy = policy.clone()
    copy.importance[0] = 9.0
    assert policy.importance[0] == 1.0
    fused = create("fusion", "rrf", weights=[1.0, 2.0])
    twin = fused.clone()
    twin.weights.append(3.0)
    assert fused.weights == [1.0, 2.0]


def test_every_parameter_is_constrained_or_exempt_with_a_reason():
    """scikit-learn's rule: no parameter is skipped silently. Each registered method's parameter
    has constraints, or an ``Exempt(reason)`` saying why it is checked elsewhere."""
    unchecked = [f"{m.family}.{m.name}: {name}" for m in registered() for name in m.params()
                 if name not in (m.factory._constraints() if hasattr(m.factory, "_constraints") else {})]
    assert not unchecked, unchecked


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.family}-{m.name}")
def test_init_stores_each_parameter_as_given(method):
    """scikit-learn's rule: __init__ stores its parameters untouched (what it derives lives in
    other attributes), so get_params returns exactly what was passed, and clone rebuilds it."""
    import inspect

    options = _options(method)
    try:
        scorer = method.create(**options)
    except SalienceError as err:  # an optional dependency missing: the error names the extra
        pytest.skip(str(err))
    given = {**{p.name: p.default for p in inspect.signature(method.factory).parameters.values()
                if p.default is not inspect.Parameter.empty}, **method.fixed, **options}
    params = scorer.get_params()
    for name, value in given.items():
        if name in params:
            assert params[name] is value or _same(params[name], value), \
                f"{method.family}/{method.name}: {name}={value!r} given, get_params gives {params[name]!r}"


def _same(a, b) -> bool:
    try:
        same = a == b
        return bool(same.all()) if hasattr(same, "all") else bool(same) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - values without a usable ==
        return False


def test_constructor_parameters_are_read_once_per_class_and_again_when_it_changes(monkeypatch):
    import inspect

    from salience.core.base import Scorer

    class Probe(Scorer):
        def __init__(self, *, alpha: float = 1.0):
            self.alpha = alpha

    reads = []
    signature = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f, *a, **k: reads.append(f) or signature(f, *a, **k))
    assert [p.name for p in Probe._init_parameters()] == ["alpha"]
    assert Probe().get_params() == {"alpha": 1.0} and Probe(alpha=2.0).get_params() == {"alpha": 2.0}
    assert len(reads) == 1  # one read for every construction after it

    def changed(self, *, alpha: float = 1.0, beta: int = 3):
        self.alpha, self.beta = alpha, beta

    monkeypatch.setattr(Probe, "__init__", changed)
    assert Probe().get_params() == {"alpha": 1.0, "beta": 3} and len(reads) == 2

    class Child(Probe):  # a subclass reads its own constructor, not its parent's reading
        def __init__(self, *, gamma: str = "x"):
            self.gamma = gamma

    assert Child().get_params() == {"gamma": "x"}

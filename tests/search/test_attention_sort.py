"""Attention sorting on a tiny LLaMA: each round orders the passages by the attention the
question's tokens pay them, read from the model's own weights, the most attended last."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.exceptions import InvalidParameterError  # noqa: E402
from salience.models.answering import SourcedQuestion  # noqa: E402
from salience.search import attention_sort  # noqa: E402

PASSAGES = {"a": "cats sleep", "b": "dogs bark", "c": "fish swim", "d": "cats swim"}


@pytest.fixture(scope="module")
def tiny():
    from tests.models.tiny import tiny_lm

    return tiny_lm()


def _received(model, tokenizer, texts, question):
    asked = SourcedQuestion(model, tokenizer, texts, question, answered=False)
    prompt = asked.prompt_ids(np.ones(len(texts), dtype=bool))
    q0, q1 = asked.question_span()
    assert tokenizer.decode(prompt[q0:q1]) == question
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.tensor([prompt]), output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    rows = torch.stack([a[0, :, q0:q1, :] for a in attentions]).double()
    return np.array([float(rows[:, :, :, a:b].sum(dim=(2, 3)).mean()) for a, b in asked.source_spans()])


def test_one_round_puts_the_most_attended_passage_last(tiny):
    model, tokenizer = tiny
    received = _received(model, tokenizer, list(PASSAGES.values()), "Which cats ?")
    expected = [list(PASSAGES)[i] for i in np.argsort(received, kind="stable")]
    assert attention_sort(PASSAGES, "Which cats ?", model=model, tokenizer=tokenizer) == expected
    # a second round re-reads the context in its new order
    texts = [PASSAGES[i] for i in expected]
    again = _received(model, tokenizer, texts, "Which cats ?")
    second = [expected[i] for i in np.argsort(again, kind="stable")]
    assert attention_sort(PASSAGES, "Which cats ?", model=model, tokenizer=tokenizer, rounds=2) == second
    assert attention_sort(list(PASSAGES.values()), "Which cats ?", model=model, tokenizer=tokenizer) == \
        [str(list(PASSAGES).index(i)) for i in expected]
    with pytest.raises(InvalidParameterError, match="rounds"):
        attention_sort(PASSAGES, "Which cats ?", model=model, tokenizer=tokenizer, rounds=0)

"""Queries a causal LM writes for passages: the batched, prefix-cached greedy decoding writes
exactly what transformers' own generate writes for each prompt alone; the question source and
the false-negative filter of the training pairs."""

import pytest

from salience.exceptions import InvalidParameterError
from salience.search.pseudo_queries import pseudo_queries

from .test_pseudo_queries import DOCS

PASSAGES = ["cats sleep . dogs bark", "fish swim", "Is the passage relevant to the query ? Yes or No", "dogs"]


def test_batched_prefix_cached_decoding_equals_generate_alone():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.search.query_generation import QueryGenerator
    from tests.models.tiny import tiny_lm

    model, tokenizer = tiny_lm()
    generator = QueryGenerator(model, tokenizer=tokenizer, max_new_tokens=6, batch_size=3)
    written = generator(PASSAGES)
    assert generator.calls == len(PASSAGES) and len(written) == len(PASSAGES)
    for passage, query in zip(PASSAGES, written):
        prompt = tokenizer.encode(generator.prefix_text + f"Passage: {passage}\nQuery:", add_special_tokens=False)
        with torch.inference_mode():
            alone = model.generate(torch.tensor([prompt]), attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
                                   max_new_tokens=6, do_sample=False, pad_token_id=0)
        new = alone[0, len(prompt):].tolist()
        end = model.generation_config.eos_token_id  # generate keeps the end token; a query does not
        new = new[: new.index(end)] if end in new else new
        assert query == tokenizer.decode(new, skip_special_tokens=True).strip()
    with pytest.raises(InvalidParameterError, match="batch_size must be a whole number >= 1"):
        QueryGenerator(model, tokenizer=tokenizer, batch_size=0)


class _Echo:
    """A stand-in generator: the first three words of each passage."""

    def __call__(self, passages, progress=None):
        return [" ".join(p.split()[:3]) for p in passages]


def test_the_question_source_and_the_false_negative_filter():
    pairs, report = pseudo_queries(DOCS, sources=["question"], generator=_Echo(), k=2, negatives=2)
    assert report["candidates"] == {"question": 4}
    heat = next(p for p in pairs if p.doc_id == "heat")
    assert heat.query == "Boundary layers carry" and heat.passage == DOCS[0]["text"] and heat.source == "question"
    sample, _ = pseudo_queries(DOCS, sources=["question"], generator=_Echo(), max_questions=2)
    assert len({p.doc_id for p in sample}) <= 2

    class Judge:  # every other document answers as well as the pair's own passage
        def scores(self, query, passages):
            return [1.0] * len(passages)

    filtered, report = pseudo_queries(DOCS, sources=["question"], generator=_Echo(), k=2, negatives=2,
                                      negatives_judge=Judge())
    assert all(p.negatives == () for p in filtered)
    assert report["false_negatives_dropped"] == sum(len(p.negatives) for p in pairs) > 0
    with pytest.raises(InvalidParameterError, match="the question source needs a generator"):
        pseudo_queries(DOCS, sources=["question"])

"""Greedy decoding with prompt lookup: drafts found by hand, a reader whose next token is known
(the answer is plain greedy's, in fewer passes), the tiny Llama's answers equal with and
without lookup, weights loaded in bfloat16; bad input named."""

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError
from salience.models.decoding import greedy_decode, lookup_draft


def test_the_draft_follows_the_latest_earlier_occurrence_of_the_last_tokens():
    assert lookup_draft([1, 2, 3, 9, 8, 1, 2, 3], count=2) == [9, 8]  # the 3-gram 1 2 3 seen at 0
    assert lookup_draft([5, 6, 7, 5, 6, 8, 4, 5, 6], count=2) == [8, 4]  # 5 6 seen at 0 and 3: the latest
    assert lookup_draft([5, 6, 7, 5, 6, 8, 4, 5, 6], count=9) == [8, 4, 5, 6]  # up to the end, never past it
    assert lookup_draft([1, 2, 3, 4, 2], count=3) == []  # a single token is not searched for
    assert lookup_draft([1, 2, 3, 4, 2], count=3, ngrams=(1,)) == [3, 4, 2]
    assert lookup_draft([1, 2], count=3) == [] and lookup_draft([1, 2, 1, 2], count=0) == []


class CopyingReader:
    """A model whose greedy next token is the one that followed the last token's latest earlier
    occurrence (else the last token + 1, modulo 50): ``read`` gives one-hot logits per token
    read; ``crop`` removes the last read tokens, as a cache does."""

    def __init__(self, prompt):
        self.tokens, self.passes = list(prompt), 0

    @staticmethod
    def next_token(tokens):
        earlier = [i for i in range(len(tokens) - 1) if tokens[i] == tokens[-1]]
        return tokens[earlier[-1] + 1] if earlier else (tokens[-1] + 1) % 50

    def first_logits(self):
        return np.eye(50)[self.next_token(self.tokens)]

    def read(self, tokens):
        self.passes += 1
        out = []
        for token in tokens:
            self.tokens.append(token)
            out.append(np.eye(50)[self.next_token(self.tokens)])
        return np.array(out)

    def crop(self, n):
        del self.tokens[-n:]


@pytest.mark.parametrize("stops", [set(), {13}])
def test_lookup_answers_as_plain_greedy_in_fewer_passes(stops):
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 3, 10, 11]
    plain = CopyingReader(prompt)
    expected, plain_passes = greedy_decode(plain.read, plain.first_logits(), history=prompt, stops=stops,
                                           max_new_tokens=12)
    looked = CopyingReader(prompt)
    ids, passes = greedy_decode(looked.read, looked.first_logits(), history=prompt, stops=stops, max_new_tokens=12,
                                lookup_tokens=4, crop=looked.crop)
    assert ids == expected and passes == looked.passes
    if stops:  # the answer ends before 13, drafted or not
        assert expected == [12]
    else:
        assert expected == [12, 13, 14, 15, 16, 17, 18, 19, 20, 3, 10, 11] and plain_passes == 11
        assert passes < plain_passes  # 10 11 then 12 13 ... copied: drafts kept
    # the cache holds exactly the prompt and the answer's tokens read (the last one is never read)
    assert looked.tokens[: len(prompt) + len(ids) - 1] == prompt + ids[:-1]
    assert len(looked.tokens) <= len(prompt) + len(ids)


def test_bad_lookup_is_named():
    reader = CopyingReader([1, 2, 3])
    for bad in (-1, True, 2.5):
        with pytest.raises(InvalidParameterError, match="lookup_tokens must be an int >= 0"):
            greedy_decode(reader.read, reader.first_logits(), history=[1, 2, 3], stops=set(), max_new_tokens=4,
                          lookup_tokens=bad, crop=reader.crop)
    with pytest.raises(InvalidParameterError, match="needs a cache whose rejected tokens can be removed"):
        greedy_decode(reader.read, reader.first_logits(), history=[1, 2, 3], stops=set(), max_new_tokens=4,
                      lookup_tokens=2)


def test_the_tiny_llama_answers_the_same_with_lookup_and_in_fewer_passes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.answer import answer
    from salience.search import BM25
    from tests.models.tiny import tiny_lm

    model, tokenizer = tiny_lm()
    index = BM25().index([{"_id": "a", "text": "cats sleep . dogs bark . cats sleep . dogs bark ."},
                          {"_id": "b", "text": "fish swim . cats swim . fish swim ."}])
    fewer = 0
    for question in ("Which cats sleep ?", "dogs bark ?", "fish swim", "cats"):
        plain = answer(index, question, model=model, tokenizer=tokenizer, max_new_tokens=16, cite=None,
                       lookup_tokens=0)
        looked = answer(index, question, model=model, tokenizer=tokenizer, max_new_tokens=16, cite=None,
                        lookup_tokens=4)
        assert looked.answer == plain.answer and looked.settings["lookup_tokens"] == 4
        assert looked.forward_passes <= plain.forward_passes
        fewer += looked.forward_passes < plain.forward_passes
    assert fewer >= 1  # the tiny model repeats what it read: some drafts are kept


def test_weights_load_in_the_dtype_asked(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.models.lm import load_causal_lm
    from tests.models.tiny import save_tiny_lm

    folder = save_tiny_lm(tmp_path / "tiny-lm")
    model, _ = load_causal_lm(folder, dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in load_causal_lm(folder)[0].parameters()} == {torch.float32}  # as stored
    with pytest.raises(InvalidParameterError, match="dtype must be one of float32, bfloat16, float16"):
        load_causal_lm(folder, dtype="int8")

"""The costly keyphrase judges (samrank, promptrank, mderank), each against an independent
computation on a tiny model built here, and the cascade and bounds they share."""

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.core.base import create
from salience.keywords.judged import phrase_starts, token_words
from salience.keywords.promptrank import PROMPT_HEAD, PROMPT_TAIL
from salience.keywords.words import tokenize_batch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.models.tiny import tiny_lm  # noqa: E402

TEXT = "cats sleep . dogs bark . cats swim . fish swim . dogs sleep"


def _occurrences(tokens, phrase):
    """Where the words of ``phrase`` occur in ``tokens`` (exact words: the tiny vocabulary has no inflections)."""
    words = phrase.split()
    return [i for i in range(len(tokens) - len(words) + 1) if tokens[i : i + len(words)] == words]


def _pool_of(text, **params):
    return create("keywords", "yake", k=20, language="en", **params).score_batch([text])[0]


def test_phrase_starts_match_stems_within_sentences():
    words = tokenize_batch(["Sensor networks sense. A sensor network, networks sensors."], language="en")
    starts, lengths = phrase_starts(words, ["sensor network", "Sensors", "network sensor", "sensor nodes"])
    # "sensor network" (stems) at words 0 and 4; "network sensor" at 6 ("networks sensors"), not
    # at 5 ("network, networks": a comma between); "nodes" is not a word of the text
    assert [s.tolist() for s in starts] == [[0, 4], [0, 4, 7], [6], []]
    assert lengths == [2, 1, 2, 2]


def test_token_words_by_byte_offsets():
    text = "Café au lait"  # a two-byte character before the second word
    words = tokenize_batch([text], language="fr")
    spans = np.array([[0, 4], [4, 5], [5, 7], [8, 12]])  # "Café", " ", "au", "lait"
    assert token_words(words, text, spans).tolist() == [0, -1, 1, 2]


def test_samrank_sums_the_attention_each_phrase_receives():
    model, tokenizer = tiny_lm()
    judge = create("keywords", "samrank", model=model, tokenizer=tokenizer, language="en", k=20, layer=1)
    got = judge.score_candidates(TEXT)
    # by hand: the tokens are the words (and marks); the last layer's attention, mean over heads
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        model.set_attn_implementation("eager")
        attention = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions[1][0].double().mean(0)
        model.set_attn_implementation("sdpa")
    attention[:, 0] = 0  # the sink
    received = attention.sum(0).numpy()
    received /= received.sum()
    tokens = TEXT.split()
    for phrase, value in zip(got.ids, got.values):
        n = len(phrase.split())
        expected = sum(received[i : i + n].sum() for i in _occurrences(tokens, phrase))
        assert value == pytest.approx(expected, rel=1e-9), phrase
    assert set(got.ids) == set(_pool_of(TEXT).ids)
    assert judge.judged_documents_ == 1 and judge.seconds_per_document_ > 0


def test_promptrank_equals_the_likelihood_read_without_a_cache():
    model, tokenizer = tiny_lm()
    judge = create("keywords", "promptrank", model=model, tokenizer=tokenizer, language="en", k=20,
                   position_beta=None, length_alpha=1.0)
    got = judge.score_candidates(TEXT)
    encode = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt = encode(PROMPT_HEAD) + encode(TEXT) + encode(PROMPT_TAIL)
    for phrase, value in zip(got.ids, got.values):
        row = encode(" " + phrase)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + row])).logits[0].double()
        log_probs = torch.log_softmax(logits, dim=-1)
        expected = sum(float(log_probs[len(prompt) - 1 + i, t]) for i, t in enumerate(row)) / len(row)
        assert value == pytest.approx(expected, abs=1e-4), phrase
    # the position penalty: a phrase first met at word w of n scales by (w / n + beta)
    penalised = create("keywords", "promptrank", model=model, tokenizer=tokenizer, language="en", k=20,
                       position_beta=0.5).score_candidates(TEXT)
    plain = dict(zip(got.ids, got.values))
    words = [w for w in TEXT.split() if w != "."]
    for phrase, value in zip(penalised.ids, penalised.values):
        first = _occurrences(words, phrase)[0]
        assert value == pytest.approx(plain[phrase] * (first / len(words) + 0.5), abs=1e-4)


def test_mderank_is_the_embedding_drop_when_masked():
    vocabulary = ["cats", "dogs", "fish", "sleep", "bark", "swim", "[MASK]"]

    def bag_of_words(texts):
        return np.array([[t.split().count(w) for w in vocabulary] for t in texts], dtype=float)

    got = create("keywords", "mderank", encoder=bag_of_words, language="en", k=20).score_candidates(TEXT)
    whole = bag_of_words([TEXT])[0]
    for phrase, value in zip(got.ids, got.values):
        masked = bag_of_words([TEXT.replace(phrase, " ".join(["[MASK]"] * len(phrase.split())))])[0]
        cosine = whole @ masked / np.linalg.norm(whole) / np.linalg.norm(masked)
        assert value == pytest.approx(1 - cosine), phrase
    assert len(got) >= 3


def test_a_context_shorter_than_the_text_is_read_in_windows():
    model, tokenizer = tiny_lm()  # 128 positions
    long_text = " ".join(["cats sleep . dogs bark ."] * 200)  # 1,200 tokens
    samrank = create("keywords", "samrank", model=model, tokenizer=tokenizer, language="en", windows=3)
    assert samrank._window(1) == 127
    assert len(samrank.score(long_text)) > 0
    promptrank = create("keywords", "promptrank", model=model, tokenizer=tokenizer, language="en")
    assert promptrank._window(20) == 108
    assert len(promptrank.score(long_text)) > 0


def test_bad_judge_input():
    model, tokenizer = tiny_lm()
    with pytest.raises(InvalidParameterError, match="tokenizer"):
        create("keywords", "samrank", model=model).score(TEXT)
    with pytest.raises(InvalidParameterError, match="pool_method"):
        create("keywords", "samrank", pool_method="promptrank")
    with pytest.raises(InvalidParameterError, match="layer 5 out of range"):
        create("keywords", "samrank", model=model, tokenizer=tokenizer, layer=5, language="en").score(TEXT)
    # a text shorter than one candidate: nothing to judge, no model call
    judge = create("keywords", "promptrank", model=model, tokenizer=tokenizer, language="en")
    assert len(judge.score("the")) == 0

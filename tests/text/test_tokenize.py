import pickle
import random

import pytest

from salience import InvalidParameterError
from salience.text import TermEncoder, Tokenizer, get_stopwords


def test_defaults_lowercase_stopwords_stem():
    assert Tokenizer().tokenize("The Cats were RUNNING, and the dogs ran.") == ["cat", "were", "run", "dog", "ran"]


def test_configurable():
    t = Tokenizer(lower=False, stopwords=None, stemmer=None)
    assert t.tokenize("The Cats") == ["The", "Cats"]
    t = Tokenizer(stopwords=["cats"], stemmer=None)
    assert t.tokenize("the cats") == ["the"]
    t = Tokenizer(stemmer=str.upper, stopwords=None)
    assert t.tokenize("ab cd") == ["AB", "CD"]
    t = Tokenizer(pattern=r"\S+", stopwords=None, stemmer=None)
    assert t.tokenize("a-b c") == ["a-b", "c"]


def test_unicode_normalisation():
    t = Tokenizer(stopwords=None, stemmer=None)
    assert t.tokenize("ﬁne Ｆｕｌｌｗｉｄｔｈ café") == ["fine", "fullwidth", "café"]
    assert Tokenizer(normalize=None, stopwords=None, stemmer=None).tokenize("ﬁne") == ["ﬁne"]


def test_bad_config():
    with pytest.raises(InvalidParameterError, match="stopword list"):
        Tokenizer(stopwords="klingon")
    with pytest.raises(InvalidParameterError, match="stemmer language"):
        Tokenizer(stemmer="klingon")
    with pytest.raises(InvalidParameterError, match="regular expression"):
        Tokenizer(pattern="(")
    with pytest.raises(InvalidParameterError, match="must be a str"):
        Tokenizer().tokenize(b"bytes")
    assert "the" in get_stopwords("en")


ALPHABET = list("abcXYZ019_ -.,;\n\t") + ["é", "ß", "İ", "ﬁ", "β", "日", "本", "–", "±", "\u0301", "²", "Ω", "ǅ", "½", "𝔘"]


def test_vectorised_encoder_equals_reference_tokenizer():
    """The byte-level batch path must give exactly the tokens of the regex path."""
    rng = random.Random(0)
    tokenizer = Tokenizer(stopwords=None, stemmer=None)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    texts += ["", " ", "ab", "a b", "x" * 40, "é" * 9, "aé", "ée"]
    encoder = TermEncoder(tokenizer)
    ids, docs = encoder.encode_batch(texts, chunk_size=700)
    got = [[] for _ in texts]
    for i, d in zip(ids.tolist(), docs.tolist()):
        got[d].append(encoder.terms[i])
    assert got == tokenizer.tokenize_batch(texts)


def test_encoder_with_stemming_matches_tokenize_batch():
    rng = random.Random(1)
    words = ["running", "runs", "the", "Cats", "café", "naïve", "studies", "a", "of", "β-cells", "x2"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(500)]
    tokenizer = Tokenizer()
    encoder = TermEncoder(tokenizer)
    ids, docs = encoder.encode_batch(texts)
    got = [[] for _ in texts]
    for i, d in zip(ids.tolist(), docs.tolist()):
        got[d].append(encoder.terms[i])
    assert got == tokenizer.tokenize_batch(texts)
    # queries use the per-text path and the same cache
    assert [encoder.terms[i] for i in encoder.encode(texts[3])] == tokenizer.tokenize(texts[3])


def test_named_token_rules_share_one_byte_table():
    import random
    import re

    import numpy as np

    from salience.text.byte_tokens import BYTE_CLASS, TOKEN_RULES, joined_word_tokens, wordpunct_spans

    rng = random.Random(5)
    alphabet = "ab Z9_-'.,;!?()\n\t\"é€ ’中文のカ。"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    ascii_texts = [t.encode("ascii", "ignore").decode() for t in texts]
    # wordpunct (ASCII: every non-ASCII character counts as a word character by design)
    for text in ascii_texts:
        data = np.frombuffer(text.encode(), dtype=np.uint8)
        starts, ends = wordpunct_spans(data)
        assert [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())] == re.findall(TOKEN_RULES["wordpunct"], text)
    # joined words, on every text
    data, starts, lengths, is_word, counts = joined_word_tokens(texts)
    raw = data.tobytes()
    tokens = [raw[a : a + n].decode() for a, n in zip(starts.tolist(), lengths.tolist())]
    expected = [t for text in texts for t in re.findall(TOKEN_RULES["joined_words"], text)]
    assert tokens == expected and counts.sum() == len(expected)
    from salience.text.byte_tokens import JOINED_WORD

    words = [t for text in texts for t in re.findall(JOINED_WORD, text)]
    assert words == [t for t, w in zip(tokens, is_word.tolist()) if w]  # the rule's words, marks left out
    # the search tokenizer's table keeps exactly the word bytes
    from salience.text.byte_tokens import _TABLE_KEEP

    assert [b for b in range(256) if _TABLE_KEEP[b] != 32] == np.flatnonzero(BYTE_CLASS == 1).tolist()


def test_ascii_joined_words_equal_the_regex():
    import random
    import re

    from salience.text.byte_tokens import JOINED_WORD, ascii_joined_words

    rng = random.Random(11)
    alphabet = "ab Z9_-'.,;!?()\n\t\"£“—"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        expected = [w.lower().encode() for w in re.findall(JOINED_WORD, text)]
        assert ascii_joined_words(text) == expected, text
    # the joiners and words only the regex reads
    assert ascii_joined_words("don’t") is None and ascii_joined_words("café") is None
    assert ascii_joined_words("中文") is None
    assert ascii_joined_words("--a--b-c 'd' e'' -") == [b"a", b"b-c", b"d", b"e"]


def test_each_thread_stems_with_its_own_stemmer():
    import threading

    from salience.text.stemmers import thread_stemmer

    seen = {}

    def grab(name):
        seen[name] = thread_stemmer("english")

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    owners = {id(getattr(stem, "__self__", stem)) for stem in seen.values()}
    assert len(owners) == 3  # no PyStemmer object shared between threads
    assert thread_stemmer("english") is thread_stemmer("english")  # and one per thread, reused
    assert seen[0]("running") == "run"


def test_spans_point_at_the_words_of_each_term_and_filter_by_term(monkeypatch):
    import salience.text.tokenize as tokenize_module

    text = "Running cats: the CAT ran, Café runners run. Zoë"
    tokenizer = Tokenizer()
    spans = tokenizer.spans(text)
    assert [term for _, _, term in spans] == tokenizer.tokenize(text)
    assert [text[a:b] for a, b, term in spans if term == "cat"] == ["cats", "CAT"]
    assert tokenizer.spans(text, {"run", "zoë"}) == [s for s in spans if s[2] in {"run", "zoë"}]
    assert tokenizer.spans(text, set()) == []
    assert tokenizer._span_memo[text][3] == ["run", "cat", "ran", "café", "runner", "zoë"]  # remembered per text
    # both memos are bounded (words, and spans of texts), answers unchanged
    monkeypatch.setattr(tokenize_module, "_MEMO_SIZE", 3)
    monkeypatch.setattr(tokenize_module, "_SPAN_MEMO_SPANS", 10)
    for other in ("cats run", "a dog ran", text, "cats run"):
        assert tokenizer.spans(other) == Tokenizer().spans(other)
        assert len(tokenizer._memo) <= 3 + len(set(other.split())) + 2 and tokenizer._span_memo_spans <= 10
    assert tokenizer.spans(text) == spans and tokenizer.spans(text, {"run", "zoë"}) == [s for s in spans if s[2] in {"run", "zoë"}]
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert Tokenizer().spans("the of and") == [] and copy._memo == {} and copy._span_memo == {}


def test_non_ascii_patterns_match_their_plain_forms_on_every_code_point():
    """The byte tokenizers' non-ASCII patterns open with a class the regex engine scans fast and
    look back for the rest; they must match exactly what the plain classes match."""
    import re

    from salience.text.byte_tokens import _NON_ASCII_NONWORD, _NON_ASCII_SPECIAL, IDEOGRAPHS

    every = "".join(chr(c) for c in range(0x80, 0x30000) if not 0xD800 <= c < 0xE000) + " a-b ’ x\n"
    for fast, plain in ((_NON_ASCII_NONWORD, r"[^\w\x00-\x7f]"), (_NON_ASCII_SPECIAL, rf"[^\w\x00-\x7f]|[{IDEOGRAPHS}]")):
        expected = [(m.start(), m[0]) for m in re.finditer(plain, every)]
        assert [(m.start(), m[0]) for m in fast.finditer(every)] == expected and len(expected) > 5000

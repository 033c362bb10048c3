"""Byte-level tokens: texts joined as UTF-8 bytes and split with translation tables and array
operations (words, word runs with joiners, punctuation spans, ideographs as single tokens),
the fast path under :class:`~salience.text.tokenize.Tokenizer`, YAKE's batches and the hashed
n-gram features."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from salience.text.hashing import compiled_grouping, group_rows, group_spans, stable_argsort
from salience.text.sentences import mark_positions

# ----------------------------------------------------------------------------------------------
# One byte-class table and the token rules built on it. Every byte of a non-ASCII character
# counts as a word byte, unless a rule reclassifies the non-word characters with a regex
# (:func:`byte_classes`); ASCII bytes are a word byte ([A-Za-z0-9_]), a space (str.isspace), a
# joiner ('-' and "'", which some rules let join two words) or a mark (anything else).
SPACE, WORD, MARK, JOIN = 0, 1, 2, 3
BYTE_CLASS = np.full(256, MARK, dtype=np.uint8)
BYTE_CLASS[[ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"]] = WORD
BYTE_CLASS[[c for c in range(128) if chr(c).isspace()]] = SPACE
BYTE_CLASS[[ord("-"), ord("'")]] = JOIN
BYTE_CLASS[0x80:] = WORD
# the class tables as bytes: ``bytes.translate`` maps bytes ~5x faster than a numpy gather
_BYTE_CLASS_TABLE = BYTE_CLASS.tobytes()
_WORDPUNCT_CLASS_TABLE = np.minimum(BYTE_CLASS, MARK).tobytes()  # the wordpunct rule: joiners are marks

#: Han ideographs (unified, extension A, compatibility) and Japanese kana: a token each, since
#: these scripts are written without spaces between words. Character tokens (whose n-grams make
#: the keyphrase candidates) stand in for a dictionary segmenter such as jieba or MeCab.
IDEOGRAPHS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"

#: the token rules, by name, as the regular expressions the array code is tested equal to
TOKEN_RULES = {
    "words": r"\w+",  # the search tokenizer's raw tokens (its pattern keeps those of two or more characters)
    # keyphrase tokens: words with inner joiners, single marks, and each ideograph or kana on its own
    # (Chinese and Japanese put no spaces between words: see IDEOGRAPHS)
    "joined_words": rf"[{IDEOGRAPHS}]|[^\W{IDEOGRAPHS}]+(?:[-'’][^\W{IDEOGRAPHS}]+)*|[^\w\s]",
    "wordpunct": r"\w+|[^\w\s]+",  # hashed n-gram features: nltk's WordPunctTokenizer (non-ASCII counts as \w)
}

#: the word tokens of the ``joined_words`` rule, its single marks left out (words before ideographs:
#: the same matches, as they start differently, and faster with ``re``)
JOINED_WORD = rf"[^\W{IDEOGRAPHS}]+(?:[-'’][^\W{IDEOGRAPHS}]+)*|[{IDEOGRAPHS}]"

# Non-ASCII non-word characters, and (_SPECIAL) ideographs: each pattern opens with the plain
# class of non-ASCII characters, which the regex engine scans for quickly, and checks the rest
# looking back (the same matches as [^\w\x00-\x7f] and [^\w\x00-\x7f]|[IDEOGRAPHS], tested
# on every code point; 3-7x faster on mostly ASCII text)
_NON_ASCII_NONWORD = re.compile(r"[^\x00-\x7f](?<=\W)")
_NON_ASCII_SPECIAL = re.compile(rf"[^\x00-\x7f](?<=[^\w\x00-\x7f]|[{IDEOGRAPHS}])")  # byte_classes reclassifies these


def _ascii_table(lower: bool, kept: tuple[int, ...] = (WORD,)) -> bytes:
    """``bytes.translate`` table of the "words" rule: word bytes kept (and optionally
    lower-cased), every other ASCII byte a space, so ``bytes.split()`` yields the word runs.
    Bytes >= 0x80 are kept: in UTF-8 text whose non-word characters were blanked first (see
    ``_NON_ASCII_NONWORD``) they belong to word characters. ``kept``: the byte classes kept
    (the joined words keep the joiners too)."""
    table = bytearray(b" " * 256)
    for c in np.flatnonzero(np.isin(BYTE_CLASS, kept)).tolist():
        table[c] = ord(chr(c).lower()) if (lower and c < 128) else c
    return bytes(table)


_TABLE_LOWER = _ascii_table(True)
# _BYTE_MASKS[i] keeps the low i bytes of a little-endian uint64 (the first i bytes of a token).
_BYTE_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_TABLE_KEEP = _ascii_table(False)
_CONTINUATION = 4  # a later byte of a multi-byte mark or joiner (only in byte_classes' output)
IDEOGRAPH = 5  # the lead byte of an ideograph or kana (only in byte_classes' output)
_IDEOGRAPH_CHAR = re.compile(f"[{IDEOGRAPHS}]")


def byte_classes(texts: Sequence[str], raw: bytes, data: np.ndarray) -> np.ndarray:
    """The class of each byte of ``data`` (``raw``: the texts as UTF-8, joined by newlines),
    with non-ASCII whitespace, marks, ideographs and the joiner ’ found by a regex and
    reclassified; the other bytes of such a character are spaces (after a space) or continuations."""
    classes = np.frombuffer(raw.translate(_BYTE_CLASS_TABLE), dtype=np.uint8)
    if raw.isascii():
        return classes
    classes = classes.copy()  # writable: some bytes are classed again below
    special = [(m.start(), m[0]) for m in _NON_ASCII_SPECIAL.finditer("\n".join(texts))]
    if special:
        char_start = np.flatnonzero((data & 0xC0) != 0x80)  # UTF-8 lead bytes
        chars = np.fromiter((c for c, _ in special), dtype=np.int64, count=len(special))
        lead = char_start[chars]
        size = np.append(char_start, len(data))[chars + 1] - lead
        kind = np.array([SPACE if ch.isspace() else JOIN if ch == "’" else IDEOGRAPH if _IDEOGRAPH_CHAR.match(ch) else MARK
                         for _, ch in special], dtype=np.uint8)
        classes[lead] = kind
        for extra in range(1, 4):  # a mark's or joiner's other bytes continue it; a space's are spaces
            more = size > extra
            classes[lead[more] + extra] = np.where(kind[more] == SPACE, SPACE, _CONTINUATION)
    return classes


# ASCII word bytes lower-cased and the joiners kept; every other ASCII byte a space
_JOINED_TABLE = _ascii_table(True, (WORD, JOIN))
_JOINERS = b"-'"


def ascii_joined_words(text: str) -> list[bytes] | None:
    """The tokens of :data:`JOINED_WORD` in ``text``, lower-cased, as ASCII bytes, found with a
    translation table and ``bytes.split`` (equal to the regex, tested; a few times faster on a
    single text). ``None`` when ``text`` has a non-ASCII word character or the joiner ’, which
    only the regex reads; other non-ASCII characters (£, “, —) separate words as spaces do."""
    if not text.isascii():
        if "’" in text:
            return None
        text = _NON_ASCII_NONWORD.sub(" ", text)
        if not text.isascii():
            return None
    data = text.encode("ascii").translate(_JOINED_TABLE)
    if b"-" in data or b"'" in data:
        data = _blank_loose_joiners(data)
    return data.split()


def _blank_loose_joiners(data: bytes) -> bytes:
    """``data`` (translated by ``_JOINED_TABLE``) with every joiner that does not join blanked:
    a joiner joins only as a run of one with word bytes on both sides. The runs are walked from
    the joiners ``find`` locates (a regex over every byte, even one finding only the runs, costs
    several times more)."""
    padded = bytearray(b" " + data + b" ")
    joiners = mark_positions(padded, _JOINERS)
    i = 0
    while i < len(joiners):
        start = end = joiners[i]
        i += 1
        while i < len(joiners) and joiners[i] == end + 1:  # the rest of the run
            end = joiners[i]
            i += 1
        end += 1
        if end - start > 1 or padded[start - 1] == 32 or padded[end] == 32:
            padded[start:end] = b" " * (end - start)
    return bytes(padded)


def joined_word_tokens(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tokens of the ``joined_words`` rule, found with array operations over the texts' UTF-8
    bytes (equal to the regex, tested): (data, token start, token length in bytes, token is a
    word, tokens per text). Words are runs of word bytes, a joiner (-, ' or ’) between two word
    bytes joining them, or single ideographs; every other character that is not a space is a
    token of its own."""
    raw, text_starts = join_utf8([t.encode("utf-8", "surrogatepass") for t in texts])
    data = np.frombuffer(raw, dtype=np.uint8)
    n = len(data)
    classes = byte_classes(texts, raw, data)
    word = np.zeros(n + 2, dtype=bool)  # padded by one byte on each side
    word[1:-1] = classes == WORD
    joins = np.flatnonzero(classes == JOIN)
    if len(joins):
        size = np.ones(len(joins), dtype=np.int64)
        wide = data[joins] >= 0x80  # ’, three bytes
        size[wide] = 3
        joining = joins[word[joins] & word[joins + size + 1]]  # word bytes on both sides (padded indexes)
        wide_joining = joining[data[joining] >= 0x80]
        word[joining + 1] = True
        word[wide_joining + 2] = True
        word[wide_joining + 3] = True
    word_start = np.flatnonzero(word[1:-1] & ~word[:-2])
    word_end = np.flatnonzero(word[1:-1] & ~word[2:]) + 1
    lead = ((classes == MARK) | (classes == JOIN) | (classes == IDEOGRAPH)) & ~word[1:-1]
    mark_start = np.flatnonzero(lead)
    mark_size = np.ones(len(mark_start), dtype=np.int64)
    byte = data[mark_start]
    mark_size[byte >= 0xC0] = 2
    mark_size[byte >= 0xE0] = 3
    mark_size[byte >= 0xF0] = 4
    starts = np.concatenate((word_start, mark_start))
    lengths = np.concatenate((word_end - word_start, mark_size))
    is_word = np.zeros(len(starts), dtype=bool)
    is_word[: len(word_start)] = True
    is_word[len(word_start):] = classes[mark_start] == IDEOGRAPH  # an ideograph is a word of its own
    order = stable_argsort(starts, n)
    starts, lengths, is_word = starts[order], lengths[order], is_word[order]
    return data, starts, lengths, is_word, tokens_per_text(starts, text_starts)


def wordpunct_spans(data: np.ndarray, *, punctuation: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the ``wordpunct`` rule's tokens in ``data``: maximal runs of word bytes
    or of mark bytes (joiners count as marks; every non-ASCII byte as a word byte);
    ``punctuation=False`` keeps the word runs only."""
    n = len(data)
    cls = np.frombuffer(data.tobytes().translate(_WORDPUNCT_CLASS_TABLE), dtype=np.uint8)
    word = cls != SPACE if punctuation else cls == WORD
    change = np.empty(n + 1, dtype=bool)
    change[0] = change[-1] = True
    np.not_equal(cls[1:], cls[:-1], out=change[1:-1])
    return np.flatnonzero(change[:-1] & word), np.flatnonzero(change[1:] & word) + 1


def padded_byte_words(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first 16 bytes of each token ``data[starts[i] : starts[i] + lengths[i]]`` as two
    little-endian uint64 words, zero-padded past the token's end: for tokens of up to 16 bytes
    an exact key with no Python object per token. Reads through an unaligned, overlapping view."""
    padded = np.concatenate((data, np.zeros(16, dtype=np.uint8)))
    as_words = np.ndarray(shape=(len(data) + 9,), dtype="<u8", buffer=padded, strides=(1,))
    w0 = np.take(as_words, starts)  # np.take: faster than fancy indexing on this view
    w0 &= np.take(_BYTE_MASKS, np.minimum(lengths, 8))
    w1 = np.zeros(len(starts), dtype=np.uint64)
    longer = np.flatnonzero(lengths > 8)  # most tokens fit the first word
    w1[longer] = np.take(as_words, starts[longer] + 8) & np.take(_BYTE_MASKS, np.minimum(lengths[longer] - 8, 8))
    return w0, w1


def join_utf8(encoded: Sequence[bytes]) -> tuple[bytes, np.ndarray]:
    """The encoded texts joined by newlines, and the byte offset where each text starts."""
    text_starts = np.zeros(len(encoded), dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))[:-1] + 1, out=text_starts[1:])
    return b"\n".join(encoded), text_starts


def tokens_per_text(starts: np.ndarray, text_starts: np.ndarray) -> np.ndarray:
    """How many of the (sorted) token ``starts`` fall in each text of :func:`join_utf8`."""
    return np.diff(np.append(np.searchsorted(starts, text_starts), len(starts)))


def byte_token_ids(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number the tokens ``data[starts[i] : starts[i] + lengths[i]]`` exactly, by first
    appearance: (id of each token, index of each id's first token). Tokens of up to 16 bytes
    are keyed by :func:`padded_byte_words` and their length, with no Python object per token;
    longer ones (rare) by their bytes; where numba is installed, a large batch's tokens are
    grouped by their bytes in one pass (:func:`~salience.text.hashing.group_spans`)."""
    if compiled_grouping(len(starts)) is not None:
        return group_spans(data, starts, lengths)
    w0, w1 = padded_byte_words(data, starts, lengths)
    long_tokens = np.flatnonzero(lengths > 16)
    if len(long_tokens):
        numbers: dict[bytes, int] = {}
        for i, (start, length) in zip(long_tokens.tolist(), zip(starts[long_tokens].tolist(), lengths[long_tokens].tolist())):
            w0[i] = numbers.setdefault(data[start : start + length].tobytes(), len(numbers))
        w1[long_tokens] = np.uint64(2**64 - 1)  # no short token has these words with a length over 16
    return group_rows([w0, w1, lengths])


def byte_strings(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, separator: np.ndarray | None = None) -> str:
    """The byte ranges ``data[starts[i] : starts[i] + lengths[i]]`` decoded as one string, each
    followed by its ``separator`` byte (a newline by default): one gather and one decode
    instead of a Python object per range."""
    sizes = lengths + 1
    end = np.cumsum(sizes)
    index = np.arange(int(end[-1]) if len(end) else 0) + np.repeat(starts - (end - sizes), sizes)
    out = np.append(data, np.uint8(10))[index]
    out[end - 1] = 10 if separator is None else separator
    return out.tobytes().decode("utf-8", "surrogatepass")

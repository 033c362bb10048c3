"""A configurable, fast tokenizer: Unicode normalisation, lower-casing, a word pattern,
stop words and Snowball stemming (PyStemmer).

Speed comes from two things: pure-ASCII text (most corpora) is split with a byte translation
table instead of a regular expression, giving exactly the tokens of the default pattern
``\\w\\w+``; and every distinct raw token is normalised, filtered and stemmed once, then
looked up in a cache (see :class:`TermEncoder`).
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain, compress, repeat
from typing import Any, Callable, Collection, Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.core.params import Check, Options, check_params
from salience.text.byte_tokens import _NON_ASCII_NONWORD, _TABLE_KEEP, _TABLE_LOWER, byte_token_ids, join_utf8, tokens_per_text
from salience.text.languages import get_stopwords
from salience.text.stemmers import load_stemmer, stem_words

__all__ = ["Tokenizer", "TermEncoder", "DEFAULT_PATTERN"]

DEFAULT_PATTERN = r"\w\w+"
_NORMAL_FORMS = ("NFC", "NFKC", "NFD", "NFKD")

def _is_word_collection(value) -> bool:
    return isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(w, str) for w in value)


class Tokenizer:
    """Turn text into index terms.

    Parameters
    ----------
    lower : bool
        Lower-case before splitting.
    normalize : {"NFKC", "NFC", "NFD", "NFKD"} or None
        Unicode normal form applied to non-ASCII text (ASCII is already normal).
    pattern : str
        Regular expression whose matches are the raw tokens (default ``\\w\\w+``: runs of two
        or more word characters, as in scikit-learn and bm25s).
    stopwords : str, iterable of str, or None
        A language name (``"en"``), your own words, or ``None``. Matched before stemming.
    stemmer : str, callable or None
        A Snowball language (``"english"``), a function ``str -> str``, or ``None``.

    Examples
    --------
    >>> Tokenizer().tokenize("The cats were running quickly!")
    ['cat', 'were', 'run', 'quick']
    >>> Tokenizer(stemmer=None, stopwords=None).tokenize("Café au lait")
    ['café', 'au', 'lait']
    """

    _parameter_constraints = {"lower": [bool], "normalize": [None, Options(_NORMAL_FORMS)], "pattern": [str],
                              "stopwords": [None, str, Check(_is_word_collection, "an iterable of words")],
                              "stemmer": [None, str, callable]}

    def __init__(
        self,
        *,
        lower: bool = True,
        normalize: str | None = "NFKC",
        pattern: str = DEFAULT_PATTERN,
        stopwords: str | Iterable[str] | None = "en",
        stemmer: str | Callable[[str], str] | None = "english",
    ):
        check_params("Tokenizer", {"lower": lower, "normalize": normalize, "pattern": pattern, "stopwords": stopwords,
                                   "stemmer": stemmer}, self._parameter_constraints)
        try:
            self._regex = re.compile(pattern)
        except (re.error, TypeError) as err:
            raise InvalidParameterError(f"pattern {pattern!r} is not a valid regular expression: {err}") from None
        self.lower = bool(lower)
        self.normalize = normalize
        self.pattern = pattern
        self.stopwords = stopwords if (stopwords is None or isinstance(stopwords, str)) else sorted(set(stopwords))
        self.stemmer = stemmer
        self._stopset = get_stopwords(stopwords)
        self._stem = load_stemmer(stemmer)
        self._ascii_fast = pattern == DEFAULT_PATTERN
        self._table = _TABLE_LOWER if self.lower else _TABLE_KEEP
        self._memo: dict[str, str | None] = {}  # raw word -> term, for spans (bounded)
        self._span_memo: dict[str, tuple] = {}  # text -> its spans, compact (bounded by _SPAN_MEMO_SPANS)
        self._span_memo_spans = 0

    # configuration round-trip (for saved indexes) --------------------------------------------
    def get_config(self) -> dict[str, Any]:
        if self.stemmer is not None and not isinstance(self.stemmer, str):
            raise InvalidParameterError("a tokenizer with a custom stemmer function cannot be saved; use a Snowball language name.")
        return {
            "lower": self.lower,
            "normalize": self.normalize,
            "pattern": self.pattern,
            "stopwords": self.stopwords,
            "stemmer": self.stemmer,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Tokenizer":
        return cls(**config)

    def __getstate__(self) -> dict:
        # PyStemmer objects do not pickle: a named stemmer is loaded again on unpickling
        state = dict(self.__dict__, _memo={}, _span_memo={}, _span_memo_spans=0)
        if isinstance(self.stemmer, str):
            state["_stem"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_memo", {})
        self.__dict__.setdefault("_span_memo", {})
        self.__dict__.setdefault("_span_memo_spans", 0)
        if self._stem is None and isinstance(self.stemmer, str):
            self._stem = load_stemmer(self.stemmer)

    def _key(self) -> tuple:
        stopwords = tuple(self.stopwords) if isinstance(self.stopwords, list) else self.stopwords
        return (self.lower, self.normalize, self.pattern, stopwords, self.stemmer)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tokenizer):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Tokenizer(" + ", ".join(f"{k}={v!r}" for k, v in zip(
            ("lower", "normalize", "pattern", "stopwords", "stemmer"), self._key())) + ")"

    # splitting -----------------------------------------------------------------------------
    def split(self, text: str) -> list:
        """Raw tokens (before stop words and stemming). ASCII input yields ``bytes`` tokens."""
        if self._ascii_fast and text.isascii():
            return text.encode("ascii").translate(self._table).split()
        if self.normalize is not None and not text.isascii():
            text = unicodedata.normalize(self.normalize, text)
        if self.lower:
            text = text.lower()
        return self._regex.findall(text)

    def term(self, raw: str | bytes) -> str | None:
        """Normalise one raw token to its index term, or ``None`` if it is dropped."""
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
            if len(raw) < 2:  # the byte path also yields one-character runs; \w\w+ does not
                return None
        if raw in self._stopset:
            return None
        return self._stem(raw) if self._stem is not None else raw

    def spans(self, text: str, terms: Collection[str] | None = None) -> list[tuple[int, int, str]]:
        """``(start, end, term)`` for each token of ``text`` that becomes an index term (only
        those whose term is in ``terms`` when given), with character offsets into ``text`` as
        given (for highlighting). Tokens are matched on the text as given and each normalised
        alone, so a Unicode normal form that merges or splits words (rare) can differ from
        :meth:`tokenize`.

        >>> Tokenizer().spans("The cats ran")
        [(4, 8, 'cat'), (9, 12, 'ran')]
        >>> Tokenizer().spans("The cats ran", terms={"cat"})
        [(4, 8, 'cat')]
        """
        _check_text(text)
        starts, ends, codes, names, code_of = self._all_spans(text)
        if terms is not None:
            wanted = np.zeros(len(names), dtype=bool)
            wanted[[code_of[term] for term in terms if term in code_of]] = True
            keep = np.flatnonzero(wanted[codes])
            starts, ends, codes = starts[keep], ends[keep], codes[keep]
        return [(start, end, names[code]) for start, end, code in zip(starts.tolist(), ends.tolist(), codes.tolist())]

    def _all_spans(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], dict[str, int]]:
        """Every span of ``text`` as (starts, ends, codes, names, code_of): the term of span i
        is ``names[codes[i]]``, and ``code_of`` maps a term to its code. Remembered per text, as a service highlights the same documents
        again and again (a bounded memo: cleared when it holds _SPAN_MEMO_SPANS spans)."""
        cached = self._span_memo.get(text)
        if cached is not None:
            return cached
        memo = self._memo  # raw word -> term: stemming is most of the cost, and texts repeat words
        if len(memo) > _MEMO_SIZE:  # a service highlights documents for ever: keep the memo bounded
            memo.clear()
        matches = list(self._regex.finditer(text))
        raws = [match.group() for match in matches]
        for raw in set(raws).difference(memo):
            word = unicodedata.normalize(self.normalize, raw) if self.normalize is not None and not raw.isascii() else raw
            memo[raw] = self.term(word.lower() if self.lower else word)
        kept = [(match, term) for match, raw in zip(matches, raws) if (term := memo[raw]) is not None]
        code_of: dict[str, int] = {}
        codes = np.fromiter((code_of.setdefault(term, len(code_of)) for _, term in kept), dtype=np.int32, count=len(kept))
        starts = np.fromiter((match.start() for match, _ in kept), dtype=np.int64, count=len(kept))
        ends = np.fromiter((match.end() for match, _ in kept), dtype=np.int64, count=len(kept))
        entry = (starts, ends, codes, list(code_of), code_of)
        if self._span_memo_spans + len(kept) > _SPAN_MEMO_SPANS:
            self._span_memo, self._span_memo_spans = {}, 0
        self._span_memo[text] = entry
        self._span_memo_spans += len(kept)
        return entry

    def stem_batch(self, words: list[str]) -> list[str]:
        """Stem a list of words (batched when the stemmer is PyStemmer)."""
        return stem_words(self._stem, words)

    def tokenize(self, text: str) -> list[str]:
        """Index terms of one text."""
        _check_text(text)
        terms = (self.term(t) for t in self.split(text))
        return [t for t in terms if t is not None]

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """Index terms of many texts (cached: each distinct raw token is processed once)."""
        cache: dict = {}
        out = []
        for text in texts:
            _check_text(text)
            doc = []
            for raw in self.split(text):
                try:
                    term = cache[raw]
                except KeyError:
                    term = cache[raw] = self.term(raw)
                if term is not None:
                    doc.append(term)
            out.append(doc)
        return out


#: raw words whose terms :meth:`Tokenizer.spans` remembers
_MEMO_SIZE = 1 << 17
_SPAN_MEMO_SPANS = 1 << 20  # about 20 bytes a span: some 20 MB, SciFact's 5,183 abstracts whole


def _check_text(text: object, where: str = "text") -> None:
    if not isinstance(text, str):
        raise InvalidParameterError(f"{where} must be a str; got {type(text).__name__}.")


class TermEncoder:
    """Maps texts to integer term ids of a growing vocabulary, caching raw token -> id.

    ``-1`` marks a dropped token (stop word, too short). Unknown terms get new ids when
    ``grow=True`` and are dropped otherwise.
    """

    def __init__(self, tokenizer: Tokenizer, terms: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.terms: list[str] = list(terms)
        self.vocab: dict[str, int] = {t: i for i, t in enumerate(self.terms)}
        self._cache: dict = {}

    def _resolve(self, raw, grow: bool) -> int:
        term = self.tokenizer.term(raw)
        if term is None:
            self._cache[raw] = -1
            return -1
        tid = self.vocab.get(term)
        if tid is None:
            if not grow:
                return -1  # not cached: the vocabulary may grow later
            tid = self.add_term(term)
        self._cache[raw] = tid
        return tid

    def add_term(self, term: str) -> int:
        """The id of an already-normalised term, added to the vocabulary when new."""
        tid = self.vocab.get(term)
        if tid is None:
            tid = self.vocab[term] = len(self.terms)
            self.terms.append(term)
        return tid

    def copy(self) -> "TermEncoder":
        """An independent copy (the vocabulary and cache copied; the tokenizer shared)."""
        clone = TermEncoder(self.tokenizer)
        clone.terms, clone.vocab, clone._cache = list(self.terms), dict(self.vocab), dict(self._cache)
        return clone

    @property
    def cached_tokens(self) -> int:
        """How many distinct raw tokens the cache holds (owners bound it by starting afresh)."""
        return len(self._cache)

    def encode(self, text: str, grow: bool = False) -> list[int]:
        cache = self._cache
        ids = []
        for raw in self.tokenizer.split(text):
            tid = cache.get(raw)
            if tid is None:
                tid = self._resolve(raw, grow)
            if tid >= 0:
                ids.append(tid)
        return ids

    def encode_batch(
        self, texts: Iterable[str], grow: bool = True, progress=None, chunk_size: int = 1_000
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode many texts into term ids.

        Returns ``(ids, text_index)``: the kept term ids (int32) of every text and, aligned with
        them, the position of the text each came from (int64). Texts are handled a chunk at a
        time; with the default pattern texts take a vectorised path (:meth:`_encode_bytes`); others are split
        with the tokenizer's pattern and looked up through the raw-token cache.
        """
        id_parts: list[np.ndarray] = []
        doc_parts: list[np.ndarray] = []
        chunk: list[str] = []
        base = 0
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text at position {position} must be a str; got {type(text).__name__}.")
            chunk.append(text)
            if len(chunk) >= chunk_size:
                self._encode_chunk(chunk, base, grow, id_parts, doc_parts)
                base += len(chunk)
                if progress is not None:
                    progress.update(len(chunk))
                chunk = []
        if chunk:
            self._encode_chunk(chunk, base, grow, id_parts, doc_parts)
            if progress is not None:
                progress.update(len(chunk))
        if not id_parts:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        return np.concatenate(id_parts), np.concatenate(doc_parts)

    def _encode_chunk(self, texts: list[str], base: int, grow: bool, id_parts: list, doc_parts: list) -> None:
        # the vectorised path pays a fixed cost of some thirty numpy calls: small inputs go by token
        if self.tokenizer._ascii_fast and sum(map(len, texts)) > 20_000:
            ids, docs = self._encode_bytes(texts, grow)
        else:
            ids, docs = self.encode_tokens([self.tokenizer.split(t) for t in texts], grow)
        id_parts.append(ids)
        doc_parts.append(docs + base)

    def _lookup(self, tokens: list, grow: bool) -> np.ndarray:
        """Term ids (-1 = dropped) of raw tokens, resolving unseen ones (each distinct one once)."""
        cache = self._cache
        codes = np.fromiter(map(cache.get, tokens, repeat(-2)), dtype=np.int32, count=len(tokens))
        unseen = codes == -2
        if unseen.any():
            flags = unseen.tolist()
            self._resolve_batch(dict.fromkeys(compress(tokens, flags)), grow)
            codes[unseen] = np.fromiter(
                map(cache.get, compress(tokens, flags), repeat(-1)), dtype=np.int32, count=int(unseen.sum())
            )
        return codes

    def encode_tokens(self, docs: list[list], grow: bool) -> tuple[np.ndarray, np.ndarray]:
        raw_lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        tokens = list(chain.from_iterable(docs))
        ids = self._lookup(tokens, grow)
        kept = ids >= 0
        return ids[kept], np.repeat(np.arange(len(docs)), raw_lengths)[kept]

    def _encode_bytes(self, texts: list[str], grow: bool) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised tokenizing, exact for the pattern ``\\w\\w+``.

        Non-ASCII texts are normalised and lower-cased as :meth:`Tokenizer.split` does, and
        their non-word characters blanked. All texts are then joined as UTF-8, mapped through
        the byte table (ASCII word bytes kept and lower-cased, other ASCII a space) and token
        boundaries found with numpy. Tokens are numbered with :func:`byte_token_ids`; only
        distinct tokens become Python objects.
        """
        tokenizer = self.tokenizer
        joined, text_starts = join_utf8([t.encode("ascii") if t.isascii() else self._prepare_non_ascii(t) for t in texts])
        joined = joined.translate(tokenizer._table)
        data = np.frombuffer(joined, dtype=np.uint8)
        is_word = np.zeros(len(data) + 2, dtype=bool)
        is_word[1:-1] = data != 32
        starts = np.flatnonzero(is_word[1:] > is_word[:-1])
        ends = np.flatnonzero(is_word[1:] < is_word[:-1])
        lengths = ends - starts
        keep = lengths >= 2
        if not joined.isascii():
            # \w\w+ counts characters, not bytes. A token of 2-4 bytes may be one multi-byte
            # character: count its UTF-8 continuation bytes (10xxxxxx).
            maybe_one = np.flatnonzero(keep & (lengths <= 4))
            window = np.concatenate((data, np.zeros(4, dtype=np.uint8)))[starts[maybe_one, None] + np.arange(4)]
            inside = np.arange(4) < lengths[maybe_one, None]
            continuation = np.count_nonzero(((window & 0xC0) == 0x80) & inside, axis=1)
            keep[maybe_one] = (lengths[maybe_one] - continuation) >= 2
        starts, lengths = starts[keep], lengths[keep]
        inverse, first = byte_token_ids(data, starts, lengths)
        distinct = [joined[i : i + n] for i, n in zip(starts[first].tolist(), lengths[first].tolist())]
        ids = self._lookup(distinct, grow)[inverse]
        docs = np.repeat(np.arange(len(texts)), tokens_per_text(starts, text_starts))
        kept = ids >= 0
        return ids[kept], docs[kept]

    def _prepare_non_ascii(self, text: str) -> bytes:
        tokenizer = self.tokenizer
        if tokenizer.normalize is not None:
            text = unicodedata.normalize(tokenizer.normalize, text)
        if tokenizer.lower:
            text = text.lower()
        return _NON_ASCII_NONWORD.sub(" ", text).encode("utf-8")

    def _resolve_batch(self, raw_tokens: Iterable, grow: bool) -> None:
        """Resolve distinct unseen raw tokens into the cache, stemming them in one batch."""
        tokenizer = self.tokenizer
        cache = self._cache
        pending_raw, pending_text = [], []
        for raw in raw_tokens:
            text = raw
            if isinstance(raw, bytes):
                text = raw.decode("utf-8")
                if len(text) < 2:
                    cache[raw] = -1
                    continue
            if text in tokenizer._stopset:
                cache[raw] = -1
                continue
            pending_raw.append(raw)
            pending_text.append(text)
        stems = tokenizer.stem_batch(pending_text)
        vocab, terms = self.vocab, self.terms
        for raw, term in zip(pending_raw, stems):
            tid = vocab.get(term)
            if tid is None:
                if not grow:
                    continue  # unknown terms are not cached: the vocabulary may grow later
                tid = vocab[term] = len(terms)
                terms.append(term)
            cache[raw] = tid

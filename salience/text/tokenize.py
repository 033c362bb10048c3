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
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, MissingDependencyError, unknown_choice
from salience.text.stopwords import get_stopwords

__all__ = ["Tokenizer", "TermEncoder", "DEFAULT_PATTERN"]

DEFAULT_PATTERN = r"\w\w+"
_NORMAL_FORMS = ("NFC", "NFKC", "NFD", "NFKD")

# Byte table for the ASCII fast path: word characters [A-Za-z0-9_] are kept (and optionally
# lower-cased); every other byte becomes a space, so bytes.split() yields the \w+ runs.
def _ascii_table(lower: bool) -> bytes:
    table = bytearray(b" " * 256)
    for c in range(128):
        ch = chr(c)
        if ch.isalnum() or ch == "_":
            table[c] = ord(ch.lower()) if lower else c
    return bytes(table)


_TABLE_LOWER = _ascii_table(True)
_TABLE_KEEP = _ascii_table(False)


def _load_stemmer(stemmer: str | Callable[[str], str] | None) -> Callable[[str], str] | None:
    if stemmer is None or callable(stemmer):
        return stemmer
    if not isinstance(stemmer, str):
        raise InvalidParameterError(
            f"stemmer must be a Snowball language name, a callable or None; got {type(stemmer).__name__}."
        )
    try:
        import Stemmer  # PyStemmer
    except ImportError:  # pragma: no cover - PyStemmer is a hard dependency
        raise MissingDependencyError(
            "Snowball stemming requires PyStemmer. Install it with: pip install PyStemmer"
        ) from None
    try:
        return Stemmer.Stemmer(stemmer).stemWord
    except KeyError:
        raise unknown_choice("stemmer language", stemmer, Stemmer.algorithms()) from None


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

    def __init__(
        self,
        *,
        lower: bool = True,
        normalize: str | None = "NFKC",
        pattern: str = DEFAULT_PATTERN,
        stopwords: str | Iterable[str] | None = "en",
        stemmer: str | Callable[[str], str] | None = "english",
    ):
        if normalize is not None and normalize not in _NORMAL_FORMS:
            raise unknown_choice("Unicode normal form", normalize, _NORMAL_FORMS)
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
        self._stem = _load_stemmer(stemmer)
        self._ascii_fast = pattern == DEFAULT_PATTERN
        self._table = _TABLE_LOWER if self.lower else _TABLE_KEEP

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

    def __repr__(self) -> str:
        return "Tokenizer(" + ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()) + ")"

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
            if len(raw) < 2:  # the byte path also yields one-character runs; \w\w+ does not
                return None
            raw = raw.decode("ascii")
        if raw in self._stopset:
            return None
        return self._stem(raw) if self._stem is not None else raw

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
            tid = self.vocab[term] = len(self.terms)
            self.terms.append(term)
        self._cache[raw] = tid
        return tid

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

    def encode_batch(self, texts: Iterable[str], grow: bool = True, progress=None) -> tuple[np.ndarray, np.ndarray]:
        """Encode many texts into one flat id array plus per-text lengths.

        Returns ``(ids, lengths)``: ``ids`` (int32) concatenates every text's kept term ids,
        ``lengths`` (int64) gives how many belong to each text.
        """
        cache = self._cache
        split = self.tokenizer.split
        flat: list[int] = []
        lengths: list[int] = []
        for text in texts:
            raw_tokens = split(text)
            try:
                ids = [cache[t] for t in raw_tokens]
            except KeyError:
                ids = [cache[t] if t in cache else self._resolve(t, grow) for t in raw_tokens]
            if -1 in ids:
                ids = [i for i in ids if i >= 0]
            flat.extend(ids)
            lengths.append(len(ids))
            if progress is not None:
                progress.update(1)
        return np.asarray(flat, dtype=np.int32), np.asarray(lengths, dtype=np.int64)

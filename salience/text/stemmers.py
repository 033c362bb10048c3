"""Snowball stemmers (PyStemmer): by language name or a callable, and one per thread."""

from __future__ import annotations

import threading
from typing import Callable

from salience.exceptions import InvalidParameterError, unknown_choice
from salience.extras import require

__all__ = ["load_stemmer", "thread_stemmer", "stem_words"]


def load_stemmer(stemmer: str | Callable[[str], str] | None) -> Callable[[str], str] | None:
    if stemmer is None or callable(stemmer):
        return stemmer
    if not isinstance(stemmer, str):
        raise InvalidParameterError(
            f"stemmer must be a Snowball language name, a callable or None; got {type(stemmer).__name__}."
        )
    Stemmer = require("Stemmer", "PyStemmer", "Snowball stemming")  # a hard dependency
    try:
        # PyStemmer's own LRU cache costs more than it saves: callers cache per distinct token.
        return Stemmer.Stemmer(stemmer, 0).stemWord
    except KeyError:
        raise unknown_choice("stemmer language", stemmer, Stemmer.algorithms()) from None


_THREAD_STEMMERS = threading.local()


def thread_stemmer(language: str) -> Callable[[str], str]:
    """A Snowball ``stemWord`` for ``language`` owned by the calling thread (PyStemmer objects
    must not be shared between threads): one per thread and language, never more."""
    stemmers = getattr(_THREAD_STEMMERS, "by_language", None)
    if stemmers is None:
        stemmers = _THREAD_STEMMERS.by_language = {}
    stem = stemmers.get(language)
    if stem is None:
        stem = stemmers[language] = load_stemmer(language)
    return stem


def stem_words(stemmer: Callable[[str], str] | None, words: list[str]) -> list[str]:
    """``words`` stemmed (as they are without a stemmer): PyStemmer's ``stemWords`` on the whole
    list where the stemmer is its ``stemWord``, one call instead of one a word."""
    if stemmer is None:
        return words
    batch = getattr(getattr(stemmer, "__self__", None), "stemWords", None)
    return batch(words) if batch is not None else [stemmer(w) for w in words]

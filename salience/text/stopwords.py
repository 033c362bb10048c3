"""Stop-word lists.

``"en"`` is the classic English stop set of Lucene / Elasticsearch's ``_english_`` analyzer
(33 words), the list most BM25 baselines (Pyserini, bm25s) use, so results are comparable.
"""

from __future__ import annotations

from typing import Iterable

from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["STOPWORDS", "get_stopwords"]

_ENGLISH = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with""".split()
)

STOPWORDS: dict[str, frozenset[str]] = {"en": _ENGLISH, "english": _ENGLISH}


def get_stopwords(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Resolve a stop-word spec: a language name, an iterable of words, or ``None`` (no stopwords)."""
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        key = spec.lower()
        if key not in STOPWORDS:
            raise unknown_choice("stopword list", spec, STOPWORDS)
        return STOPWORDS[key]
    try:
        words = frozenset(spec)
    except TypeError:
        raise InvalidParameterError(
            f"stopwords must be a language name, an iterable of strings or None; got {type(spec).__name__}."
        ) from None
    bad = [w for w in words if not isinstance(w, str)]
    if bad:
        raise InvalidParameterError(f"stopwords must be strings; got {bad[0]!r}.")
    return words

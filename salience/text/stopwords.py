"""Stop-word lists.

Any language of :mod:`salience.text.languages` with a stop list is named by its ISO 639-1 code
or English name (``"fr"``, ``"german"``). ``"en"`` is the classic English stop set of Lucene / Elasticsearch's ``_english_`` analyzer
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

# A fuller English function-word list (pronouns, determiners, auxiliaries, prepositions,
# conjunctions, frequent adverbs) for salience of content words: keyphrases and summaries.
_ENGLISH_FULL = _ENGLISH | frozenset(
    """i me my myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself its itself them theirs themselves what which who whom whose this that these those am is are was were
    be been being have has had having do does did doing would should could ought might must shall can may will
    a an the and but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here there when
    where why how all any both each few more most other some such no nor not only own same so than too very
    just also now even still yet ever never always often however although though whether either neither
    upon within without across along among around behind beyond toward towards via per onto
    s t don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn mustn ll re ve d m
    one ones many much every another anything something nothing everything someone anyone everyone""".split()
)

STOPWORDS: dict[str, frozenset[str]] = {
    "en": _ENGLISH,
    "english": _ENGLISH,
    "en_full": _ENGLISH_FULL,
}


def get_stopwords(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Resolve a stop-word spec: a list name or language (``"en_full"``, ``"fr"``), an iterable of
    words, or ``None`` (no stopwords)."""
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        key = spec.lower()
        if key in STOPWORDS:
            return STOPWORDS[key]
        from salience.text.languages import LANGUAGES, _BY_NAME, stopwords_for

        code = key if key in LANGUAGES else _BY_NAME.get(key)
        if code is None or not LANGUAGES[code].has_stopwords:
            listed = [c for c, lang in LANGUAGES.items() if lang.has_stopwords and c not in STOPWORDS]
            raise unknown_choice("stopword list", spec, [*STOPWORDS, *listed])
        return stopwords_for(code)
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

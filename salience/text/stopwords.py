"""Stop-word lists.

Any language of :mod:`salience.text.languages` with a stop list is named by its ISO 639-1 code
or English name (``"fr"``, ``"german"``). ``"en"`` is the classic English stop set of Lucene / Elasticsearch's ``_english_`` analyzer
(33 words), the list most BM25 baselines (Pyserini, bm25s) use, so results are comparable.
"""

from __future__ import annotations

__all__ = ["STOPWORDS"]

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

"""The two named tiers of keyphrase extraction: ``fast`` and ``best``.

A user who does not know which method suits a collection picks a tier, not a method:

* ``fast`` (the default): ``yake_rake``, YAKE's and RAKE's rankings of one tokenisation fused
  by reciprocal rank (RAKE in English texts only; YAKE alone elsewhere), thousands of texts a
  second on one core;
* ``best``: ``fused``, YAKE's and tf-idf's rankings combined by reciprocal rank fusion (k=20),
  over noun-phrase candidates where a part-of-speech tagger is installed (short English texts;
  a long text, a text in another language, or every text where no tagger is installed, takes
  the usual candidates, the last with a warning naming the install); tf-idf's document
  frequencies are those of the texts given together.

Both were chosen on the dev splits of the shared keyphrase sets, pooled across the sets so that
one setting serves every collection (``docs/keywords-and-summaries.md`` gives the measured
quality and speed of each).
"""

from __future__ import annotations

import warnings

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.text.languages import LanguageWarning

__all__ = ["TIERS", "tier_method"]

#: tier -> (method, its parameters); a user's own parameters override these
TIERS: dict[str, tuple[str, dict]] = {
    "fast": ("yake_rake", {}),
    "best": ("fused", {"methods": ["yake", "tfidf"], "fusion_params": {"rrf_k": 20}, "candidates_from": "noun_phrases"}),
}


def tier_method(method: str | None, tier: str | None, params: dict) -> tuple[str, dict]:
    """(method, parameters) for a call that names a ``method``, a ``tier`` or neither (the
    ``fast`` tier), with the caller's ``params`` over the tier's."""
    if method is not None and tier is not None:
        raise InvalidParameterError(f"choose a method or a tier, not both (got method={method!r} and tier={tier!r}).")
    if tier is None:
        return (method or TIERS["fast"][0]), params
    if tier not in TIERS:
        raise InvalidParameterError(f"unknown tier {tier!r}: choose one of {', '.join(TIERS)}.")
    name, preset = TIERS[tier]
    chosen = {**preset, **params}
    if chosen.get("candidates_from") == "noun_phrases" and not _tagger_installed(chosen.get("tagger")):
        warnings.warn("the best tier tags English texts for noun-phrase candidates, and no spaCy pipeline is installed: "
                      "it reads the usual candidates instead (pip install 'salience[pos]' and en_core_web_sm).",
                      LanguageWarning, stacklevel=3)
        chosen["candidates_from"] = "auto"
        chosen.pop("tagger", None)
    return name, chosen


def _tagger_installed(tagger) -> bool:
    from salience.keywords.pos import get_tagger

    try:
        get_tagger(tagger)
    except MissingDependencyError:
        return False
    return True

"""Keyphrases by several methods at once: each method ranks a text's candidates, and the core's
rank fusion (:mod:`salience.core.fusion`: RRF, Borda, CombSUM, ...) combines their rankings.

The methods disagree in useful ways (YAKE's casing and position statistics, tf-idf's corpus
frequencies, RAKE's phrase degrees, a language model's judgement), and which one is best
differs from collection to collection; fused, they need no choice. A candidate is keyed by
its stemmed words (:func:`~salience.keywords.evaluate.normalize_phrase`), so the methods'
case and inflection variants of one phrase are one candidate, shown in the first method's
form. ``tfidf`` learns its document frequencies from the texts given together (as ``keywords
evaluate`` does), unless ``method_params`` gives it a fitted ``document_frequency``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.base import create, method_names, register_method
from salience.core.params import Check, Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.keywords.evaluate import normalize_phrase
from salience.keywords.extract import KeyphraseExtractor, TfIdf, learns_document_frequency
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS, DocumentFrequency
from salience.keywords.pos import get_tagger

__all__ = ["FusedKeyphrases"]


def _is_members(value) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) >= 2 and len(set(value)) == len(value)
            and all(isinstance(v, str) and v in method_names("keywords") and v != "fused" for v in value))


def _is_weights(value) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v >= 0 for v in value)


def _is_member_params(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items())


def _word_count(text: str, limit: int = 1_000_000) -> int:
    """Whitespace-separated words of ``text`` (its first ``limit`` characters suffice to tell a
    long text)."""
    return len(text[:limit].split())


class _SharedTags:
    """A tagger that tags each text once for all the methods of one fused call (tagging is most
    of a noun-phrase method's time)."""

    def __init__(self, tagger):
        self.tagger, self.tags = tagger, {}

    def __call__(self, tokens: list[list[str]]) -> list[list[str]]:
        missing = list(dict.fromkeys(tuple(t) for t in tokens if tuple(t) not in self.tags))
        if missing:
            for text, tags in zip(missing, self.tagger([list(t) for t in missing])):
                self.tags[text] = list(tags)
        return [self.tags[tuple(t)] for t in tokens]


@register_method("keywords", "fused", "several keyphrase methods' rankings combined by the core's rank fusion (RRF "
                                      "by default); the 'best' tier")
class FusedKeyphrases(KeyphraseExtractor):
    """``methods`` (registered keyphrase methods) each rank a text's candidates; the best
    ``depth`` of each are combined by the registered fusion method ``fusion`` (with
    ``weights``, one per method, and ``fusion_params`` such as ``{"rrf_k": 10}``).
    ``method_params`` gives a method its own parameters (``{"promptrank": {"pool": 30}}``);
    the shared ones (``candidates_from``, ``tagger``, ``language``, ``long_text_words``,
    ``encoder``) go to every method that has them. With ``candidates_from="noun_phrases"``
    only texts in ``noun_phrase_languages`` (the default tagger is English) of at most
    ``long_text_words`` words are tagged; the others take the usual candidates (n-grams in a
    long text: on the dev splits noun phrases do not raise F1@10 there, 0.1801 against 0.1796
    for the best tier's methods, and tagging costs most of the time)."""

    costly = True
    uses_encoder = True
    _parameter_constraints = {
        "methods": [Check(_is_members, "a list of two or more distinct registered keyphrase methods")],
        "weights": [None, Check(_is_weights, "a list of non-negative numbers, one per method")],
        "fusion": [Check(lambda v: isinstance(v, str) and v in method_names("fusion"), "a registered fusion method "
                                                                                         "(rrf, borda, combsum, ...)")],
        "fusion_params": [None, Check(lambda v: isinstance(v, dict), "a dict of the fusion method's parameters")],
        "method_params": [None, Check(_is_member_params, "a dict from method name to a dict of its parameters")],
        "depth": [Interval("int", 1)],
        "noun_phrase_languages": [Check(lambda v: isinstance(v, (list, tuple)) and all(isinstance(c, str) for c in v),
                                        "a list of ISO 639-1 codes")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", methods: Sequence[str] = ("yake", "tfidf"), weights: Sequence[float] | None = None,
                 fusion: str = "rrf",
                 fusion_params: dict | None = None, method_params: dict | None = None, depth: int = 30,
                 noun_phrase_languages: Sequence[str] = ("en",)):
        self.methods, self.weights, self.fusion, self.fusion_params = methods, weights, fusion, fusion_params
        self.method_params, self.depth, self.noun_phrase_languages = method_params, depth, noun_phrase_languages
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.weights is not None and len(self.weights) != len(self.methods):
            raise InvalidParameterError(f"weights needs one number per method; got {len(self.weights)} weights for "
                                        f"{len(self.methods)} methods.")
        unknown = sorted(set(self.method_params or {}) - set(self.methods))
        if unknown:
            raise InvalidParameterError(f"method_params names {unknown[0]!r}, which is not one of methods "
                                        f"{list(self.methods)}.")
        self._fuser()  # its parameters are checked now, not at the first text

    def _fuser(self):
        return create("fusion", self.fusion, weights=self.weights, **(self.fusion_params or {}))

    def _member(self, name: str, candidates_from: str, languages, size: int, tagger=None):
        from salience.core.base import _method

        own = dict((self.method_params or {}).get(name, {}))
        accepted = _method("keywords", name).params()
        shared = {"candidates_from": candidates_from, "language": languages, "long_text_words": self.long_text_words,
                  "batch_size": max(size, 1), "stopwords": self.stopwords}
        if candidates_from == "noun_phrases":
            shared["tagger"] = tagger
        if self.encoder is not None and getattr(_method("keywords", name).factory, "uses_encoder", False):
            shared["encoder"] = self.encoder
        return create("keywords", name, k=self.depth, **{key: v for key, v in shared.items() if key in accepted},
                      **own)

    def _prepare(self, texts, language) -> dict:
        """Document frequencies of the texts given together, for ``tfidf`` and its kin (those not
        given their own)."""
        if any(learns_document_frequency(name) and (self.method_params or {}).get(name, {}).get("document_frequency")
               is None for name in self.methods):
            return {"document_frequency": DocumentFrequency(stopwords=self.stopwords,
                                                            language=language if isinstance(language, str) else "auto")
                    .fit(texts)}
        return {}

    def _groups(self, chunk, language) -> list[tuple[str, list[int], "str | list[str]"]]:
        """(candidate source, the texts' positions, their language or languages) for each group
        of texts: with noun phrases, the short texts in ``noun_phrase_languages`` and the others."""
        if self.candidates_from != "noun_phrases":
            return [(self.candidates_from, list(range(len(chunk))), language)]
        if isinstance(language, str) and language == "auto":
            from salience.text.languages import detect_languages

            each = detect_languages(chunk)
        else:
            each = list(language) if not isinstance(language, str) else [language] * len(chunk)
        tagged = [i for i, code in enumerate(each)
                  if code in self.noun_phrase_languages and _word_count(chunk[i]) <= self.long_text_words]
        untagged = sorted(set(range(len(chunk))) - set(tagged))
        groups = []
        if tagged:
            groups.append(("noun_phrases", tagged, [each[i] for i in tagged]))
        if untagged:  # an undetermined language is detected again, and read as such, by the members
            groups.append(("auto", untagged, language if isinstance(language, str) else [each[i] for i in untagged]))
        return groups

    def _all_chunk(self, chunk, language, context) -> list[Scores]:
        rankings: list[list[Scores]] = [[] for _ in chunk]
        for source, positions, languages in self._groups(chunk, language):
            texts = [chunk[i] for i in positions]
            tagger = _SharedTags(get_tagger(self.tagger)) if source == "noun_phrases" else None
            for name in self.methods:
                member = self._member(name, source, languages, len(texts), tagger)
                if isinstance(member, TfIdf) and member.document_frequency is None and context.get("document_frequency"):
                    member.document_frequency = context["document_frequency"]
                for i, scores in zip(positions, member.score_batch(texts)):
                    rankings[i].append(scores)
        fuser = self._fuser()
        return [self._fused(fuser, lists) for lists in rankings]

    def _fused(self, fuser, lists: list[Scores]) -> Scores:
        surface: dict[str, str] = {}
        keyed = []
        for scores in lists:
            kept_ids, kept_values, seen = [], [], set()
            ordered = scores.sorted()
            for phrase, value in zip(ordered.ids, ordered.values.tolist()):
                key = normalize_phrase(str(phrase)) or str(phrase).lower()
                if key in seen:
                    continue  # a method's own case or inflection variant: its better-scored form counts
                seen.add(key)
                surface.setdefault(key, str(phrase))
                kept_ids.append(key)
                kept_values.append(value)
            keyed.append(Scores(kept_values, ids=kept_ids).sorted() if kept_ids else Scores([], ids=[]))
        if not surface:
            return Scores([], ids=[])
        fused = fuser.score(keyed)
        return Scores(fused.values, ids=[surface[key] for key in fused.ids])

    def score_candidates(self, text: str, *, language=None) -> Scores:
        """The fused score of every candidate that some method ranks among its best ``depth``."""
        from salience.text.languages import check_language

        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
        language = check_language(self.language if language is None else language)
        return self._all_chunk([text], language, self._prepare([text], language))[0]

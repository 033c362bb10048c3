"""Languages: stop words, Snowball stemmers and detection, per ISO 639-1 code.

Stop words come from Stopwords ISO (``stopwordsiso``, 58 languages, maintained); English keeps
salience's own fuller function-word list (``"en_full"``), which the keyphrase and summary
methods were tuned with, because Stopwords ISO's English list holds content words ("able",
"research", "value"). Stemming is Snowball through PyStemmer for every language it covers; a
language without a stemmer is not stemmed, and a language without a stop list gets the
statistical fallback of :func:`frequent_words`, each named in a :class:`LanguageWarning`.

Detection (:func:`detect_languages`) counts, per document, the tokens that are stop words of
each language, each word weighted by one over the number of lists it is on (so "a", on a dozen
lists, decides little and "the" or "des" much), and takes the best of the languages whose stop
words cover enough of the text (:data:`MIN_STOPWORD_SHARE`); with none, the text's script
decides where one language writes it (Hangul, kana, Greek...), and otherwise the text is
``"und"`` (undetermined) and gets the language-free fallback.
"""

from __future__ import annotations

import re
import warnings
from itertools import repeat
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, unknown_choice
from salience.extras import require
from salience.text.byte_tokens import JOINED_WORD, ascii_joined_words
from salience.text.stemmers import thread_stemmer
from salience.text.stopwords import STOPWORDS

__all__ = ["Language", "LanguageWarning", "LANGUAGES", "UNDETERMINED", "resolve_language", "stopwords_for",
           "stemmer_for", "detect_languages", "detect_language", "frequent_words", "check_language", "get_stopwords"]

UNDETERMINED = "und"  # ISO 639-2's code for an undetermined language
_WORD = re.compile(JOINED_WORD)

# ISO 639-1 code -> (English name, Snowball algorithm in PyStemmer or None)
_NAMES = {
    "af": "afrikaans", "ar": "arabic", "bg": "bulgarian", "bn": "bengali", "br": "breton", "ca": "catalan",
    "cs": "czech", "da": "danish", "de": "german", "el": "greek", "en": "english", "eo": "esperanto",
    "es": "spanish", "et": "estonian", "eu": "basque", "fa": "persian", "fi": "finnish", "fr": "french",
    "ga": "irish", "gl": "galician", "gu": "gujarati", "ha": "hausa", "he": "hebrew", "hi": "hindi",
    "hr": "croatian", "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian", "ja": "japanese",
    "ko": "korean", "ku": "kurdish", "la": "latin", "lt": "lithuanian", "lv": "latvian", "mr": "marathi",
    "ms": "malay", "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sk": "slovak", "sl": "slovenian", "so": "somali", "sr": "serbian",
    "st": "sesotho", "sv": "swedish", "sw": "swahili", "ta": "tamil", "th": "thai", "tl": "tagalog",
    "tr": "turkish", "uk": "ukrainian", "ur": "urdu", "vi": "vietnamese", "yi": "yiddish", "yo": "yoruba",
    "zh": "chinese", "zu": "zulu",
}
_SNOWBALL = {"ar", "ca", "cs", "da", "de", "el", "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "ga", "hi", "hu",
             "hy", "id", "it", "lt", "ne", "nl", "no", "pl", "pt", "ro", "ru", "sr", "st", "sv", "ta", "tr", "yi"}
# languages written without spaces between words: their ideographs and kana are tokens of one
# character each (see salience.text.tokenize); Thai is not segmented (a documented limitation)
SCRIPT_SEGMENTED = frozenset({"zh", "ja"})


class LanguageWarning(UserWarning):
    """A text's language was not detected, or lacks a stop list or a stemmer: a fallback is used."""


@dataclass(frozen=True)
class Language:
    """One supported language: its ISO 639-1 ``code``, English ``name``, the Snowball algorithm
    that stems it (``None``: not stemmed) and whether a stop list exists for it."""

    code: str
    name: str
    snowball: str | None
    has_stopwords: bool


@lru_cache(maxsize=1)
def _iso_lists() -> dict[str, frozenset[str]]:
    stopwordsiso = require("stopwordsiso", "stopwordsiso", "Stop words for languages other than English")
    lists = {}
    for code in stopwordsiso.langs():
        words = {w.strip().lower() for w in stopwordsiso.stopwords(code)}
        lists[code] = frozenset(w for w in words if w and any(c.isalnum() for c in w))
    return lists


def _build_languages() -> dict[str, Language]:

    try:
        import stopwordsiso

        listed = set(stopwordsiso.langs())
    except ImportError:  # pragma: no cover
        listed = set()
    return {code: Language(code, name, name if code in _SNOWBALL else None,
                           code in listed or (code == "en" and "en_full" in STOPWORDS))
            for code, name in sorted(_NAMES.items())}


#: every language salience knows, by ISO 639-1 code
LANGUAGES: dict[str, Language] = _build_languages()
_BY_NAME = {lang.name: code for code, lang in LANGUAGES.items()}


def resolve_language(language: str) -> str:
    """The ISO 639-1 code of ``language`` (a code such as ``"fr"`` or an English name such as
    ``"french"``, any case); an unknown one raises an error that lists the valid codes."""
    if not isinstance(language, str):
        raise InvalidParameterError(f"language must be a str (an ISO 639-1 code such as 'fr'); "
                                    f"got {type(language).__name__}.")
    key = language.strip().lower().replace("-", "_")
    if key in LANGUAGES:
        return key
    if key in _BY_NAME:
        return _BY_NAME[key]
    base = key.split("_")[0]  # "pt_BR", "en-US"
    if base in LANGUAGES:
        return base
    raise InvalidParameterError(f"unknown language {language!r}: use 'auto' (detect each text's language) or one of "
                                f"the ISO 639-1 codes {', '.join(sorted(LANGUAGES))}.")


def check_language(language: str) -> str:
    """Validate a ``language=`` option: ``"auto"`` or a known language (returned as its code)."""
    if isinstance(language, str) and language.strip().lower() == "auto":
        return "auto"
    return resolve_language(language)


def stopwords_for(code: str, purpose: str = "text") -> frozenset[str]:
    """The stop list of a language (empty for one without: see :func:`frequent_words`).
    ``purpose="keyphrases"``: English candidates also stop at the SMART list's vague words
    (``"en_keyphrase"``)."""
    if code == "en":
        return STOPWORDS["en_keyphrase" if purpose == "keyphrases" else "en_full"]
    if code == UNDETERMINED:
        return frozenset()
    return _iso_lists().get(code, frozenset())


def get_stopwords(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Resolve a stop-word spec: a list name or language (``"en_full"``, ``"fr"``), an iterable of
    words, or ``None`` (no stopwords)."""
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        key = spec.lower()
        if key in STOPWORDS:
            return STOPWORDS[key]
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


def stemmer_for(code: str) -> Callable[[str], str] | None:
    """The calling thread's Snowball stemmer for a language, or ``None`` where Snowball has none."""

    language = LANGUAGES.get(code)
    if language is None or language.snowball is None:
        return None
    return thread_stemmer(language.snowball)


def fallback_warning(code: str) -> str | None:
    """What a text in ``code`` goes without, in words (``None`` when it has stop words and a stemmer)."""
    if code == UNDETERMINED:
        return ("the language of a text was not detected (too short, or not one of the "
                f"{len(_detectable())} languages with a stop list): it gets no stemming and, as stop words, "
                "its own most frequent words; pass language= to choose")
    language = LANGUAGES[code]
    missing = []
    if not language.has_stopwords:
        missing.append("stop list (its own most frequent words are used)")
    if language.snowball is None:
        missing.append("Snowball stemmer (words are not stemmed)")
    return f"{language.name} ({code}) has no {' and no '.join(missing)}" if missing else None


def warn_fallbacks(codes: Iterable[str], stacklevel: int = 3) -> None:
    for code in sorted(set(codes)):
        message = fallback_warning(code)
        if message:
            warnings.warn(message, LanguageWarning, stacklevel=stacklevel)


def frequent_words(counts: np.ndarray, share: float = 0.3, max_words: int = 50) -> np.ndarray:
    """Stop words for a text without a stop list: the most frequent words (indexes into
    ``counts``) that together make up ``share`` of its tokens, at most ``max_words`` of them and
    only words seen at least three times. Function words are the most frequent words of every
    language (Zipf), so this removes most of them with no list."""
    if len(counts) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")[:max_words]
    covered = np.cumsum(counts[order]) - counts[order]  # tokens covered before each word
    keep = (covered < share * counts.sum()) & (counts[order] >= 3)
    return order[keep]


# ------------------------------------------------------------------------------------------
# detection

#: the share of a text's tokens that must be stop words of the detected language
MIN_STOPWORD_SHARE = 0.10
#: texts with fewer word tokens than this are not detected
MIN_DETECT_TOKENS = 1
#: the tokens of a text that vote: its first so many
DETECT_TOKENS = 2000
# (texts x listed words) counts up to this many cells are counted densely, beyond in a sparse matrix
_DENSE_VOTE_CELLS = 1_000_000


@lru_cache(maxsize=1)
def _detectable() -> tuple[str, ...]:
    return tuple(code for code, lang in LANGUAGES.items() if lang.has_stopwords)


@lru_cache(maxsize=1)
def _stopword_index() -> dict[str, tuple[int, ...]]:
    """Each stop word -> the languages (indexes into :func:`_detectable`) that list it."""

    lists = {code: stopwords_for(code) for code in _detectable()}
    # English detection uses both lists: the short classic one votes as a list of its own would
    lists["en"] = lists["en"] | STOPWORDS["en"]
    owners: dict[str, list[int]] = {}
    for index, code in enumerate(_detectable()):
        for word in lists[code]:
            owners.setdefault(word, []).append(index)
    return {w: tuple(v) for w, v in owners.items()}


@lru_cache(maxsize=1)
def _language_sets() -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Each stop word -> the index of the set of languages listing it; and per set, its vote for
    each language (one over the set's size where listed) and its membership (1 where listed)."""
    owners = _stopword_index()
    distinct = {langs: i for i, langs in enumerate(dict.fromkeys(owners.values()))}
    members = np.zeros((len(distinct), len(_detectable())))
    for langs, i in distinct.items():
        members[i, list(langs)] = 1.0
    weights = members / members.sum(axis=1, keepdims=True)
    return {word: distinct[langs] for word, langs in owners.items()}, weights, members


@lru_cache(maxsize=1)
def _ascii_language_sets() -> tuple[dict[bytes, int], np.ndarray, np.ndarray]:
    """:func:`_language_sets` with its ASCII words as bytes (the tokens of :func:`ascii_joined_words`)."""
    sets, weights, members = _language_sets()
    return {word.encode("ascii"): i for word, i in sets.items() if word.isascii()}, weights, members


# Scripts that a single supported language writes (or that tell it, like kana for Japanese):
# a text the stop-word vote leaves undetermined is that language when most of its letters are
# in the script. Han without kana is Chinese.
_SCRIPTS = (("ja", "[\u3040-\u30ff]"), ("zh", "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"),
            ("ko", "[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]"), ("th", "[\u0e00-\u0e7f]"), ("el", "[\u0370-\u03ff\u1f00-\u1fff]"),
            ("he", "[\u0590-\u05ff]"), ("hy", "[\u0530-\u058f]"), ("gu", "[\u0a80-\u0aff]"), ("bn", "[\u0980-\u09ff]"),
            ("ta", "[\u0b80-\u0bff]"))
_SCRIPT_SAMPLE = 4000  # characters of a text looked at


def script_language(text: str) -> str:
    """The language that the script of most of ``text``'s letters tells (``"und"`` if none)."""
    sample = text[:_SCRIPT_SAMPLE]
    letters = sum(map(str.isalpha, sample))
    if not letters:
        return UNDETERMINED
    counts = {code: len(re.findall(pattern, sample)) for code, pattern in _SCRIPTS}
    if counts["ja"] >= 0.1 * letters:
        return "ja"  # Japanese mixes kana with Han
    code = max(counts, key=counts.get)
    return code if counts[code] >= 0.5 * letters else UNDETERMINED


# Ties (a short text whose few stop words are on many lists: "in", "a") go to the language more
# texts are written in: roughly the order of languages' shares of web content.
_PREVALENCE = ("en", "ru", "es", "de", "fr", "ja", "pt", "it", "fa", "pl", "zh", "nl", "tr", "vi", "cs", "id", "ko", "uk",
               "ar", "el", "hu", "sv", "ro", "da", "fi", "sk", "he", "no", "bg", "hr", "th", "sr", "lt", "sl", "ca", "hi",
               "et", "lv", "ms", "bn", "ta", "ur", "tl", "af", "gl", "eu", "ga", "la", "eo", "sw", "hy", "ku")


@lru_cache(maxsize=1)
def _tie_breaker() -> np.ndarray:
    codes = _detectable()
    rank = {code: i for i, code in enumerate(_PREVALENCE)}
    return np.array([-1e-9 * rank.get(code, len(_PREVALENCE)) for code in codes])


def detect_from_tokens(lowers: Sequence[str], lower_of_token: np.ndarray, doc_of_token: np.ndarray,
                       n_docs: int, texts: Sequence[str] | None = None) -> list[str]:
    """Language codes of ``n_docs`` documents from their lower-cased word tokens: ``lowers``
    are the distinct words, ``lower_of_token`` and ``doc_of_token`` number each token's word and
    document. Array work over all documents at once; one dictionary lookup per distinct word.
    Given the ``texts``, those the vote leaves undetermined are told by their script."""
    # the first DETECT_TOKENS tokens of each document vote (enough, and bounded for huge texts)
    doc_start = np.searchsorted(doc_of_token, np.arange(n_docs + 1))
    tokens_per_doc = np.minimum(np.diff(doc_start), DETECT_TOKENS)
    if tokens_per_doc.sum() < len(doc_of_token):
        keep = np.arange(len(doc_of_token)) - doc_start[doc_of_token] < DETECT_TOKENS
        lower_of_token, doc_of_token = lower_of_token[keep], doc_of_token[keep]
    set_of_word = np.fromiter(map(_language_sets()[0].get, lowers, repeat(-1)), dtype=np.int64, count=len(lowers))
    return _vote(set_of_word[lower_of_token], doc_of_token, tokens_per_doc, texts)


def _vote(token_set: np.ndarray, doc_of_token: np.ndarray, tokens_per_doc: np.ndarray,
          texts: Sequence[str] | None) -> list[str]:
    """Each document's language from the set of languages listing each of its voting tokens
    (``token_set``, -1 for a word on no list; ``doc_of_token`` numbers their documents)."""
    from scipy import sparse

    n_docs = len(tokens_per_doc)
    # every token on some list votes for each language listing it, weighted by one over the
    # lists its word is on. Words listed by the same languages vote alike: (documents x sets of
    # languages met) counts times (sets x languages), a few dozen sets where words are hundreds
    _, set_weights, set_members = _language_sets()
    listed = token_set >= 0
    if not listed.any():
        return _by_script([UNDETERMINED] * n_docs, texts)
    met = np.zeros(len(set_weights), dtype=bool)
    met[token_set[listed]] = True
    present = np.flatnonzero(met)
    local = np.cumsum(met) - 1
    token_local, n_present = local[token_set[listed]], len(present)
    if n_docs * n_present <= _DENSE_VOTE_CELLS:  # dense counts: no sparse matrix to build
        cell = doc_of_token[listed] * n_present + token_local
        counts = np.bincount(cell, minlength=n_docs * n_present).reshape(n_docs, n_present).astype(np.float64)
    else:
        # sparse: a large batch of texts in many languages meets many sets, few in each text;
        # one entry per token (in document order; the products add up repeated entries)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(doc_of_token[listed], minlength=n_docs))))
        counts = sparse.csr_matrix((np.ones(int(indptr[-1])), token_local, indptr), shape=(n_docs, n_present))
    weights, members = set_weights[present], set_members[present]
    return _by_script(_decide(counts @ weights, counts @ members, tokens_per_doc), texts)


def _decide(votes, coverage, tokens_per_doc: np.ndarray) -> list[str]:
    """Per document, the best vote among the languages whose stop words cover enough of it."""
    codes = _detectable()
    votes = np.asarray(votes.toarray() if hasattr(votes, "toarray") else votes) + _tie_breaker()
    coverage = np.asarray(coverage.toarray() if hasattr(coverage, "toarray") else coverage)
    enough = coverage >= MIN_STOPWORD_SHARE * np.maximum(tokens_per_doc, 1)[:, None]
    best = np.where(enough, votes, -np.inf).argmax(axis=1)
    out = [UNDETERMINED] * len(tokens_per_doc)
    for d in np.flatnonzero(enough.any(axis=1) & (tokens_per_doc >= MIN_DETECT_TOKENS)).tolist():
        out[d] = codes[best[d]]
    return out


def _by_script(codes: list[str], texts: Sequence[str] | None) -> list[str]:
    if texts is not None:
        for d, code in enumerate(codes):
            if code == UNDETERMINED and texts[d]:
                codes[d] = script_language(texts[d])
    return codes


def detect_languages(texts: Sequence[str]) -> list[str]:
    """The ISO 639-1 code of each text's language, or ``"und"`` when it cannot be told (see the
    module notes for the method). Each text's voting words are found as :func:`detect_language`
    finds them; the votes of all texts are counted together.

    >>> detect_languages(["The cat sat on the mat and it was happy.", "Le chat est sur le tapis et il dort.", "42"])
    ['en', 'fr', 'und']
    """
    if isinstance(texts, str):
        raise InvalidParameterError("texts must be a sequence of str, not one str; use detect_language for one text.")
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__} (document {d}).")
    if len(texts) == 1:  # one text: the dictionary count is faster than the arrays (the same answer)
        return [detect_language(texts[0])]
    sets, ascii_sets = _language_sets()[0], _ascii_language_sets()[0]
    token_sets = []
    for text in texts:
        tokens, ascii_bytes = _detection_tokens(text)
        lookup = (ascii_sets if ascii_bytes else sets).get
        token_sets.append(np.fromiter(map(lookup, tokens, repeat(-1)), dtype=np.int64, count=len(tokens)))
    tokens_per_doc = np.fromiter(map(len, token_sets), dtype=np.int64, count=len(token_sets))
    token_set = np.concatenate(token_sets) if token_sets else np.zeros(0, dtype=np.int64)
    return _vote(token_set, np.repeat(np.arange(len(texts)), tokens_per_doc), tokens_per_doc, texts)


def _detection_tokens(text: str) -> tuple[list, bool]:
    """The words of ``text`` that vote (its first ``DETECT_TOKENS``, lower-cased) and whether
    they are ASCII bytes: text whose words are ASCII is split with a translation table
    (:func:`ascii_joined_words`), the rest by the regex."""
    head = text[:40 * DETECT_TOKENS]
    words = ascii_joined_words(head)
    if words is not None and (len(words) >= DETECT_TOKENS or len(head) == len(text)):
        return words[:DETECT_TOKENS], True
    # most texts hold their voting words well within a fifth of the head: the regex reads that
    # first (its first DETECT_TOKENS words end before a further word starts, so they are the head's)
    tokens = _WORD.findall(head[: 8 * DETECT_TOKENS])
    if len(tokens) <= DETECT_TOKENS and len(head) > 8 * DETECT_TOKENS:
        tokens = _WORD.findall(head)
    if len(tokens) < DETECT_TOKENS and len(text) > len(head):
        tokens = _WORD.findall(text)  # very long words: read on
    return ("\n".join(tokens[:DETECT_TOKENS]).lower().split("\n") if tokens else []), False


def detect_language(text: str) -> str:
    """:func:`detect_languages` for one text (the same answer), counted with a dictionary
    rather than arrays: the fast way for a single text, as a summary needs."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    tokens, ascii_bytes = _detection_tokens(text)
    sets, weights, members = _ascii_language_sets() if ascii_bytes else _language_sets()
    # each listed token counted under the set of languages listing it, then one product per vote
    of_token = np.fromiter(map(sets.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))
    counts = np.bincount(of_token[of_token >= 0], minlength=len(weights))
    present = np.flatnonzero(counts)  # a text meets few of the sets: the products over those alone
    counts = counts[present].astype(np.float64)
    votes, coverage = counts @ weights[present], counts @ members[present]
    return _by_script(_decide(votes[None], coverage[None], np.array([len(tokens)])), [text])[0]


def _number(values: list[str]) -> tuple[np.ndarray, list[str]]:
    distinct = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(distinct.__getitem__, values), dtype=np.int64, count=len(values)), list(distinct)

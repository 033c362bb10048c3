"""Documents read into words: a :class:`Batch` holds the words of many documents in flat
arrays (types, lower-case and stemmed forms, sentence numbers, content flags, boundaries), so
that a corpus is tokenised with a handful of numpy operations rather than a Python loop per
word. Candidate phrases are found on it (:mod:`salience.keywords.candidates`)."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.sentences import CLAUSE_END_MARKS
from salience.text.languages import get_stopwords
from salience.text.hashing import dense_ids, number_strings
from salience.text.stemmers import stem_words
from salience.text.byte_tokens import IDEOGRAPHS, TOKEN_RULES, byte_strings, byte_token_ids, joined_word_tokens

__all__ = ["Batch", "tokenize_batch", "bounded_texts", "capital_initials", "MAX_TEXT_CHARS"]

_TOKEN = re.compile(TOKEN_RULES["joined_words"])
_SENTENCE_END = CLAUSE_END_MARKS  # the clause rule kept beside the sentence splitter, where it is explained
_WORD, _SENTENCE_MARK, _OTHER_MARK = 0, 1, 2


@dataclass
class Batch:
    """The words (punctuation removed) of ``n_docs`` documents, concatenated.

    Per word: ``word_type`` (index into ``types``, the distinct original spellings), ``lower``
    (index into ``lowers``), ``stem`` (index into ``stems``, stemmed in its document's
    language), ``stop`` (on its document's stop list), ``doc``, ``sentence`` (number within its
    document), ``breaks`` (a punctuation mark or the document start precedes it), ``content``
    (may belong to a keyphrase) and where it lies in ``data`` (the documents' UTF-8 bytes,
    joined by newlines): ``byte_start`` and ``byte_length``. Per type, its ``type_first`` word.
    ``doc_start[d]:doc_start[d + 1]`` are document ``d``'s words; ``n_sentences[d]`` its
    sentence count; ``languages[d]`` the language it was read in.
    """

    types: list[str]
    lowers: list[str]
    stems: list[str]
    lower_chars: np.ndarray  # length of each of lowers
    type_lower: np.ndarray
    word_type: np.ndarray
    stem: np.ndarray
    stop: np.ndarray
    doc: np.ndarray
    sentence: np.ndarray
    breaks: np.ndarray
    content: np.ndarray
    doc_start: np.ndarray
    n_sentences: np.ndarray
    data: np.ndarray
    byte_start: np.ndarray
    byte_length: np.ndarray
    type_first: np.ndarray  # the first word of each type
    languages: list[str]
    type_upper: np.ndarray  # each type's cased characters all upper case (str.isupper)
    type_capital: np.ndarray  # each type begins with a capital letter

    @property
    def n_docs(self) -> int:
        return len(self.doc_start) - 1

    def __post_init__(self) -> None:
        self.lower = self.type_lower[self.word_type]  # per word: index into lowers


def _flags(predicate, values: list) -> np.ndarray:
    return np.fromiter(map(predicate, values), dtype=bool, count=len(values))


_SENTENCE_END_BYTE = np.zeros(256, dtype=bool)
_SENTENCE_END_BYTE[[ord(c) for c in _SENTENCE_END]] = True


def tokenize_batch(texts: Sequence[str], stopwords: Iterable[str] | str | None = "auto", tagger=None,
                   language: str | Sequence[str] = "en") -> Batch:
    """Tokenise ``texts`` into one :class:`Batch`.

    Tokens are found and numbered with array operations over the texts' bytes; distinct words
    are lower-cased, stemmed and checked against the stop list once per batch and language.
    ``language``: an ISO 639-1 code for every text, one code per text, or ``"auto"`` to detect
    each text's language (:mod:`salience.text.languages`). ``stopwords="auto"`` uses each
    language's list (English: ``"en_keyphrase"``, with the SMART list's vague words; a language
    without a list: its own most frequent words); any other value (a list
    name, your words, ``None``) applies to every text. With a ``tagger`` (a spaCy pipeline name
    or a callable, see :mod:`salience.keywords.pos`), keyphrases are noun phrases: content
    words are the adjectives and nouns of phrases that contain a noun, and a boundary also
    precedes an adjective that follows a noun, so that phrases match ``ADJ* NOUN+`` as in pke's
    default grammar.
    """
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__} (document {d}).")
    texts = bounded_texts(texts)
    fixed_stop = None if isinstance(stopwords, str) and stopwords == "auto" else get_stopwords(stopwords)
    data, starts, lengths, is_word, token_counts = _split_elisions(*joined_word_tokens(texts))
    token_kind = np.where(is_word, _WORD, np.where(_sentence_marks(data, starts, lengths), _SENTENCE_MARK, _OTHER_MARK))
    position = np.flatnonzero(is_word)
    byte_start, byte_length = starts[position], lengths[position]
    word_type, first = byte_token_ids(data, byte_start, byte_length)
    types = byte_strings(data, byte_start[first], byte_length[first]).split("\n")[:-1]
    # classify each distinct word once, with C-level string operations rather than a loop per word
    type_lower, lowers = number_strings("\n".join(types).lower().split("\n") if types else [])
    lower_chars = np.fromiter(map(len, lowers), dtype=np.int64, count=len(lowers))
    numeric = _flags(str.isdigit, "\n".join(lowers).replace("-", "").split("\n") if lowers else [])
    if data.size and data.max() >= 0x80:
        ideograph = _flags(_IDEOGRAPH.match, lowers)
    else:
        ideograph = np.zeros(len(lowers), dtype=bool)

    token_doc = np.repeat(np.arange(len(texts)), token_counts)
    doc = token_doc[position]
    lower = type_lower[word_type]
    languages = _document_languages(texts, language, lowers, lower, doc)
    stem, stems, stop = _stem_and_stop(lowers, lower, doc, languages, fixed_stop)
    # a word may be part of a keyphrase unless it is a stop word, a number or a lone character
    # (an ideograph is a word of one character)
    content = ((lower_chars > 1) | ideograph)[lower] & ~stop & ~numeric[lower]

    # sentence number of each token within its document: sentence marks seen before it
    marks = np.cumsum(token_kind == _SENTENCE_MARK)
    token_start = np.concatenate(([0], np.cumsum(token_counts)))
    marks_before_doc = np.concatenate(([0], marks))[token_start[:-1]]
    sentence = marks[position] - marks_before_doc[doc]
    # a boundary precedes a word when it opens its document or a mark lies between it and the last word
    breaks = np.ones(len(position), dtype=bool)
    breaks[1:] = (np.diff(position) > 1) | (doc[1:] != doc[:-1])
    type_upper = _flags(str.isupper, types)
    type_capital = capital_initials(types, data[byte_start[first]])
    breaks |= _unmarked_sentence_starts(types, lowers, type_upper, type_capital, type_lower, word_type, doc, breaks)
    words_per_doc = np.bincount(doc, minlength=len(texts))
    marks_per_doc = np.concatenate(([0], marks))[token_start[1:]] - marks_before_doc
    if tagger is not None:
        content, breaks = _noun_phrases(data, starts, lengths, token_counts, position, tagger, content, breaks)
    return Batch(types, lowers, stems, lower_chars, type_lower, word_type, stem, stop, doc, sentence, breaks,
                 content, np.concatenate(([0], np.cumsum(words_per_doc))),
                 np.where(words_per_doc > 0, marks_per_doc + 1, 0), data, byte_start, byte_length, first, languages,
                 type_upper, type_capital)


def capital_initials(types: list[str], initial_bytes: np.ndarray) -> np.ndarray:
    """Which ``types`` begin with a capital letter, read from their first UTF-8 byte where it is
    ASCII and from the string otherwise."""
    capital = (initial_bytes >= ord("A")) & (initial_bytes <= ord("Z"))
    for t in np.flatnonzero(initial_bytes >= 0x80).tolist():
        capital[t] = types[t][0].isupper()
    return capital


def _unmarked_sentence_starts(types, lowers, type_upper, type_capital, type_lower, word_type, doc, breaks) -> np.ndarray:
    """Words that open a sentence no mark ends, as when a title runs into its abstract: a
    capitalised word ("Opinion") right after a lower-case word, where the same document also
    writes it in lower case (so it is no name)."""
    first_upper = type_capital & ~type_upper
    all_lower = np.fromiter(map(operator.eq, types, map(lowers.__getitem__, type_lower.tolist())), dtype=bool,
                            count=len(types))
    lower_word = all_lower[word_type]
    after_lower = np.zeros(len(doc), dtype=bool)
    after_lower[1:] = lower_word[:-1] & ~breaks[1:]
    candidate = np.flatnonzero(first_upper[word_type] & after_lower)
    starts = np.zeros(len(doc), dtype=bool)
    if not len(candidate):
        return starts
    # the lower-case spelling of each candidate, and whether its document has it
    lower_type = np.full(len(lowers), -1)
    lower_type[type_lower[all_lower]] = np.flatnonzero(all_lower)
    spelled = lower_type[type_lower[word_type[candidate]]]
    candidate, spelled = candidate[spelled >= 0], spelled[spelled >= 0]
    needed = np.zeros(len(types), dtype=bool)
    needed[spelled] = True
    seen = np.flatnonzero(needed[word_type])
    codes = np.sort(doc[seen] * len(types) + word_type[seen])
    query = doc[candidate] * len(types) + spelled
    at = np.minimum(np.searchsorted(codes, query), max(len(codes) - 1, 0))
    starts[candidate[codes[at] == query]] = True
    return starts


_IDEOGRAPH = re.compile(f"[{IDEOGRAPHS}]")
_IDEOGRAPH_SPACE = re.compile(f"(?<=[{IDEOGRAPHS}]) (?=[{IDEOGRAPHS}])")
# the full-width clause marks of Chinese and Japanese, as UTF-8
_WIDE_SENTENCE_MARKS = frozenset(c.encode() for c in "。！？；")


# Elided articles, pronouns and prepositions of French, Italian and Catalan ("l'avion",
# "d'un", "qu'il", "dell'anno"): the word after the apostrophe is a word of its own
ELIDED = frozenset("c d j l m n s t qu jusqu lorsqu puisqu quoiqu presqu dell all dall nell sull coll quell quest".split())
_ELISION_MAX = max(map(len, ELIDED))


def _split_elisions(data, starts, lengths, is_word, token_counts):
    """Split word tokens such as "l'avion" into "l" and "avion" (the apostrophe, ' or ’, dropped)."""
    apostrophes = np.flatnonzero(data == 39)
    wide = np.flatnonzero(data[:-2] == 0xE2)  # ’ is E2 80 99 in UTF-8
    wide = wide[(data[wide + 1] == 0x80) & (data[wide + 2] == 0x99)]
    if len(wide):
        apostrophes = np.sort(np.concatenate((apostrophes, wide)))
    if not len(apostrophes) or not len(starts):
        return data, starts, lengths, is_word, token_counts
    token = np.searchsorted(starts, apostrophes, side="right") - 1
    offset = apostrophes - starts[token]
    near = (token >= 0) & is_word[token] & (offset >= 1) & (offset <= _ELISION_MAX) & (offset < lengths[token] - 1)
    split_token, split_offset = [], []
    for t, off in zip(token[near].tolist(), offset[near].tolist()):
        a = int(starts[t])
        if data[a : a + off].tobytes().decode("ascii", "replace").lower() in ELIDED:
            split_token.append(t)
            split_offset.append(off)
    if not split_token:
        return data, starts, lengths, is_word, token_counts
    split_token, split_offset = np.array(split_token), np.array(split_offset)
    mark = np.where(data[starts[split_token] + split_offset] == 39, 1, 3)  # the apostrophe's bytes
    rest_start = starts[split_token] + split_offset + mark
    rest_length = lengths[split_token] - split_offset - mark
    lengths = lengths.copy()
    lengths[split_token] = split_offset
    at = split_token + 1
    starts = np.insert(starts, at, rest_start)
    lengths = np.insert(lengths, at, rest_length)
    is_word = np.insert(is_word, at, True)
    text_of_token = np.repeat(np.arange(len(token_counts)), token_counts)
    token_counts = token_counts + np.bincount(text_of_token[split_token], minlength=len(token_counts))
    return data, starts, lengths, is_word, token_counts


#: Texts are read up to this many characters (about 650,000 words; a LanguageWarning says where
#: a text was cut): memory grows with the text, about 45 bytes per character at peak.
MAX_TEXT_CHARS = 4_000_000


def bounded_texts(texts: Sequence[str], limit: int | None = None) -> Sequence[str]:
    """``texts`` with any longer than ``limit`` characters (default :data:`MAX_TEXT_CHARS`) cut
    at the last space before it, each cut named in a warning."""
    import warnings

    from salience.text.languages import LanguageWarning

    limit = MAX_TEXT_CHARS if limit is None else limit
    if all(len(text) <= limit for text in texts):
        return texts
    out = list(texts)
    for d, text in enumerate(texts):
        if len(text) > limit:
            cut = text.rfind(" ", 0, limit)
            out[d] = text[: cut if cut > 0 else limit]
            warnings.warn(f"text {d} has {len(text):,} characters: keyphrases are taken from its first {len(out[d]):,} "
                          f"(memory is bounded by MAX_TEXT_CHARS = {limit:,})", LanguageWarning, stacklevel=4)
    return out


def _sentence_marks(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Which tokens end a clause: one of ``.!?;`` or its full-width form."""
    if not len(starts):
        return np.zeros(0, dtype=bool)
    marks = (lengths == 1) & _SENTENCE_END_BYTE[data[starts]]
    for t in np.flatnonzero((lengths == 3) & (data[starts] >= 0xE3)).tolist():
        a = int(starts[t])
        marks[t] = data[a : a + 3].tobytes() in _WIDE_SENTENCE_MARKS
    return marks


def _document_languages(texts, language, lowers, lower, doc) -> list[str]:
    """Each document's language code: given, or detected from its words (``"auto"``)."""
    from salience.text.languages import check_language, detect_from_tokens, resolve_language

    if isinstance(language, str):
        code = check_language(language)
        if code != "auto":
            return [code] * len(texts)
        return detect_from_tokens(lowers, lower, doc, len(texts), texts)
    if len(language) != len(texts):
        raise InvalidParameterError(f"language must be one code, 'auto', or one code per text; got {len(language)} "
                                    f"codes for {len(texts)} texts.")
    return [resolve_language(code) for code in language]


def _stem_and_stop(lowers: list[str], lower: np.ndarray, doc: np.ndarray, languages: list[str], fixed_stop):
    """Per word, its stem (numbered over the returned stems) and whether it is a stop word, in
    its document's language: each distinct (language, word) pair is stemmed and looked up once.
    Languages without a stop list (and undetermined ones) take each document's most frequent
    words as its stop words (:func:`salience.text.languages.frequent_words`)."""
    from salience.text.languages import LANGUAGES, frequent_words, stemmer_for, stopwords_for

    codes = list(dict.fromkeys(languages))
    code_index = {c: i for i, c in enumerate(codes)}
    doc_code = np.fromiter((code_index[c] for c in languages), dtype=np.int64, count=len(languages))
    n_lowers = max(len(lowers), 1)
    if len(codes) <= 1:
        pair = lower  # one language: a (language, word) pair is a word
        pair_lower, pair_code = np.arange(len(lowers)), np.zeros(len(lowers), dtype=np.int64)
    else:
        pair, pair_first = dense_ids(doc_code[doc] * n_lowers + lower, len(codes) * n_lowers)
        pair_lower, pair_code = lower[pair_first], doc_code[doc[pair_first]]
    stem_text: list[str] = [""] * len(pair_lower)
    pair_stop = np.zeros(len(pair_lower), dtype=bool)
    order = np.argsort(pair_code, kind="stable")
    bounds = np.searchsorted(pair_code[order], np.arange(len(codes) + 1)).tolist()
    for c, code in enumerate(codes):
        members = order[bounds[c] : bounds[c + 1]]
        # one language: its words are every distinct word, in order
        words = lowers if len(codes) == 1 else list(map(lowers.__getitem__, pair_lower[members].tolist()))
        stemmed = stem_words(stemmer_for(code), words)
        if len(codes) == 1:
            stem_text = stemmed  # one language: its members are every pair, in order
        else:
            for m, word in zip(members.tolist(), stemmed):
                stem_text[m] = word
        stop_list = fixed_stop if fixed_stop is not None else stopwords_for(code, purpose="keyphrases")
        pair_stop[members] = _flags(stop_list.__contains__, words)
    pair_stem, stems = number_strings(stem_text)
    stop = pair_stop[pair]
    if fixed_stop is None:
        fallback = [d for d, code in enumerate(languages) if code not in LANGUAGES or not LANGUAGES[code].has_stopwords]
        if fallback:
            doc_bounds = np.searchsorted(doc, np.arange(len(languages) + 1)).tolist()
            for d in fallback:
                lo, hi = doc_bounds[d], doc_bounds[d + 1]
                words, counts = np.unique(lower[lo:hi], return_counts=True)
                frequent = np.zeros(len(lowers), dtype=bool)
                frequent[words[frequent_words(counts)]] = True
                stop[lo:hi] = frequent[lower[lo:hi]]
    return pair_stem[pair], stems, stop


def _noun_phrases(data, starts, lengths, token_counts, position, tagger, content, breaks):
    """Content words and boundaries of ``ADJ* NOUN+`` phrases, from the tags of every token."""
    from salience.keywords.pos import ADJECTIVE, NOUN, get_tagger, tag_codes

    tokens = byte_strings(data, starts, lengths).split("\n")[:-1]
    bounds = np.concatenate(([0], np.cumsum(token_counts))).tolist()
    tags = tag_codes(get_tagger(tagger), [tokens[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])])[position]
    noun, adjective = tags == NOUN, tags == ADJECTIVE
    content = content & (noun | adjective)
    breaks = breaks.copy()
    breaks[1:] |= adjective[1:] & noun[:-1]
    # phrases of adjectives alone are not noun phrases
    previous = np.concatenate(([False], content[:-1]))
    phrase = np.cumsum(content & (breaks | ~previous)) - 1
    has_noun = np.bincount(phrase[content], noun[content], minlength=int(phrase[-1]) + 1 if len(phrase) else 0) > 0
    content[content] = has_noun[phrase[content]]
    return content, breaks

"""Candidate keyphrases: n-grams of content words bounded by stop words and punctuation.

Documents are read into tokens (words, with inner hyphens and apostrophes, and punctuation
marks). Runs of consecutive content words (not stop words, not numbers, at least two
characters) between boundaries are *phrases*; candidates are their n-grams up to
``max_words``. Candidates are keyed by their stemmed lower-case words, so inflections and
case variants merge (near-duplicates), each keeping its most frequent surface form.

Everything works on a :class:`Batch`, the words of many documents in flat arrays, so that a
corpus is tokenised and its candidates found with a handful of numpy operations rather than a
Python loop per word; :func:`analyze` and :func:`candidates` are the one-document views.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.sentences import CLAUSE_END_MARKS
from salience.text.stopwords import get_stopwords
from salience.text.hashing import dense_ids, distinct_sorted, group_spans, number_strings, stable_argsort
from salience.text.byte_tokens import IDEOGRAPHS, TOKEN_RULES, byte_strings, byte_token_ids, joined_word_tokens

__all__ = ["Batch", "Occurrences", "Document", "Candidate", "tokenize_batch", "occurrences", "analyze", "candidates"]

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
    language's list (its own most frequent words where it has none); any other value (a list
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
    breaks |= _unmarked_sentence_starts(types, lowers, data[byte_start[first]], type_lower, word_type, doc, breaks)
    words_per_doc = np.bincount(doc, minlength=len(texts))
    marks_per_doc = np.concatenate(([0], marks))[token_start[1:]] - marks_before_doc
    if tagger is not None:
        content, breaks = _noun_phrases(data, starts, lengths, token_counts, position, tagger, content, breaks)
    return Batch(types, lowers, stems, lower_chars, type_lower, word_type, stem, stop, doc, sentence, breaks,
                 content, np.concatenate(([0], np.cumsum(words_per_doc))),
                 np.where(words_per_doc > 0, marks_per_doc + 1, 0), data, byte_start, byte_length, first, languages)


def capital_initials(types: list[str], initial_bytes: np.ndarray) -> np.ndarray:
    """Which ``types`` begin with a capital letter, read from their first UTF-8 byte where it is
    ASCII and from the string otherwise."""
    capital = (initial_bytes >= ord("A")) & (initial_bytes <= ord("Z"))
    for t in np.flatnonzero(initial_bytes >= 0x80).tolist():
        capital[t] = types[t][0].isupper()
    return capital


def _unmarked_sentence_starts(types, lowers, initial_bytes, type_lower, word_type, doc, breaks) -> np.ndarray:
    """Words that open a sentence no mark ends, as when a title runs into its abstract: a
    capitalised word ("Opinion") right after a lower-case word, where the same document also
    writes it in lower case (so it is no name)."""
    first_upper = capital_initials(types, initial_bytes) & ~_flags(str.isupper, types)
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
    apostrophes = np.flatnonzero((data == 39) | ((data == 0xE2) & (np.roll(data, -1) == 0x80) & (np.roll(data, -2) == 0x99)))
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
        words = [lowers[w] for w in pair_lower[members].tolist()]
        stemmer = stemmer_for(code)
        for m, word in zip(members.tolist(), map(stemmer, words) if stemmer else words):
            stem_text[m] = word
        stop_list = fixed_stop if fixed_stop is not None else stopwords_for(code)
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


@dataclass
class Occurrences:
    """Candidate occurrences in a :class:`Batch`, ordered by (document, start, length).

    ``start`` and ``length`` are in words (``start`` indexes the batch's words); ``candidate``
    numbers the distinct (document, stems) keys in order of first occurrence, and
    ``cand_doc``, ``cand_first`` (index of the first occurrence), ``cand_frequency`` and
    ``cand_surface`` (an occurrence that shows the most frequent lower-case form, the shorter on
    ties, then the earlier) describe each candidate.
    """

    start: np.ndarray
    length: np.ndarray
    candidate: np.ndarray
    cand_doc: np.ndarray
    cand_first: np.ndarray
    cand_frequency: np.ndarray
    cand_surface: np.ndarray

    def __len__(self) -> int:
        return len(self.cand_doc)


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


def occurrences(batch: Batch, max_words: int | np.ndarray = 3, maximal: bool | np.ndarray = False,
                recurring: int = 0) -> Occurrences:
    """Find every candidate occurrence; ``max_words`` and ``maximal`` may differ per document.

    ``maximal=True`` keeps only whole content runs of at most ``max_words`` words (longer runs
    give their n-grams), as RAKE and noun-phrase chunkers do; ``False`` keeps every n-gram of
    up to ``max_words`` words of each run. ``recurring=n`` adds to whole runs their sub-phrases
    of up to ``n`` words that recur in two contexts or more (another whole phrase, or on their
    own): shorter concepts that longer phrases share.
    """
    max_words = np.broadcast_to(np.asarray(max_words, dtype=np.int64), (batch.n_docs,))
    maximal = np.broadcast_to(np.asarray(maximal, dtype=bool), (batch.n_docs,))
    if batch.n_docs and max_words.min() < 1:
        raise InvalidParameterError(f"max_words must be >= 1; got {int(max_words.min())}.")
    content = np.flatnonzero(batch.content)
    # a content word continues a run when the previous word is a content word with no boundary between
    continues = np.zeros(len(content), dtype=bool)
    continues[1:] = (np.diff(content) == 1) & ~batch.breaks[content[1:]] & (batch.sentence[content[1:]] == batch.sentence[content[:-1]])
    run = np.cumsum(~continues) - 1
    run_start = content[~continues]
    run_length = np.bincount(run, minlength=len(run_start))
    run_doc = batch.doc[run_start]
    whole = maximal[run_doc] & (run_length <= max_words[run_doc])
    starts, lengths = [run_start[whole]], [run_length[whole]]
    in_ngram_run = ~whole[run]
    remaining = run_length[run] - (content - run_start[run])
    word_max = max_words[batch.doc[content]]
    for n in range(1, int(max_words.max()) + 1 if batch.n_docs else 1):
        ok = in_ngram_run & (remaining >= n) & (word_max >= n)
        starts.append(content[ok])
        lengths.append(np.full(int(ok.sum()), n, dtype=np.int64))
    n_base = sum(len(x) for x in starts)
    parents = [np.full(n_base, -1)]
    if recurring:
        in_whole = whole[run]
        for n in range(1, recurring + 1):
            ok = in_whole & (remaining >= n) & (run_length[run] > n)
            starts.append(content[ok])
            lengths.append(np.full(int(ok.sum()), n, dtype=np.int64))
            parents.append(run_start[run[ok]])
    start, length = np.concatenate(starts), np.concatenate(lengths)
    parent = np.concatenate(parents)
    extra = np.arange(len(start)) >= n_base
    order = stable_argsort(start * (int(max_words.max()) + 1) + length) if len(start) else start
    start, length, extra, parent = start[order], length[order], extra[order], parent[order]
    doc = batch.doc[start]
    # candidates: occurrences grouped by (document, stemmed words)
    candidate, cand_first = group_spans(batch.stem, start, length, (doc,))
    if recurring and len(extra) and extra.any():
        # a sub-phrase counts when it is seen in two contexts or more: two different whole
        # phrases, or a phrase and on its own ("opinion mining" in "opinion mining services"
        # and "opinion mining applications")
        run_candidate = np.full(len(batch.doc), -1)
        run_candidate[start[~extra]] = candidate[~extra]  # a whole run starts where its run starts
        context = np.where(extra, run_candidate[np.maximum(parent, 0)], candidate)
        pairs = distinct_sorted(candidate * (len(cand_first) + 1) + context)
        contexts = np.bincount(pairs // (len(cand_first) + 1), minlength=len(cand_first))
        keep = ~extra | (contexts[candidate] >= 2)
        start, length, doc = start[keep], length[keep], doc[keep]
        candidate, cand_first = dense_ids(candidate[keep], len(cand_first))  # renumbered by first occurrence
    frequency = np.bincount(candidate, minlength=len(cand_first))
    # per candidate, the surface form seen most often, then the shorter, then the earlier; only
    # candidates seen more than once can have several
    cand_surface = cand_first.copy()
    repeated = np.flatnonzero(frequency[candidate] > 1)
    if len(repeated):
        surface, first = group_spans(batch.lower, start[repeated], length[repeated], (candidate[repeated],))
        surface_occurrence = repeated[first]
        surface_cand = candidate[surface_occurrence]
        chars = np.concatenate(([0], np.cumsum(batch.lower_chars[batch.lower])))
        surface_chars = chars[start[surface_occurrence] + length[surface_occurrence]] - chars[start[surface_occurrence]]
        best = np.lexsort((surface_occurrence, surface_chars, -np.bincount(surface), surface_cand))
        is_first = np.ones(len(best), dtype=bool)
        is_first[1:] = surface_cand[best[1:]] != surface_cand[best[:-1]]
        cand_surface[surface_cand[best[is_first]]] = surface_occurrence[best[is_first]]
    return Occurrences(start, length, candidate, doc[cand_first], cand_first, frequency, cand_surface)



def surface_texts(batch: Batch, occ: Occurrences, candidates: np.ndarray) -> list[str]:
    """The surface form of each of ``candidates`` (lower-case words joined by spaces)."""
    shown = occ.cand_surface[candidates]
    length = occ.length[shown]
    end = np.cumsum(length)
    words = np.arange(int(end[-1]) if len(end) else 0) + np.repeat(occ.start[shown] - (end - length), length)
    separator = np.full(len(words), ord(" "), dtype=np.uint8)
    separator[end - 1] = ord("\n")
    joined = byte_strings(batch.data, batch.byte_start[words], batch.byte_length[words], separator).lower()
    if not joined.isascii():
        joined = _IDEOGRAPH_SPACE.sub("", joined)  # ideographs are words, but written without spaces
    return joined.split("\n")[:-1]


@dataclass
class Candidate:
    key: tuple[str, ...]  # stemmed lower-case words
    surface: str  # most frequent surface form
    positions: list[int] = field(default_factory=list)  # word index of each occurrence
    sentences: list[int] = field(default_factory=list)

    @property
    def frequency(self) -> int:
        return len(self.positions)

    @property
    def first(self) -> int:
        return self.positions[0]


@dataclass
class Document:
    """One document's words, as lists (for the graph and topic scorers) over its :class:`Batch`."""

    batch: Batch
    words: list[str]  # original word tokens (punctuation removed)
    lower: list[str]
    stems: list[str]
    sentence: np.ndarray  # sentence number of each word
    content: np.ndarray  # bool: word may belong to a keyphrase
    breaks: np.ndarray  # bool: a boundary (punctuation) precedes word i
    n_sentences: int


def analyze(text: str, stopwords: Iterable[str] | str | None = "auto", tagger=None, language: str = "en") -> Document:
    """Tokenise ``text`` into words with sentence numbers, content flags and boundaries (see
    :func:`tokenize_batch` for ``stopwords``, ``tagger`` and ``language``)."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    b = tokenize_batch([text], stopwords, tagger, language)
    return Document(b, [b.types[t] for t in b.word_type], [b.lowers[w] for w in b.lower], [b.stems[s] for s in b.stem],
                    b.sentence, b.content, b.breaks, int(b.n_sentences[0]))


def candidates(doc: Document, max_words: int = 3, maximal: bool = False) -> dict[tuple[str, ...], Candidate]:
    """Candidates of one document keyed by stems, in order of first occurrence (see :func:`occurrences`)."""
    if max_words < 1:
        raise InvalidParameterError(f"max_words must be >= 1; got {max_words}.")
    b = doc.batch
    occ = occurrences(b, max_words, maximal)
    found: dict[tuple[str, ...], Candidate] = {}
    surfaces = surface_texts(b, occ, np.arange(len(occ)))
    for c, (s, n) in enumerate(zip(occ.start[occ.cand_first].tolist(), occ.length[occ.cand_first].tolist())):
        key = tuple(doc.stems[s : s + n])
        found[key] = Candidate(key, surfaces[c])
    keys = list(found)
    for start, cand in zip(occ.start.tolist(), occ.candidate.tolist()):
        entry = found[keys[cand]]
        entry.positions.append(start)
        entry.sentences.append(int(doc.sentence[start]))
    return found

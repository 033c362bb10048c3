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

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.stopwords import get_stopwords
from salience.text.tokenize import padded_byte_words

__all__ = ["Batch", "Occurrences", "Document", "Candidate", "tokenize_batch", "occurrences", "analyze", "candidates"]

_TOKEN = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")
_SENTENCE_END = frozenset(".!?;")
_WORD, _SENTENCE_MARK, _OTHER_MARK = 0, 1, 2


@dataclass
class Batch:
    """The words (punctuation removed) of ``n_docs`` documents, concatenated.

    Per word: ``word_type`` (index into ``types``, the distinct original spellings), ``lower``
    and ``stem`` (indexes into ``lowers`` and ``stems``), ``doc``, ``sentence`` (number within
    its document), ``breaks`` (a punctuation mark or the document start precedes it) and
    ``content`` (may belong to a keyphrase). ``doc_start[d]:doc_start[d + 1]`` are document
    ``d``'s words; ``n_sentences[d]`` its sentence count.
    """

    types: list[str]
    lowers: list[str]
    stems: list[str]
    lower_chars: np.ndarray  # length of each of lowers
    type_lower: np.ndarray
    type_stem: np.ndarray
    word_type: np.ndarray
    doc: np.ndarray
    sentence: np.ndarray
    breaks: np.ndarray
    content: np.ndarray
    doc_start: np.ndarray
    n_sentences: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.doc_start) - 1

    def __post_init__(self) -> None:
        self.lower = self.type_lower[self.word_type]  # per word: index into lowers
        self.stem = self.type_stem[self.word_type]  # per word: index into stems
        self.lower_list = self.lower.tolist()


def _index(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Number the distinct strings by first appearance: (number of each value, distinct values)."""
    distinct = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(distinct.__getitem__, values), dtype=np.int64, count=len(values)), list(distinct)


def _flags(predicate, values: list) -> np.ndarray:
    return np.fromiter(map(predicate, values), dtype=bool, count=len(values))


_WORD_START = re.compile(r"\w")
_STEMMER = None


def _stemmer():
    """Snowball English (the tokenizer's stemmer loader), loaded once."""
    global _STEMMER
    if _STEMMER is None:
        from salience.text.tokenize import _load_stemmer

        _STEMMER = _load_stemmer("english")
    return _STEMMER


_BYTE_WORD = np.zeros(256, dtype=bool)
_BYTE_WORD[[ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"]] = True
_BYTE_SPACE = np.zeros(256, dtype=bool)
_BYTE_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True  # str.isspace() in ASCII
_BYTE_JOIN = np.zeros(256, dtype=bool)
_BYTE_JOIN[[ord("-"), ord("'")]] = True


def _ascii_tokens(texts: Sequence[str]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The tokens of :data:`_TOKEN` for ASCII texts, found with array operations over their
    bytes: (token number by first appearance, distinct tokens, tokens per text). Words are runs
    of word bytes, a '-' or "'" between two word bytes joining them; every other non-space byte
    is a token of its own. Equal to the regex (tested)."""
    raw = "\n".join(texts).encode("ascii")
    data = np.frombuffer(raw, dtype=np.uint8)
    n = len(data)
    if n == 0:
        return np.zeros(0, dtype=np.int64), [], np.zeros(len(texts), dtype=np.int64)
    word = _BYTE_WORD[data]
    joined = word.copy()
    if n > 2:
        joined[1:-1] |= _BYTE_JOIN[data[1:-1]] & word[:-2] & word[2:]
    mark = ~joined & ~_BYTE_SPACE[data]
    run_start = joined.copy()
    run_start[1:] &= ~joined[:-1]
    run_end = joined.copy()
    run_end[:-1] &= ~joined[1:]
    starts = np.flatnonzero(run_start | mark)
    ends = np.flatnonzero(run_end | mark) + 1
    lengths = ends - starts
    # key each token by its bytes (two little-endian words, zero-padded) and its length
    w0, w1 = padded_byte_words(data, starts, lengths)
    long_tokens = np.flatnonzero(lengths > 16)
    width = lengths.astype(np.uint64)
    if len(long_tokens):  # longer tokens: number their distinct strings and key by that number
        long_ids, _ = _index([raw[starts[i] : ends[i]] for i in long_tokens.tolist()])
        w0[long_tokens] = long_ids.astype(np.uint64)
        w1[long_tokens] = np.uint64(2**64 - 1)
    with np.errstate(over="ignore"):
        key = w0 * np.uint64(0x9E3779B97F4A7C15) + w1 * np.uint64(0xC2B2AE3D27D4EB4F) + width * np.uint64(0x165667B19E3779F9)
    inverse, first = dense_ids(key)
    rep = first[inverse]
    if ((w0[rep] != w0) | (w1[rep] != w1) | (width[rep] != width)).any():  # a 64-bit collision: number exactly
        _, first, inverse = np.unique(np.stack([w0, w1, width], axis=1), axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty_like(by_first)
    renumber[by_first] = np.arange(len(by_first))
    firsts = first[by_first].tolist()
    vocab = [raw[starts[i] : ends[i]].decode("ascii") for i in firsts]
    text_starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))[:-1] + 1, out=text_starts[1:])
    counts = np.diff(np.append(np.searchsorted(starts, text_starts), len(starts)))
    return renumber[inverse], vocab, counts


def tokenize_batch(texts: Sequence[str], stopwords: Iterable[str] | str | None = "en_full") -> Batch:
    """Tokenise ``texts`` into one :class:`Batch`.

    Distinct tokens are classified once per batch (lower-cased, stemmed, checked against the
    stop list); every other step is an array operation over all words of all documents.
    """
    stop = get_stopwords(stopwords)
    all_tokens: list[str] = []
    token_counts = np.zeros(len(texts), dtype=np.int64)
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__} (document {d}).")
    if all(map(str.isascii, texts)):
        tokens, vocab, token_counts = _ascii_tokens(texts)
    else:
        for d, text in enumerate(texts):
            found = _TOKEN.findall(text)
            token_counts[d] = len(found)
            all_tokens.extend(found)
        tokens, vocab = _index(all_tokens)
    # classify each distinct token once, with C-level maps rather than a Python loop per token
    is_word = _flags(bool, list(map(_WORD_START.match, vocab)))
    kind = np.where(is_word, _WORD, np.where(_flags(_SENTENCE_END.__contains__, vocab), _SENTENCE_MARK, _OTHER_MARK))
    types = [t for t, w in zip(vocab, is_word.tolist()) if w]
    type_of_token = np.full(len(vocab), -1, dtype=np.int64)
    type_of_token[is_word] = np.arange(len(types))
    type_lower, lowers = _index(list(map(str.lower, types)))
    lower_stem, stems = _index(list(map(_stemmer(), lowers)))
    lower_chars = np.fromiter(map(len, lowers), dtype=np.int64, count=len(lowers))
    numeric = _flags(str.isdigit, [w.replace("-", "") for w in lowers])
    lower_content = (lower_chars > 1) & ~_flags(stop.__contains__, lowers) & ~numeric

    token_doc = np.repeat(np.arange(len(texts)), token_counts)
    token_kind = kind[tokens]
    # sentence number of each token within its document: sentence marks seen before it
    marks = np.cumsum(token_kind == _SENTENCE_MARK)
    token_start = np.concatenate(([0], np.cumsum(token_counts)))
    marks_before_doc = np.concatenate(([0], marks))[token_start[:-1]]
    position = np.flatnonzero(token_kind == _WORD)
    doc = token_doc[position]
    sentence = marks[position] - marks_before_doc[doc]
    # a boundary precedes a word when it opens its document or a mark lies between it and the last word
    breaks = np.ones(len(position), dtype=bool)
    breaks[1:] = (np.diff(position) > 1) | (doc[1:] != doc[:-1])
    word_type = type_of_token[tokens[position]]
    words_per_doc = np.bincount(doc, minlength=len(texts))
    marks_per_doc = np.concatenate(([0], marks))[token_start[1:]] - marks_before_doc
    type_stem = lower_stem[type_lower]
    return Batch(types, lowers, stems, lower_chars, type_lower, type_stem, word_type, doc, sentence, breaks,
                 lower_content[type_lower[word_type]], np.concatenate(([0], np.cumsum(words_per_doc))),
                 np.where(words_per_doc > 0, marks_per_doc + 1, 0))


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


def dense_ids(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct values of an integer array in sorted order: (id of each element, index
    of each id's first element). A stable argsort: several times faster than ``np.unique`` here."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    new = np.ones(len(ordered), dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    ids = np.empty(len(ordered), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, order[new]


def count_distinct(codes: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted."""
    ordered = np.sort(codes)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def _group_rows(columns: list[np.ndarray], bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Group identical rows of integer ``columns`` with values in [0, bound): (group of each row,
    numbered by first appearance; first row of each group). Columns are folded in one at a
    time, each fold renumbering (group so far, next value) pairs densely: codes never overflow."""
    group = np.zeros(len(columns[0]), dtype=np.int64)
    first = np.zeros(min(1, len(group)), dtype=np.int64)
    for column in columns:
        group, first = dense_ids(group * bound + column)
    order = np.argsort(first, kind="stable")
    renumber = np.empty_like(order)
    renumber[order] = np.arange(len(order))
    return renumber[group], first[order]


def _padded(values: np.ndarray, start: np.ndarray, length: np.ndarray, width: int, pad) -> np.ndarray:
    """Row i holds values[start[i] : start[i] + length[i]], padded with ``pad`` to ``width``."""
    offsets = np.arange(width)
    inside = offsets[None, :] < length[:, None]
    index = np.where(inside, start[:, None] + offsets[None, :], 0)
    return np.where(inside, values[index] if len(values) else pad, pad)


def occurrences(batch: Batch, max_words: int | np.ndarray = 3, maximal: bool | np.ndarray = False) -> Occurrences:
    """Find every candidate occurrence; ``max_words`` and ``maximal`` may differ per document.

    ``maximal=True`` keeps only whole content runs of at most ``max_words`` words (longer runs
    give their n-grams), as RAKE and noun-phrase chunkers do; ``False`` keeps every n-gram of
    up to ``max_words`` words of each run.
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
    start, length = np.concatenate(starts), np.concatenate(lengths)
    order = np.lexsort((length, start))
    start, length = start[order], length[order]
    width = int(length.max()) if len(length) else 1
    doc = batch.doc[start]
    lower = batch.lower
    # group occurrences by surface (document, lower-case words), then surfaces by stems
    bound = max(batch.n_docs, len(batch.lowers) + 1)
    surface, surface_first = _group_rows([doc, *_padded(lower + 1, start, length, width, 0).T], bound)
    start_s, length_s = start[surface_first], length[surface_first]
    stems = _padded(batch.stem + 1, start_s, length_s, width, 0)
    surface_cand, first_surface = _group_rows([doc[surface_first], *stems.T], max(batch.n_docs, len(batch.stems) + 1))
    candidate, cand_first = surface_cand[surface], surface_first[first_surface]
    # choose per candidate the surface form seen most often, then the shorter, then the earlier
    surface_count = np.bincount(surface, minlength=len(surface_first))
    lower_chars = batch.lower_chars
    surface_chars = _padded(lower_chars[lower] if len(lower) else lower, start_s, length_s, width, 0).sum(axis=1)
    best = np.lexsort((surface_first, surface_chars, -surface_count, surface_cand))
    is_first = np.ones(len(best), dtype=bool)
    is_first[1:] = surface_cand[best[1:]] != surface_cand[best[:-1]]
    cand_surface = np.empty(len(cand_first), dtype=np.int64)
    cand_surface[surface_cand[best[is_first]]] = surface_first[best[is_first]]
    return Occurrences(start, length, candidate, doc[cand_first], cand_first,
                       np.bincount(candidate, minlength=len(cand_first)), cand_surface)


def surface_texts(batch: Batch, occ: Occurrences, candidates: np.ndarray) -> list[str]:
    """The surface form of each of ``candidates`` (lower-case words joined by spaces)."""
    shown = occ.cand_surface[candidates]
    lowers, words = batch.lowers, batch.lower_list
    return [" ".join(map(lowers.__getitem__, words[s : s + n]))
            for s, n in zip(occ.start[shown].tolist(), occ.length[shown].tolist())]


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


def analyze(text: str, stopwords: Iterable[str] | str | None = "en_full") -> Document:
    """Tokenise ``text`` into words with sentence numbers, content flags and boundaries."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    b = tokenize_batch([text], stopwords)
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

"""Candidate keyphrases: n-grams of content words bounded by stop words and punctuation.

Documents are read into tokens (words, with inner hyphens and apostrophes, and punctuation
marks). Runs of consecutive content words (not stop words, not numbers, at least two
characters) between boundaries are *phrases*; candidates are their n-grams up to
``max_words``. Candidates are keyed by their stemmed lower-case words, so inflections and
case variants merge (near-duplicates), each keeping its most frequent surface form.

Everything works on a :class:`~salience.keywords.words.Batch`, the words of many documents in
flat arrays (:mod:`salience.keywords.words`), so that a corpus's candidates are found with a
handful of numpy operations rather than a Python loop per word; :func:`analyze` and
:func:`candidates` are the one-document views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.hashing import dense_ids, distinct_sorted, group_spans, stable_argsort
from salience.text.byte_tokens import byte_strings
from salience.keywords.words import _IDEOGRAPH_SPACE, Batch, tokenize_batch

__all__ = ["Batch", "Occurrences", "Document", "Candidate", "tokenize_batch", "content_runs", "occurrences", "analyze",
           "documents", "candidates", "text_candidates", "first_occurrence_values"]


@dataclass
class Occurrences:
    """Candidate occurrences in a :class:`Batch`, ordered by (document, start, length).

    ``start`` and ``length`` are in words (``start`` indexes the batch's words); ``candidate``
    numbers the distinct (document, stems) keys in order of first occurrence, and
    ``cand_doc``, ``cand_first`` (index of the first occurrence), ``cand_frequency`` and
    ``cand_surface`` (an occurrence that shows the most frequent lower-case form, the shorter on
    ties, then the earlier) describe each candidate. ``base`` marks the occurrences found as
    whole runs or n-grams, not added as a recurring sub-phrase (see :func:`occurrences`).
    """

    start: np.ndarray
    length: np.ndarray
    candidate: np.ndarray
    cand_doc: np.ndarray
    cand_first: np.ndarray
    cand_frequency: np.ndarray
    cand_surface: np.ndarray
    base: np.ndarray

    def __len__(self) -> int:
        return len(self.cand_doc)


def first_occurrence_values(occ: Occurrences, word: np.ndarray, value: np.ndarray):
    """The per-word ``value`` along each candidate's first occurrence, word by word: yields
    (the candidates that reach this word, their word's value), first ``slice(None)`` and every
    candidate's first word, then each later position for the candidates long enough. ``word``
    numbers the batch's words as ``value`` is indexed. A method folds them in the words' order
    (a sum, a product), as a loop over each candidate's words would."""
    first = occ.cand_first
    start, length = occ.start[first], occ.length[first]
    yield slice(None), value[word[start]]
    for offset in range(1, int(length.max()) if len(length) else 0):
        longer = np.flatnonzero(length > offset)
        yield longer, value[word[start[longer] + offset]]


def content_runs(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The maximal runs of content words (RAKE's phrases): (the content words' indexes, the run
    of each, each run's first word, each run's length). A run ends at a boundary (punctuation,
    a document's start) or a sentence's end."""
    content = np.flatnonzero(batch.content)
    # a content word continues a run when the previous word is a content word with no boundary between
    continues = np.zeros(len(content), dtype=bool)
    continues[1:] = (np.diff(content) == 1) & ~batch.breaks[content[1:]] & (batch.sentence[content[1:]] == batch.sentence[content[:-1]])
    run = np.cumsum(~continues) - 1
    run_start = content[~continues]
    return content, run, run_start, np.bincount(run, minlength=len(run_start))


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
    content, run, run_start, run_length = content_runs(batch)
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
        start, length, doc, extra = start[keep], length[keep], doc[keep], extra[keep]
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
    return Occurrences(start, length, candidate, doc[cand_first], cand_first, frequency, cand_surface, ~extra)



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
    return documents(tokenize_batch([text], stopwords, tagger, language))[0]


def documents(batch: Batch) -> list[Document]:
    """Each text of ``batch`` as a :class:`Document` (its words as lists, its arrays as views)."""
    words = list(map(batch.types.__getitem__, batch.word_type.tolist()))
    lower = list(map(batch.lowers.__getitem__, batch.lower.tolist()))
    stems = list(map(batch.stems.__getitem__, batch.stem.tolist()))
    bounds = batch.doc_start.tolist()
    return [Document(batch, words[lo:hi], lower[lo:hi], stems[lo:hi], batch.sentence[lo:hi], batch.content[lo:hi],
                     batch.breaks[lo:hi], int(batch.n_sentences[d]))
            for d, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]


def candidates(doc: Document, max_words: int = 3, maximal: bool = False) -> dict[tuple[str, ...], Candidate]:
    """Candidates of one document (analysed alone: :func:`analyze`) keyed by stems, in order of
    first occurrence (see :func:`occurrences`)."""
    if max_words < 1:
        raise InvalidParameterError(f"max_words must be >= 1; got {max_words}.")
    if doc.batch.n_docs != 1:
        raise InvalidParameterError("candidates() reads a document analysed alone; for a batch use text_candidates().")
    return text_candidates(doc.batch, occurrences(doc.batch, max_words, maximal))[0]


def text_candidates(batch: Batch, occ: Occurrences) -> list[dict[tuple[str, ...], Candidate]]:
    """Each text's candidates keyed by stems, in order of first occurrence, with the word index
    (within its text) and sentence of each occurrence."""
    found: list[dict[tuple[str, ...], Candidate]] = [{} for _ in range(batch.n_docs)]
    n = len(occ)
    if n == 0:
        return found
    surfaces = surface_texts(batch, occ, np.arange(n))
    word_stems = list(map(batch.stems.__getitem__, batch.stem.tolist()))
    # each candidate's occurrences together, in the order they occur
    order = stable_argsort(occ.candidate, n)
    positions = (occ.start - batch.doc_start[batch.doc[occ.start]])[order].tolist()
    sentences = batch.sentence[occ.start][order].tolist()
    bounds = np.concatenate(([0], np.cumsum(np.bincount(occ.candidate, minlength=n)))).tolist()
    first = occ.cand_first
    for c, (d, s, m) in enumerate(zip(occ.cand_doc.tolist(), occ.start[first].tolist(), occ.length[first].tolist())):
        key = tuple(word_stems[s : s + m])
        lo, hi = bounds[c], bounds[c + 1]
        found[d][key] = Candidate(key, surfaces[c], positions[lo:hi], sentences[lo:hi])
    return found

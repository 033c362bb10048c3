"""Document frequencies of keyphrase candidates (``tfidf``'s :class:`DocumentFrequency`, YAKE's
:class:`CorpusFrequency`), and finding the candidates of many texts at once."""

from __future__ import annotations

import json
import math
from itertools import islice, repeat
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from salience.exceptions import InputFormatError, InvalidParameterError
from salience.core.scores import Scores
from salience.keywords.candidates import Occurrences, first_occurrence_values, occurrences, surface_texts
from salience.keywords.words import Batch, tokenize_batch
from salience.text.hashing import distinct_sorted, group_spans, stable_argsort, string_hashes
from salience.text.languages import check_language, warn_fallbacks

__all__ = ["DocumentFrequency", "CorpusFrequency", "candidate_keys", "candidate_stems", "batch_candidates",
           "ranked_per_text", "ranks_per_text", "text_batches", "one_batch", "LONG_TEXT_WORDS", "BATCH_CHARS"]

#: texts with more words than this are "long": their candidates are n-grams of up to three
#: words, whose counts are reliable; shorter texts use whole content runs of up to eight words
#: (every method's ``long_text_words``)
LONG_TEXT_WORDS = 1000
#: texts tokenised together by the keyword methods (every method's ``batch_size`` but yake's)
BATCH_SIZE = 2000
#: characters tokenised together at most: a batch closes at ``batch_size`` texts or before the
#: text that would take it past this many characters (at about 45 bytes a character at peak,
#: some 360 MB), so that memory is bounded however long the texts
BATCH_CHARS = 8_000_000


def text_batches(texts: Iterable[str], batch_size: int, max_chars: int | None = None) -> Iterator[list[str]]:
    """Consecutive batches of ``texts`` (any iterable, read as it goes): at most ``batch_size``
    texts and, past a batch's first text, ``max_chars`` characters (:data:`BATCH_CHARS`)."""
    max_chars = BATCH_CHARS if max_chars is None else max_chars
    chunk: list[str] = []
    chars = 0
    for text in texts:
        size = len(text) if isinstance(text, str) else 0  # the tokenizer names a text that is not a str
        if chunk and (len(chunk) >= batch_size or chars + size > max_chars):
            yield chunk
            chunk, chars = [], 0
        chunk.append(text)
        chars += size
    if chunk:
        yield chunk


def one_batch(texts: Sequence[str], batch_size: int) -> bool:
    """Whether :func:`text_batches` reads ``texts`` as one batch (its rule, not a copy of it)."""
    return sum(1 for _ in islice(text_batches(texts, batch_size), 2)) <= 1


class DocumentFrequency:
    """Candidate document frequencies over a corpus, for ``tfidf``. Save and load as JSON.
    ``language``: as in :func:`score_candidates` (texts this short need it given: three words
    tell no language).

    >>> df = DocumentFrequency(language="en").fit(["neural networks learn", "neural networks", "graphs"])
    >>> df.n_docs, df.df[("neural", "network")]
    (3, 2)
    """

    def __init__(self, max_words: int = 3, stopwords: str = "auto", language: str = "auto"):
        self.max_words = max_words
        self.stopwords = stopwords
        self.language = check_language(language)
        self.n_docs = 0
        self.df: dict[tuple[str, ...], int] = {}

    def fit(self, texts: Iterable[str], batch_size: int = BATCH_SIZE) -> "DocumentFrequency":
        """Count the n-grams of up to ``max_words`` content words of each of ``texts`` (read
        ``batch_size`` at a time, :func:`text_batches`): the texts containing each, keyed by their
        stems."""
        if isinstance(texts, str):
            raise InvalidParameterError("texts must be a sequence of str, not one str.")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be a positive integer; got {batch_size!r}.")
        for chunk in text_batches(texts, batch_size):
            self._add(chunk)
        return self

    def _add(self, texts: list[str]) -> None:
        batch = tokenize_batch(texts, self.stopwords, language=self.language)
        occ = occurrences(batch, self.max_words)
        # a candidate is one text's (stems): each counts one text for its stems
        key, keys = candidate_stems(batch, occ)
        df = self.df
        for stems, n_texts in zip(keys, np.bincount(key, minlength=len(keys)).tolist()):
            df[stems] = df.get(stems, 0) + n_texts
        self.n_docs += len(texts)

    def candidate_counts(self, batch: Batch, occ: Occurrences) -> np.ndarray:
        """How many of the fitted texts hold each candidate of ``batch`` (by its stems)."""
        key, keys = candidate_stems(batch, occ)
        return np.fromiter(map(self.df.get, keys, repeat(0)), dtype=np.int64, count=len(keys))[key]

    def idf(self, key: tuple[str, ...]) -> float:
        return self.idf_of_count(self.df.get(key, 0))

    def idf_of_count(self, count: int) -> float:
        """The idf of a candidate that ``count`` of the texts hold (smoothed, as scikit-learn)."""
        return math.log((self.n_docs + 1) / (count + 1)) + 1.0

    def save(self, path: str | Path) -> None:
        from salience.io.files import atomic_write_text

        payload = {"format": "salience.document-frequency", "version": 1, "n_docs": self.n_docs,
                   "max_words": self.max_words, "language": self.language,
                   "stopwords": sorted(self.stopwords) if isinstance(self.stopwords, (set, frozenset)) else self.stopwords,
                   "df": {" ".join(k): v for k, v in self.df.items()}}
        atomic_write_text(path, json.dumps(payload))

    @classmethod
    def load(cls, path: str | Path) -> "DocumentFrequency":
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
            model = cls(payload["max_words"], payload["stopwords"], payload.get("language", "en"))
            model.n_docs = int(payload["n_docs"])
            model.df = {tuple(k.split(" ")): int(v) for k, v in payload["df"].items()}
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise InputFormatError(f"{path}: not a salience document-frequency model ({err}).") from None
        return model


def tagger_for(candidates_from: str, tagger):
    """The tagger that tokenising needs: noun phrases tag words (the default spaCy pipeline
    unless ``tagger`` names another or is a callable); the other sources do not."""
    from salience.keywords.pos import get_tagger

    return get_tagger(tagger) if candidates_from == "noun_phrases" else None


def batch_candidates(texts: Sequence[str], candidates_from: str, tagger=None, language: str = "auto",
                     long_text_words: int = LONG_TEXT_WORDS, stopwords="auto",
                     recurring: int = 3) -> tuple[Batch, Occurrences, np.ndarray]:
    """Tokenise ``texts`` in their language and find their candidates: runs of up to 8 words
    in short texts, with their sub-phrases of up to ``recurring`` words that recur in two
    contexts; n-grams of up to 3 words in texts of more than ``long_text_words`` words (or as
    ``candidates_from`` says)."""
    batch = tokenize_batch(texts, stopwords, tagger=tagger_for(candidates_from, tagger), language=language)
    warn_fallbacks(batch.languages, stacklevel=4)
    long_doc = np.diff(batch.doc_start) > long_text_words
    ngrams = long_doc if candidates_from in ("auto", "noun_phrases") else np.full(len(texts), candidates_from == "ngrams")
    return batch, occurrences(batch, np.where(ngrams, 3, 8), ~ngrams, recurring=recurring), long_doc


def _order_per_text(values: np.ndarray, cand_doc: np.ndarray, n_texts: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates grouped by text, each text's best first (ties in order of first
    occurrence, as candidates are numbered by text, then first occurrence), and where each
    text's group starts."""
    # one packed sort by (text, rank of the value) instead of a stable sort of the floats (a few
    # times slower) and a second by text; equal values share a rank, so ties keep their order
    descending = np.argsort(-values)  # need not be stable: equal values get one rank
    ordered = values[descending]
    new_value = np.ones(len(values), dtype=bool)
    new_value[1:] = ordered[1:] != ordered[:-1]
    rank = np.empty(len(values), dtype=np.int64)
    rank[descending] = np.cumsum(new_value) - 1
    n_ranks = int(rank.max()) + 1 if len(rank) else 1
    order = stable_argsort(cand_doc * n_ranks + rank, n_texts * n_ranks)
    return order, np.searchsorted(cand_doc[order], np.arange(n_texts + 1))


def ranks_per_text(values: np.ndarray, cand_doc: np.ndarray, n_texts: int) -> np.ndarray:
    """Each candidate's 1-based rank within its text by ``values`` (higher first), ties in order
    of first occurrence, as :func:`ranked_per_text` orders them."""
    order, doc_first = _order_per_text(values, cand_doc, n_texts)
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1) - doc_first[cand_doc[order]]
    return rank


def ranked_per_text(batch: Batch, occ: Occurrences, values: np.ndarray, k: int | None, n_texts: int) -> list[Scores]:
    """Each text's candidates as :class:`Scores` (higher ``values`` better): its ``k`` best by
    value, ties in order of first occurrence as :meth:`Scores.top_k` breaks them, or all of
    them in order of first occurrence (``k`` None)."""
    order, doc_first = _order_per_text(values, occ.cand_doc, n_texts)
    if k is None:
        chosen, bounds = np.arange(len(values)), doc_first
    else:
        rank = np.arange(len(order)) - doc_first[occ.cand_doc[order]]
        chosen = order[rank < k]
        bounds = np.concatenate(([0], np.cumsum(np.minimum(np.diff(doc_first), k))))
    ids = surface_texts(batch, occ, chosen)
    chosen_values = values[chosen]
    bounds = bounds.tolist()
    return [Scores.unchecked(chosen_values[lo:hi], ids[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def candidate_keys(batch: Batch, occ: Occurrences) -> np.ndarray:
    """A 64-bit key per candidate from its stems, the same in every batch and process (each
    distinct stem hashed once, the words combined as a polynomial), for counting document
    frequencies over texts that are tokenised in several batches."""
    along = first_occurrence_values(occ, batch.stem, string_hashes(batch.stems))
    key = next(along)[1]
    with np.errstate(over="ignore"):
        for longer, term in along:
            key[longer] = key[longer] * np.uint64(1_000_003) + term
    return key


def candidate_stems(batch: Batch, occ: Occurrences) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """The stemmed words of each candidate as a tuple (:class:`DocumentFrequency`'s keys):
    (the number of each candidate's tuple, the distinct tuples in order of first appearance).
    The texts' candidates that share their stems share a tuple, made once."""
    first = occ.cand_first
    start, length = occ.start[first], occ.length[first]
    key, key_first = group_spans(batch.stem, start, length)
    start, length = start[key_first], length[key_first]
    keys: list = [None] * len(key_first)
    stems = batch.stems
    for n in np.unique(length).tolist():
        # the tuples of n words, zipped from their words' stems column by column
        these = np.flatnonzero(length == n)
        columns = [list(map(stems.__getitem__, batch.stem[start[these] + offset].tolist())) for offset in range(n)]
        for k, stem_tuple in zip(these.tolist(), zip(*columns)):
            keys[k] = stem_tuple
    return key, keys


def check_languages(language, n_texts: int):
    """``language`` checked: ``"auto"`` or a code (returned as a str), or one per text (a list)."""
    from salience.text.languages import resolve_language

    if isinstance(language, str):
        return check_language(language)
    if not isinstance(language, Sequence) or len(language) != n_texts:
        raise InvalidParameterError(f"language must be 'auto', an ISO 639-1 code, or one code per text; got "
                                    f"{type(language).__name__} for {n_texts} texts.")
    return [resolve_language(code) for code in language]


def chunk_languages(language, lo: int, n: int):
    return language if isinstance(language, str) else language[lo : lo + n]


def texts_with_candidates(occ: Occurrences) -> int:
    return len(distinct_sorted(occ.cand_doc))


class CorpusFrequency:
    """Document frequencies of YAKE's candidates over a corpus, for ``corpus_df``: built from
    the texts given together, or fitted once (:meth:`fit`, as
    :meth:`KeyphraseExtractor.fit` does) and applied to texts scored later.

    >>> corpus = CorpusFrequency().fit(["Graph kernels. Proposed method.", "Sensor data. Proposed method."], language="en")
    >>> corpus.n_docs, int(corpus.counts.max())
    (2, 2)
    """

    def __init__(self):
        self.n_docs = 0
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.counts = np.zeros(0, dtype=np.int64)

    def fit(self, texts: Iterable[str], *, candidates_from: str = "auto", tagger=None, language: str = "auto",
            batch_size: int = BATCH_SIZE, long_text_words: int = LONG_TEXT_WORDS, stopwords="auto") -> "CorpusFrequency":
        """Count the candidates of ``texts`` (as ``extract_keyphrases_batch`` would find them)."""
        texts = list(texts)
        language = check_languages(language, len(texts))
        lo = 0
        for chunk in text_batches(texts, batch_size):
            batch, occ, _ = batch_candidates(chunk, candidates_from, tagger, chunk_languages(language, lo, len(chunk)),
                                             long_text_words, stopwords)
            self.add(candidate_keys(batch, occ), texts_with_candidates(occ))
            lo += len(chunk)
        return self

    def add(self, keys: np.ndarray, n_docs: int) -> "CorpusFrequency":
        """Count the candidates of ``n_docs`` more texts (a candidate is unique within its text,
        so each key counts one text). Texts without candidates (empty ones) are not counted."""
        all_keys = np.concatenate((self.keys, keys))
        weights = np.concatenate((self.counts, np.ones(len(keys), dtype=np.int64)))
        self.keys, index = np.unique(all_keys, return_inverse=True)
        self.counts = np.bincount(index.ravel(), weights, len(self.keys)).astype(np.int64)
        self.n_docs += n_docs
        return self

    def idf(self, keys: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.ones(len(keys))
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        df = np.where(self.keys[at] == keys, self.counts[at], 0)
        return np.log((self.n_docs + 1) / (df + 1.0)) + 1.0

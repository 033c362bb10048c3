"""Candidate keyphrases: n-grams of content words bounded by stop words and punctuation.

A document is read once into tokens (words, with inner hyphens and apostrophes, and
punctuation marks). Runs of consecutive content words (not stop words, not numbers, at least
two characters) between boundaries are *phrases*; candidates are their n-grams up to
``max_words``. Candidates are keyed by their stemmed lower-case words, so inflections and
case variants merge (near-duplicates), each keeping its most frequent surface form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.stopwords import get_stopwords

__all__ = ["Document", "Candidate", "analyze", "candidates"]

_TOKEN = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")
_SENTENCE_END = frozenset(".!?;")


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
    words: list[str]  # original word tokens (punctuation removed)
    lower: list[str]
    stems: list[str]
    sentence: np.ndarray  # sentence number of each word
    content: np.ndarray  # bool: word may belong to a keyphrase
    breaks: np.ndarray  # bool: a boundary (punctuation) precedes word i
    n_sentences: int


_STEM_CACHE: dict[str, str] = {}
_STEMMER = None


def _stem(word: str) -> str:
    """Snowball English stem, cached per word (the tokenizer's stemmer loader)."""
    global _STEMMER
    stem = _STEM_CACHE.get(word)
    if stem is None:
        if _STEMMER is None:
            from salience.text.tokenize import _load_stemmer

            _STEMMER = _load_stemmer("english")
        stem = _STEM_CACHE[word] = _STEMMER(word)
    return stem


def analyze(text: str, stopwords: Iterable[str] | str | None = "en_full") -> Document:
    """Tokenise ``text`` into words with sentence numbers, content flags and boundaries."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    stop = get_stopwords(stopwords)
    words: list[str] = []
    sentence: list[int] = []
    breaks: list[bool] = []
    current, pending_break = 0, True
    for token in _TOKEN.findall(text):
        if token[0].isalnum() or token[0] == "_":
            words.append(token)
            sentence.append(current)
            breaks.append(pending_break)
            pending_break = False
        else:
            pending_break = True
            if token in _SENTENCE_END:
                current += 1
    lower = [w.lower() for w in words]
    stems = [_stem(w) for w in lower]
    content = np.fromiter(
        (len(w) > 1 and w not in stop and not w.replace("-", "").isdigit() for w in lower), dtype=bool, count=len(lower)
    )
    return Document(words, lower, stems, np.asarray(sentence, dtype=np.int64), content,
                    np.asarray(breaks, dtype=bool), (current + 1) if words else 0)


def candidates(doc: Document, max_words: int = 3, maximal: bool = False) -> dict[tuple[str, ...], Candidate]:
    """Candidates keyed by stems, in order of first occurrence.

    ``maximal=True`` keeps only whole content runs of at most ``max_words`` words (longer runs
    give their n-grams), as RAKE and noun-phrase chunkers do; ``False`` keeps every n-gram of
    up to ``max_words`` words of each run.
    """
    if max_words < 1:
        raise InvalidParameterError(f"max_words must be >= 1; got {max_words}.")
    found: dict[tuple[str, ...], Candidate] = {}
    surfaces: dict[tuple[str, ...], dict[str, int]] = {}
    n = len(doc.words)
    content, breaks, sentence = doc.content, doc.breaks, doc.sentence

    def add(i: int, j: int) -> None:
        key = tuple(doc.stems[i:j])
        cand = found.get(key)
        if cand is None:
            cand = found[key] = Candidate(key, "")
            surfaces[key] = {}
        cand.positions.append(i)
        cand.sentences.append(int(sentence[i]))
        form = " ".join(doc.lower[i:j])
        surfaces[key][form] = surfaces[key].get(form, 0) + 1

    start = 0
    while start < n:
        if not content[start]:
            start += 1
            continue
        end = start + 1
        while end < n and content[end] and not breaks[end] and sentence[end] == sentence[start]:
            end += 1
        if maximal and end - start <= max_words:
            add(start, end)
        else:
            for i in range(start, end):
                for j in range(i + 1, min(end, i + max_words) + 1):
                    add(i, j)
        start = end
    for key, cand in found.items():
        forms = surfaces[key]
        cand.surface = max(forms, key=lambda f: (forms[f], -len(f)))
    return found

"""What the costly keyphrase judges (``samrank``, ``promptrank``, ``mderank``) share.

* The cascade: a cheap method (``pool_method``, YAKE by default) ranks every candidate of a
  text and the judge scores its best ``pool`` only, so that a model's cost grows with the
  pool, not with the text's candidates.
* Where each pooled phrase occurs among the text's words (matched by stems, so case and
  inflection variants are one phrase), and which words a model's tokens cover.
* The language model a name loads (``"smollm2"``, ``"gemma3"``, a folder or a ``.gguf``
  file; :func:`~salience.models.load_causal_lm`), loaded once per process.
* The text a model reads: at most ``max_tokens`` tokens at a time. A longer text is read as
  its first window(s) only (the judges' docstrings say how many): a document's head (title,
  abstract, introduction) holds most of its keyphrases, and a text of any length then costs
  the same bounded time and memory.
"""

from __future__ import annotations

import abc
import threading
import time
from typing import Sequence

import numpy as np

from salience.core.base import create, method_names
from salience.core.params import Check, Exempt, Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.keywords.extract import KeyphraseExtractor
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS, tagger_for
from salience.keywords.words import Batch, tokenize_batch
from salience.text.languages import check_language

__all__ = ["JudgedKeyphrases", "LanguageModelJudge", "phrase_starts", "phrase_sums", "token_words", "language_model",
           "CHARS_PER_TOKEN"]

# a text is cut to this many characters per token a model may read before it is tokenised (an
# upper bound on the characters a token covers in practice), so a huge text is never tokenised whole
CHARS_PER_TOKEN = 16

_MODELS: dict[str, tuple] = {}
_MODELS_LOCK = threading.Lock()


def _is_cheap_method(name) -> bool:
    from salience.core.base import _method

    return (isinstance(name, str) and name in method_names("keywords")
            and not getattr(_method("keywords", name).factory, "costly", False))


def language_model(model, tokenizer=None) -> tuple:
    """``(model, tokenizer)``: a name or path loaded once per process, or the model given with
    its tokenizer."""
    if isinstance(model, str):
        with _MODELS_LOCK:
            if model not in _MODELS:
                from salience.models.lm import load_causal_lm

                _MODELS[model] = load_causal_lm(model)
            return _MODELS[model]
    if tokenizer is None:
        raise InvalidParameterError("a model object needs its tokenizer: pass tokenizer=, or give the model by name "
                                    "('smollm2', a folder or a .gguf file).")
    return model, tokenizer


def phrase_starts(batch: Batch, phrases: Sequence[str]) -> tuple[list[np.ndarray], list[int]]:
    """The word index of each occurrence of each phrase in the one text of ``batch`` (the
    phrase's words, stemmed as the text stems them, matched in sequence within a sentence and
    with no punctuation inside), and each phrase's length in words. A phrase's words are read
    as the text's own (the phrases are the text's candidates); a word the text does not hold
    matches nothing."""
    stem_of: dict[str, str] = {}
    for lower, stem in zip(batch.lower.tolist(), batch.stem.tolist()):
        stem_of.setdefault(batch.lowers[lower], batch.stems[stem])
    stems = [batch.stems[s] for s in batch.stem.tolist()]
    keys = [tuple(stem_of.get(w, "\0" + w) for w in phrase.lower().split()) for phrase in phrases]
    found: dict[tuple[str, ...], list[int]] = {key: [] for key in keys}
    breaks, sentence = batch.breaks, batch.sentence
    for n in sorted({len(k) for k in keys if k}):
        for i in range(len(stems) - n + 1):
            key = tuple(stems[i : i + n])
            if key in found and (n == 1 or (not breaks[i + 1 : i + n].any() and sentence[i + n - 1] == sentence[i])):
                found[key].append(i)
    return [np.asarray(found[k], dtype=np.int64) for k in keys], [len(k) for k in keys]


def phrase_sums(batch: Batch, phrases: Sequence[str], word_scores: np.ndarray) -> np.ndarray:
    """Each phrase's score: its words' scores summed over every occurrence."""
    starts, lengths = phrase_starts(batch, phrases)
    cumulative = np.concatenate([[0.0], np.cumsum(word_scores)])
    return np.array([float((cumulative[s + n] - cumulative[s]).sum()) if n else 0.0 for s, n in zip(starts, lengths)])


def _byte_offsets(text: str) -> np.ndarray:
    """The UTF-8 byte offset of each character of ``text`` and of its end."""
    if text.isascii():
        return np.arange(len(text) + 1)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    sizes = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    return np.concatenate([[0], np.cumsum(sizes)])


def token_words(batch: Batch, text: str, char_spans: np.ndarray) -> np.ndarray:
    """For each model token (its ``(start, end)`` characters in ``text``, ``text`` being the one
    text of ``batch`` or its head), the word it overlaps most (the first on a tie; -1 for none)."""
    if len(char_spans) == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = _byte_offsets(text)
    spans = np.clip(np.asarray(char_spans, dtype=np.int64), 0, len(text))
    lo, hi = offsets[spans[:, 0]], offsets[spans[:, 1]]
    starts, ends = batch.byte_start, batch.byte_start + batch.byte_length
    word = np.searchsorted(ends, lo, side="right")  # the first word ending after the token starts
    inside = (word < len(starts)) & (np.take(starts, np.minimum(word, len(starts) - 1), mode="clip") < hi)
    return np.where(inside & (hi > lo), word, -1)


class JudgedKeyphrases(KeyphraseExtractor):
    """Base of the costly judges: ``pool_method`` (a cheap registered method) gives each text's
    best ``pool`` candidates, :meth:`_judge` scores them. ``judge_seconds_`` and
    ``judged_documents_`` count the judge's own time (the cheap ranking excluded), so that
    ``seconds_per_document_`` is its cost per text."""

    #: a judge is never another judge's pool
    costly = True
    _parameter_constraints = {"pool": [Interval("int", 1)],
                              "pool_method": [Check(_is_cheap_method, "a registered keyphrase method that is not a "
                                                                     "judge (yake, rake, positionrank, ...)")],
                              "max_tokens": [Interval("int", 8)]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", pool: int = 20, pool_method: str = "yake", max_tokens: int = 512):
        self.pool, self.pool_method, self.max_tokens = pool, pool_method, max_tokens
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)
        self.judge_seconds_, self.judged_documents_ = 0.0, 0

    @property
    def seconds_per_document_(self) -> float | None:
        """The judge's mean seconds per text so far (None before any)."""
        return self.judge_seconds_ / self.judged_documents_ if self.judged_documents_ else None

    def _heads(self, chunk: Sequence[str], language) -> list[Scores]:
        cheap = create("keywords", self.pool_method, k=self.pool, candidates_from=self.candidates_from,
                       tagger=self.tagger, language=language, long_text_words=self.long_text_words,
                       batch_size=max(len(chunk), 1), stopwords=self.stopwords)
        return cheap.score_batch(chunk)

    def _all_chunk(self, chunk, language, context) -> list[Scores]:
        each = list(language) if not isinstance(language, str) else [language] * len(chunk)
        heads = self._heads(chunk, language)
        tagger = tagger_for(self.candidates_from, self.tagger)
        start = time.perf_counter()
        out = []
        for text, code, head in zip(chunk, each, heads):
            if len(head) == 0:
                out.append(head)
                continue
            words = tokenize_batch([text], self.stopwords, tagger, code)
            values = np.asarray(self._judge(text, words, list(head.ids)), dtype=np.float64)
            out.append(Scores(values, ids=list(head.ids)))
        self.judge_seconds_ += time.perf_counter() - start
        self.judged_documents_ += len(chunk)
        return out

    def score_candidates(self, text: str, *, language=None) -> Scores:
        """The judge's score of each of the text's ``pool`` best candidates by ``pool_method``."""
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
        language = check_language(self.language if language is None else language)
        return self._all_chunk([text], language, {})[0]

    @abc.abstractmethod
    def _judge(self, text: str, words: Batch, phrases: list[str]) -> Sequence[float]:
        """One score per phrase of ``text`` (``words``: its words, read in its language)."""


class LanguageModelJudge(JudgedKeyphrases):
    """A judge that reads a causal language model: ``model`` (a name or path, loaded once per
    process, or a model object with its ``tokenizer``)."""

    _parameter_constraints = {"model": [Exempt("a causal LM name, folder or .gguf file, or a model object; loaded "
                                               "when used")],
                              "tokenizer": [None, Exempt("the model object's tokenizer")]}

    def _lm(self) -> tuple:
        return language_model(self.model, self.tokenizer)

    def _start(self) -> list[int]:
        """The tokenizer's start token, where it has one: a read begins with it."""
        _, tokenizer = self._lm()
        return [] if getattr(tokenizer, "bos_token_id", None) is None else [tokenizer.bos_token_id]

    def _window(self, reserve: int) -> int:
        """How many of the text's tokens one read holds: ``max_tokens``, or fewer where the
        model's context (``max_position_embeddings``) less the ``reserve`` tokens the prompt
        adds is shorter."""
        model, _ = self._lm()
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        width = self.max_tokens if not isinstance(context, int) else min(self.max_tokens, context - reserve)
        if width < 1:
            raise InvalidParameterError(f"the model's context of {context} tokens leaves no room for the text after the "
                                        f"{reserve} tokens of the prompt.")
        return width

    def _text_tokens(self, text: str, limit: int) -> tuple[list[int], np.ndarray, str]:
        """The first ``limit`` tokens of ``text`` (no special tokens), their character spans, and
        the head of ``text`` they were read from."""
        _, tokenizer = self._lm()
        head = text[: limit * CHARS_PER_TOKEN]
        try:
            encoded = tokenizer(head, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError:
            raise InvalidParameterError("the judges align a model's tokens with the text's words and need a fast "
                                        "tokenizer (one that returns offsets).") from None
        ids, spans = list(encoded["input_ids"])[:limit], np.asarray(encoded["offset_mapping"], dtype=np.int64)[:limit]
        return ids, spans.reshape(-1, 2), head

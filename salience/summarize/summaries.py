"""Summaries: a text's best sentences under a sentence or word budget, in document order, one
text at a time (:func:`summarize`) or many (:func:`summarize_batch`, the same summaries)."""

from __future__ import annotations

import numbers
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from salience.core.base import create, reject_options
from salience.core.checks import check_k
from salience.core.scores import Scores
from salience.core.select import select_mmr
from salience.exceptions import InvalidParameterError
from salience.summarize.extractive import SentenceScorer, text_units
from salience.summarize.similarity import check_language, cosine, term_counts, tfidf
from salience.text.tokenize import TermEncoder

__all__ = ["Summary", "summarize", "summarize_batch"]

# MMR considers at most this many of the best sentences (its cost is quadratic in the pool).
_MMR_POOL = 2000
# summarize() without a scorer reuses one per method and options, process-wide: at most this many
_SHARED_SCORERS = 4
_shared_scorers: "OrderedDict[tuple, SentenceScorer]" = OrderedDict()
_shared_lock = threading.Lock()


def _forget_shared_scorers() -> None:
    """In a forked child: a lock another thread of the parent held would never be released."""
    global _shared_lock
    _shared_lock = threading.Lock()
    _shared_scorers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_scorers)


@dataclass
class Summary:
    """The chosen sentences in document order, with their positions and salience."""

    sentences: list[str]
    indices: list[int]
    scores: Scores = field(repr=False)

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)

    def __str__(self) -> str:
        return self.text


def summarize(
    text: str | Sequence[str],
    *,
    method: str = "lexrank",
    sentences: int | None = None,
    words: int | None = None,
    query: str | None = None,
    diversity: float = 0.0,
    scorer: "SentenceScorer | None" = None,
    language: str = "auto",
    **params,
) -> Summary:
    """Extract a summary of ``sentences`` sentences (default 3) or at most ``words`` words.

    ``text`` is a string (split with :func:`~salience.text.sentences.split_sentences`) or a
    list of sentences. ``diversity`` > 0 trades salience for novelty (MMR over sentence
    cosine similarity). Sentences come back in document order. ``method`` is built with
    ``params`` (see :func:`~salience.summarize.extractive.score_sentences`) once per process:
    calls with the same method and options share its term cache, so summarising many texts is
    faster from the second on (the results are the same as a fresh scorer's). ``scorer``: a
    :class:`SentenceScorer` to score with instead of ``method`` and its options (its own term
    cache). ``language``: ``"auto"`` (detected) or an ISO 639-1 code. Many texts:
    :func:`summarize_batch`.

    >>> doc = ("The cat sat on the mat. Dogs bark at cats. The mat was red. "
    ...        "Cats like mats and cats like sun.")
    >>> summarize(doc, sentences=2, method="lexrank").indices
    [0, 3]
    """
    check_language(language)
    units = text_units(text, "text")
    scorer = _scorer(scorer, method, language, params)
    sentences, words = _budgets(sentences, words)
    _check_diversity(diversity)
    if not units:
        return _empty_summary()
    with scorer._lock:  # the language is told once, for scoring and for MMR alike
        encoder = scorer.encoder_for(units) if scorer.uses_terms or diversity > 0 else None
        scores = scorer.score_sentences(units, query=query, encoder=encoder)
    return _choose(units, scores, encoder, sentences, words, diversity)


def summarize_batch(
    texts: Iterable[str | Sequence[str]],
    *,
    method: str = "lexrank",
    sentences: int | Sequence[int] | None = None,
    words: int | Sequence[int] | None = None,
    query: str | None = None,
    diversity: float = 0.0,
    scorer: "SentenceScorer | None" = None,
    language: str = "auto",
    **params,
) -> list[Summary]:
    """:func:`summarize` for each of ``texts``: the same summaries, faster for many (the texts of
    one language are tokenised together, each distinct word stemmed once, so a text costs little
    more than its sentence graph). ``sentences`` and ``words``: one budget for every text, or a
    list with one per text. A ``query`` is read text by text, as :func:`summarize` does.

    >>> [s.indices for s in summarize_batch(["One cat. Two cats. A dog.", "Red mats. A red mat."], sentences=1)]
    [[0], [0]]
    """
    check_language(language)
    texts = list(texts)
    units = [text_units(text, f"text {i}") for i, text in enumerate(texts)]
    scorer = _scorer(scorer, method, language, params)
    budgets = _budgets(sentences, words, len(texts))
    _check_diversity(diversity)
    if query is not None:
        return [summarize(u, query=query, diversity=diversity, scorer=scorer, sentences=s, words=w)
                for u, (s, w) in zip(units, budgets)]
    out = [_empty_summary() for _ in texts]
    filled = [i for i, u in enumerate(units) if u]
    # score_many encodes a bounded number of texts at a time
    scored = scorer.score_many([units[i] for i in filled], with_encoders=diversity > 0)
    for i, (scores, encoder) in zip(filled, scored):
        out[i] = _choose(units[i], scores, encoder, *budgets[i], diversity)
    return out


def _empty_summary() -> Summary:
    return Summary([], [], Scores([], ids=[]))


def _scorer(scorer, method: str, language: str, params: dict) -> SentenceScorer:
    if scorer is None:
        return _shared_scorer(method, language, params)
    if not isinstance(scorer, SentenceScorer):
        raise InvalidParameterError(f"scorer must be a SentenceScorer; got {type(scorer).__name__}.")
    # the scorer carries the method and its options: passing them here too would be ambiguous
    reject_options("scorer=...", {"method": method, "language": language, **params}, (),
                   {"method": "lexrank", "language": "auto"})
    return scorer


def _budgets(sentences, words, n: int | None = None):
    """``(sentences, words)``, one of them None (``sentences`` 3 when neither is given): checked
    numbers for one text (``n`` None), or a list of such pairs for ``n`` texts, each budget then
    one number for all or one per text."""
    if sentences is not None and words is not None:
        raise InvalidParameterError("give sentences= or words=, not both.")
    name, budget = ("words", words) if words is not None else ("sentences", 3 if sentences is None else sentences)
    if n is None:
        each = check_k(budget, name)
        return (None, each) if name == "words" else (each, None)
    return [(None, b) if name == "words" else (b, None) for b in _per_text(budget, name, n)]


def _per_text(budget, name: str, n: int) -> list[int]:
    """One budget per text: ``budget`` for each, or its items (one per text)."""
    if isinstance(budget, np.ndarray):
        budget = budget.tolist() if budget.ndim == 1 else budget.item() if budget.ndim == 0 else budget
    if isinstance(budget, Sequence) and not isinstance(budget, str):
        if len(budget) != n:
            raise InvalidParameterError(f"{name} must be one number or one per text; got {len(budget)} for {n} texts.")
        return [check_k(b, name) for b in budget]
    return [check_k(budget, name)] * n


def _check_diversity(diversity) -> None:
    if not isinstance(diversity, numbers.Real) or not 0.0 <= diversity <= 1.0:
        raise InvalidParameterError(f"diversity must be in [0, 1]; got {diversity!r}.")


def _choose(units: list[str], scores: Scores, encoder: TermEncoder | None, sentences: int | None, words: int | None,
            diversity: float) -> Summary:
    """The best sentences by ``scores`` (MMR with ``diversity`` > 0) within the budget, in document order."""
    if diversity > 0:
        # MMR over the best sentences only: its similarity matrix is dense (pool x pool)
        pool = np.sort(scores.order()[:_MMR_POOL])  # document order, as ties were broken before
        similarity = cosine(tfidf(term_counts([units[i] for i in pool], encoder)))
        similarity = similarity if isinstance(similarity, np.ndarray) else similarity.toarray()
        picked = select_mmr(Scores(scores.values[pool], ids=pool.tolist()), similarity, k=len(pool),
                            diversity=diversity, normalize="minmax")
        order = [int(i) for i in picked.ids]
    else:
        order = [int(i) for i in scores.order()]
    chosen: list[int] = []
    if words is not None:
        used = 0
        for i in order:
            length = len(units[i].split())
            if used + length <= words:
                chosen.append(i)
                used += length
    else:
        chosen = order[:sentences]
    chosen.sort()
    return Summary([units[i] for i in chosen], chosen, scores)


def _shared_scorer(method: str, language: str, params: dict) -> SentenceScorer:
    """The process's scorer for ``method`` with these options, made on first use: its term
    cache stays warm from call to call, as an explicit scorer's does (its results do not depend
    on the texts it saw before). The least recently used of more than ``_SHARED_SCORERS`` is
    dropped."""
    try:
        key = (method, language, tuple(sorted(params.items())))
        hash(key)
    except TypeError:  # an option that cannot be a key: a scorer of its own
        return create("summarize", method, language=language, **params)
    with _shared_lock:
        scorer = _shared_scorers.get(key)
        if scorer is not None:
            _shared_scorers.move_to_end(key)
            return scorer
    scorer = create("summarize", method, language=language, **params)  # refused here, never kept, when invalid
    with _shared_lock:
        scorer = _shared_scorers.setdefault(key, scorer)
        _shared_scorers.move_to_end(key)
        while len(_shared_scorers) > _SHARED_SCORERS:
            _shared_scorers.popitem(last=False)
    return scorer

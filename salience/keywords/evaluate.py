"""The frozen keyphrase evaluation protocol.

Both sides are lower-cased and Porter-stemmed word by word (words = ``\\w+`` runs), and a
predicted phrase counts when it equals a gold phrase exactly. Gold keyphrases absent from the
text are included (``present_only=True`` restricts the gold to phrases whose stemmed form occurs
in the stemmed text). Per document: precision = matches / number returned (at most k),
recall = matches / gold, F1 their harmonic mean; all macro-averaged over documents.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from salience.core.metrics import Report
from salience.exceptions import ShapeError
from salience.text.stemmers import thread_stemmer

__all__ = ["normalize_phrase", "prf_at_k", "evaluate_keyphrases", "read_gold"]

_WORD = re.compile(r"\w+")
def _porter():
    """The frozen protocol's Porter stemmer, the calling thread's own."""
    return thread_stemmer("porter")


def normalize_phrase(phrase: str) -> str:
    stem = _porter()
    return " ".join(stem(w) for w in _WORD.findall(phrase.lower()))


def prf_at_k(predicted: Sequence[str], gold: Iterable[str], k: int) -> tuple[float, float, float]:
    gold_set = {g for g in (normalize_phrase(p) for p in gold) if g}
    seen, top = set(), []
    for phrase in predicted:
        norm = normalize_phrase(phrase)
        if norm and norm not in seen:
            seen.add(norm)
            top.append(norm)
        if len(top) == k:
            break
    hits = sum(1 for p in top if p in gold_set)
    precision = hits / len(top) if top else 0.0
    recall = hits / len(gold_set) if gold_set else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def evaluate_keyphrases(predictions: Sequence[Sequence[str]], texts: Sequence[str], golds: Sequence[Sequence[str]],
                        ks: Sequence[int] = (5, 10, 15), present_only: bool = False) -> Report:
    """Macro P/R/F at each k as a :class:`~salience.Report` (``report["F1@10"]``; per document in
    ``per_subject``, keyed by position); with ``present_only`` the gold keeps phrases found in
    the text."""
    if not len(predictions) == len(texts) == len(golds):
        raise ShapeError(f"predictions, texts and golds must line up; got {len(predictions)}, {len(texts)} and "
                         f"{len(golds)}.")
    per_doc: dict = {d: {} for d in range(len(golds))}
    for d, (predicted, text, gold) in enumerate(zip(predictions, texts, golds)):
        if present_only:
            stemmed_text = " " + normalize_phrase(text) + " "
            gold = [g for g in gold if normalize_phrase(g) and f" {normalize_phrase(g)} " in stemmed_text]
        for k in ks:
            per_doc[d][f"P@{k}"], per_doc[d][f"R@{k}"], per_doc[d][f"F1@{k}"] = prf_at_k(predicted, gold, k)
    names = [f"{m}@{k}" for k in ks for m in ("P", "R", "F1")]
    n = max(len(golds), 1)
    # summed in document order, as before: the same means to the last digit
    means = {name: sum(per_doc[d][name] for d in per_doc) / n for name in names}
    return Report(means, per_doc, evaluated=len(golds), matched=len(golds))


def read_gold(path, on_error: str = "raise") -> list[dict]:
    """Records with ``text`` (a string) and ``keyphrases`` (a list of strings); errors name the line."""
    from salience.io.files import read_records

    return read_records(path, {
        "text": (lambda v: isinstance(v, str), "text field 'text' (a string)"),
        "keyphrases": (lambda v: isinstance(v, list) and all(isinstance(g, str) for g in v),
                       "field 'keyphrases' (a list of strings)"),
    }, on_error)

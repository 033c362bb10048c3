"""ROUGE evaluation of extractive summaries against gold summaries (package ``rouge-score``)."""

from __future__ import annotations

import time
from pathlib import Path

from salience.core.metrics import Report

from salience.exceptions import MissingDependencyError
from salience.io.files import read_records

__all__ = ["evaluate_summaries", "rouge_scorer"]


def rouge_scorer():
    """ROUGE-1/2/L F1 with Porter stemming, as is usual for summarisation."""
    try:
        from rouge_score import rouge_scorer as module
    except ImportError:
        raise MissingDependencyError(
            "ROUGE evaluation requires rouge-score. Install it with: pip install 'salience[text]'"
        ) from None
    return module.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def read_gold(path: str | Path, on_error: str = "raise") -> list[dict]:
    """Records with ``text`` and ``summary`` (one summary sentence per line); errors name the line."""
    is_text = lambda v: isinstance(v, str)  # noqa: E731
    return read_records(path, {"text": (is_text, "text field 'text' (a string)"),
                               "summary": (is_text, "text field 'summary' (a string)")}, on_error)


def evaluate_summaries(
    path: str | Path,
    *,
    method: str = "lexrank",
    sentences: int | None = None,
    words: int | None = None,
    diversity: float = 0.0,
    on_error: str = "raise",
) -> Report:
    """Mean ROUGE F1 (x100) of ``method`` on a jsonl of ``{text, summary}`` as a
    :class:`~salience.Report` (``report["rouge2"]``; the method, document count and speed in
    ``report.info``); the summary length is the gold number of sentences unless ``sentences``
    or ``words`` is given."""
    from salience.summarize.extractive import summarize

    records = read_gold(path, on_error)
    scorer = rouge_scorer()
    outputs = []
    start = time.perf_counter()
    for record in records:
        gold_sentences = sum(1 for line in record["summary"].splitlines() if line.strip())
        length = {"words": words} if words is not None else {"sentences": sentences or max(gold_sentences, 1)}
        outputs.append(summarize(record["text"], method=method, diversity=diversity, **length).text)
    seconds = time.perf_counter() - start
    totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    per_doc = {}
    for d, (record, output) in enumerate(zip(records, outputs)):
        scores = scorer.score(record["summary"], output)
        per_doc[d] = {name: 100.0 * scores[name].fmeasure for name in totals}
        for name in totals:
            totals[name] += scores[name].fmeasure
    means = {name: 100.0 * value / len(records) for name, value in totals.items()}
    info = {"method": method, "docs": len(records), "seconds": seconds,
            "docs_per_second": len(records) / seconds if seconds > 0 else float("inf")}
    return Report(means, per_doc, evaluated=len(records), matched=len(records), info=info)

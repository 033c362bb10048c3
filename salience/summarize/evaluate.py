"""ROUGE evaluation of extractive summaries against gold summaries (package ``rouge-score``)."""

from __future__ import annotations

import time
from pathlib import Path

from salience.core.metrics import Report

from salience.extras import require
from salience.exceptions import InputFormatError

__all__ = ["evaluate_summaries", "rouge_scorer"]


def rouge_scorer():
    """ROUGE-1/2/L F1 with Porter stemming, as is usual for summarisation."""
    module = require("rouge_score.rouge_scorer", "text", "ROUGE evaluation")
    return module.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def read_gold(path: str | Path, on_error: str = "raise") -> list[dict]:
    """Records with ``text`` and their reference summaries, one sentence per line: ``summary``
    (a string) or ``summaries`` (a list of strings, several references); each record gets
    ``references`` (the list). Errors name the line."""
    from salience.io.files import iter_jsonl

    records = []
    for lineno, record in iter_jsonl(path, on_error):
        references = record.get("summaries", record.get("summary"))
        references = [references] if isinstance(references, str) else references
        problem = None
        if not isinstance(record.get("text"), str):
            problem = "text field 'text' (a string)"
        elif not (isinstance(references, list) and references and all(isinstance(r, str) for r in references)):
            problem = "text field 'summary' (a string) or 'summaries' (a non-empty list of strings)"
        if problem:
            raise InputFormatError(f"{path}:{lineno}: record has no {problem}.")
        record["references"] = references
        records.append(record)
    if not records:
        raise InputFormatError(f"{path}: no records.")
    return records


def evaluate_summaries(
    path: str | Path,
    *,
    method: str = "lexrank",
    sentences: int | None = None,
    words: int | None = None,
    diversity: float = 0.0,
    on_error: str = "raise",
    language: str = "auto",
    **params,
) -> Report:
    """Mean ROUGE F1 (x100) of ``method`` on a jsonl of ``{text, summary}`` or ``{text,
    summaries}`` as a :class:`~salience.Report`; the method, document count and speed are in
    ``report.info``.

    With several references per text, each is scored: ``report["rouge2"]`` is the best of them
    per text (as rouge-score's ``score_multi``), ``report["rouge2_mean"]`` their mean (both
    equal with one reference). The summary length is the references' mean number of sentences
    unless ``sentences`` or ``words`` is given. ``language``: as in :func:`summarize`; ``params``: the
    method's own (``threshold`` of ``lexrank``, ...)."""
    from salience.core.base import create
    from salience.summarize.summaries import summarize_batch

    records = read_gold(path, on_error)
    scorer = rouge_scorer()
    # one summariser for every text, the texts summarised together (one term cache, each word stemmed once)
    summariser = create("summarize", method, language=language, **params)
    if words is not None:
        length = {"words": words}
    else:
        length = {"sentences": [sentences or max(round(_gold_sentences(record["references"])), 1) for record in records]}
    start = time.perf_counter()
    outputs = [s.text for s in summarize_batch([r["text"] for r in records], scorer=summariser, diversity=diversity,
                                               **length)]
    seconds = time.perf_counter() - start
    names = ("rouge1", "rouge2", "rougeL")
    per_doc = {}
    for d, (record, output) in enumerate(zip(records, outputs)):
        each = [scorer.score(reference, output) for reference in record["references"]]
        per_doc[d] = {}
        for name in names:
            values = [100.0 * scores[name].fmeasure for scores in each]
            per_doc[d][name] = max(values)
            per_doc[d][f"{name}_mean"] = sum(values) / len(values)
    # summed in document order: the same means as before for single references
    means = {key: sum(row[key] for row in per_doc.values()) / len(records) for key in per_doc[0]}
    info = {"method": method, "docs": len(records), "seconds": seconds,
            "references": sum(len(r["references"]) for r in records),
            "docs_per_second": len(records) / seconds if seconds > 0 else float("inf")}
    return Report(means, per_doc, evaluated=len(records), matched=len(records), info=info)


def _gold_sentences(references: list[str]) -> float:
    """The references' mean number of sentences (one a line)."""
    return sum(sum(1 for line in r.splitlines() if line.strip()) for r in references) / len(references)

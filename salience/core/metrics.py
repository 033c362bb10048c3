"""IR metrics with trec_eval semantics: nDCG@k, MAP@k, MRR@k, recall@k, precision@k.

Conventions (those of trec_eval / pytrec_eval, so numbers agree to 1e-9):

* a run is ordered by score descending, ties broken by item id descending (trec_eval's rule);
* an item is relevant when its grade is >= 1; nDCG uses the grade as gain and log2(rank+1)
  discount, with the ideal ranking built from all judged items;
* MAP@k divides by the total number of relevant items; precision@k divides by k;
* subjects without judgments are skipped and counted; judged subjects missing from the run
  score 0 (``missing="zero"``) or are skipped (``missing="skip"``, trec_eval's default).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from salience.core.run import Qrels, Run, as_qrels, as_run
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["evaluate", "parse_metric", "Report", "METRICS", "NothingJudgedWarning"]

METRICS = ("ndcg", "map", "mrr", "recall", "precision")
_ALIASES = {"p": "precision", "r": "recall", "rr": "mrr", "ap": "map"}
_METRIC_RE = re.compile(r"^([a-z_]+)(?:@(\d+))?$")


def parse_metric(name: str) -> tuple[str, int | None]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``; no cut-off means the full ranking."""
    m = _METRIC_RE.match(name.strip().lower())
    if not m:
        raise InvalidParameterError(
            f"cannot read metric {name!r}; write it as NAME@K, e.g. 'ndcg@10', with NAME one of {', '.join(METRICS)}."
        )
    base = _ALIASES.get(m.group(1), m.group(1))
    if base not in METRICS:
        raise unknown_choice("metric", m.group(1), METRICS)
    k = int(m.group(2)) if m.group(2) else None
    if k is not None and k <= 0:
        raise InvalidParameterError(f"metric cut-off must be >= 1; got {name!r}.")
    return base, k


def _trec_ranked(ids: Sequence, values: np.ndarray) -> list:
    # trec_eval: score descending, then docno descending.
    order = sorted(range(len(ids)), key=lambda i: (values[i], str(ids[i])), reverse=True)
    return [ids[i] for i in order]


def _metric_value(base: str, k: int | None, ranked: list, judged: Mapping[Any, int], n_rel: int) -> float:
    top = ranked if k is None else ranked[:k]
    grades = [judged.get(d, 0) for d in top]
    rel = [g >= 1 for g in grades]
    if base == "precision":
        return sum(rel) / (k if k is not None else max(len(top), 1))
    if n_rel == 0:
        return 0.0
    if base == "recall":
        return sum(rel) / n_rel
    if base == "map":
        hits, total = 0, 0.0
        for i, r in enumerate(rel, start=1):
            if r:
                hits += 1
                total += hits / i
        return total / n_rel
    if base == "mrr":
        for i, r in enumerate(rel, start=1):
            if r:
                return 1.0 / i
        return 0.0
    # ndcg
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(grades) if g > 0)
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)
    if k is not None:
        ideal = ideal[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


@dataclass
class Report:
    """Mean metric values plus per-subject values and counts."""

    means: dict[str, float]
    per_subject: dict[Any, dict[str, float]] = field(repr=False)
    evaluated: int = 0
    skipped_unjudged: int = 0
    missing_from_run: int = 0
    #: judged subjects that the run ranks: 0 means the numbers measure nothing
    matched: int = 0
    #: what else the evaluation measured (method, timing), carried into :meth:`to_dict`
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, metric: str) -> float:
        return self.means[metric]

    def to_dict(self) -> dict:
        return {
            **self.means,
            "evaluated": self.evaluated,
            "skipped_unjudged": self.skipped_unjudged,
            "missing_from_run": self.missing_from_run,
            "matched": self.matched,
            **self.info,
        }

    def __str__(self) -> str:
        width = max([len(m) for m in self.means] + [6])
        lines = [f"{'metric':<{width}}  value", f"{'-' * width}  ------"]
        lines += [f"{m:<{width}}  {v:.4f}" for m, v in self.means.items()]
        lines.append(
            f"({self.evaluated} subjects evaluated, {self.skipped_unjudged} without judgments skipped, "
            f"{self.missing_from_run} judged but absent from the run)"
        )
        return "\n".join(lines)


def evaluate(
    qrels: Qrels | Mapping,
    run: Run | Mapping,
    metrics: str | Sequence[str] = ("ndcg@10",),
    *,
    missing: str = "zero",
) -> Report:
    """Score ``run`` against ``qrels`` on each metric.

    >>> qrels = {"q1": {"a": 1, "c": 2}}
    >>> run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}}
    >>> round(evaluate(qrels, run, ["mrr@10", "recall@2"]).means["recall@2"], 3)
    0.5
    """
    if isinstance(metrics, str):
        metrics = [m for m in metrics.split(",") if m.strip()]
    if not metrics:
        raise InvalidParameterError("evaluate needs at least one metric, e.g. metrics=['ndcg@10'].")
    if missing not in ("zero", "skip"):
        raise unknown_choice("missing", missing, ("zero", "skip"))
    parsed = [(m.strip(), *parse_metric(m)) for m in metrics]
    qrels, run = as_qrels(qrels), as_run(run)
    per_subject: dict[Any, dict[str, float]] = {}
    skipped = sum(1 for s in run if s not in qrels)
    absent = 0
    for subject, judged in qrels.items():
        if subject in run:
            scores = run[subject]
            ranked = _trec_ranked(scores.ids, scores.values)
        elif missing == "zero":
            ranked = []
            absent += 1
        else:
            absent += 1
            continue
        n_rel = sum(1 for g in judged.values() if g >= 1)
        per_subject[subject] = {name: _metric_value(base, k, ranked, judged, n_rel) for name, base, k in parsed}
    means = {
        name: (float(np.mean([v[name] for v in per_subject.values()])) if per_subject else 0.0)
        for name, _, _ in parsed
    }
    report = Report(means, per_subject, evaluated=len(per_subject), skipped_unjudged=skipped, missing_from_run=absent,
                    matched=len(qrels) - absent)
    if report.matched == 0:
        import warnings

        warnings.warn(
            f"nothing was evaluated: none of the run's {len(run)} subjects has judgments "
            f"({len(qrels)} judged subjects); the means are 0 by default, not a measurement. "
            "Check that the run and the qrels use the same subject ids.",
            NothingJudgedWarning,
            stacklevel=2,
        )
    return report


class NothingJudgedWarning(UserWarning):
    """An evaluation found no judged subject in the run (an empty or disjoint run)."""

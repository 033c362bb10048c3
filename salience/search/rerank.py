"""Reranking a first-stage ranking with a costly judge through the core's sorting algorithms.

``rerank(query, candidates, judge, texts, algorithm=...)`` reorders the top ``depth`` of a
ranking and keeps the rest below them in their first-stage order; :func:`rerank_run` does it
for every query of a :class:`~salience.Run`. The algorithms (``RERANK_ALGORITHMS``):

* ``score``: one score per passage (pointwise, qlm, icr judges), sorted; with ``interpolate=w``
  the judge's and the first stage's per-query z-scores are mixed, ``(1 - w) first + w judge``
  (the core's weighted-sum fusion);
* ``sliding``: RankGPT's sliding window of a listwise judge (``window``, ``stride``, default half
  the window);
* ``setwise``: the judge picks the best of small sets (``set_size``), top ``k``;
* ``prp``: pairwise ranking prompting by heapsort, top ``k``, each pair asked in both orders;
* ``allpairs``: every pair in both orders, ranked by wins;
* ``jointrank``: overlapping blocks ranked independently, aggregated.

A scoring judge works with every algorithm (its pairs and lists are derived from its scores);
a pairwise judge with ``prp`` and ``allpairs``; a listwise judge with ``sliding``, ``setwise``
and ``jointrank``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from salience.core.checks import check_k
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError

__all__ = ["rerank", "rerank_run", "RERANK_ALGORITHMS"]

RERANK_ALGORITHMS = ("score", "sliding", "setwise", "prp", "allpairs", "jointrank")
_PAIRWISE = ("prp", "allpairs")
_LISTWISE = ("sliding", "setwise", "jointrank")


#: depth and interpolation weight per judge method where SciFact's dev split chose them
#: (bench/rerank.py, BENCHMARKS.md): the LM pointwise judge over the top 10 at judge weight 0.3,
#: the bi-encoder over the top 20 at 0.7. Other methods lost to BM25 there at every weight.
DEV_CHOSEN = {"pointwise": {"depth": 10, "interpolate": 0.3}, "encoder": {"depth": 20, "interpolate": 0.7}}


def default_algorithm(method: str) -> str:
    """The natural algorithm for a judge method: scores sorted, PRP for pairs, a sliding window for lists."""
    return {"pairwise": "prp", "listwise": "sliding"}.get(method, "score")


def rerank(query: str, candidates: Scores, judge, texts: Mapping | Callable, *, algorithm: str | None = None,
           depth: int = 20, k: int = 10, interpolate: float | None = None, window: int = 20, stride: int | None = None,
           set_size: int = 4) -> Scores:
    """``candidates``' top ``depth`` reordered by ``judge`` (an
    :class:`~salience.search.lm_judges.LMJudge`, an
    :class:`~salience.search.lm_judges.EncoderJudge`, or any object with ``method`` and
    ``scores(query, passages)``), the rest kept below in their order. Returned scores decrease
    down the new order."""
    from salience.core import sort
    from salience.core.judges import PairwiseJudge

    method = judge.method
    algorithm = algorithm or default_algorithm(method)
    if algorithm not in RERANK_ALGORITHMS:
        raise InvalidParameterError(f"algorithm must be one of {', '.join(RERANK_ALGORITHMS)}; got {algorithm!r}.")
    depth = check_k(depth, "depth")
    scoring = method not in ("pairwise", "listwise")  # LMJudge's pointwise, qlm, icr; EncoderJudge; any scorer
    if not _fits(method, algorithm):
        raise InvalidParameterError(f"the {method} judge cannot drive the {algorithm!r} algorithm: use "
                                    f"{', '.join(a for a in RERANK_ALGORITHMS if _fits(method, a))}.")
    if interpolate is not None and (algorithm != "score" or not 0.0 <= interpolate <= 1.0):
        raise InvalidParameterError(f"interpolate (the judge's weight, 0..1) applies to algorithm='score'; got "
                                    f"{interpolate!r} with {algorithm!r}.")
    ranked = candidates.sorted()
    head, tail = ranked.ids[:depth], ranked.ids[depth:]
    if not head:
        return ranked
    if algorithm == "score":
        lookup = texts if callable(texts) else texts.__getitem__
        values = judge.scores(query, [lookup(i) for i in head])
        if interpolate is not None:  # per-query z-scores (Scores.normalize, as the core's fusion)
            first = Scores(ranked.values[: len(head)], head).normalize("zscore").values
            values = (1.0 - interpolate) * first + interpolate * Scores(values, head).normalize("zscore").values
        order = [head[i] for i in np.argsort(-values, kind="stable")]
    else:
        fn = judge.judge(texts)
        if algorithm in _PAIRWISE:
            fn = PairwiseJudge(fn.pairwise if scoring else fn, both_orders=True)
        elif scoring:
            fn = fn.listwise
        if algorithm == "sliding":
            result = sort.sliding_window(head, fn, window=window, stride=stride or max(1, window // 2), query=query)
        elif algorithm == "setwise":
            result = sort.setwise_top_k(head, fn, k=min(k, len(head)), set_size=set_size, query=query)
        elif algorithm == "prp":
            result = sort.heapsort_top_k(head, fn, k=min(k, len(head)), query=query)
        elif algorithm == "allpairs":
            result = sort.allpairs(head, fn, query=query)
        else:
            result = sort.jointrank(head, fn, block_size=min(window, len(head)), query=query)
        order = result.ranked_ids()
        placed = set(order)
        order += [i for i in head if i not in placed]  # top-k algorithms: the rest in first-stage order
    ids = order + list(tail)
    return Scores(np.arange(len(ids), 0, -1, dtype=np.float64), ids)


def _fits(method: str, algorithm: str) -> bool:
    """Whether a judge of ``method`` can drive ``algorithm`` (a scoring judge drives them all)."""
    if method == "pairwise":
        return algorithm in _PAIRWISE
    if method == "listwise":
        return algorithm in _LISTWISE
    return True


def rerank_run(run, queries: Mapping[Any, str], judge, texts: Mapping | Callable, *, show_progress: bool = False,
               **options):
    """Every query of ``run`` reranked (see :func:`rerank`); returns ``(Run, seconds per query)``.
    A query id of the run missing from ``queries`` is an error naming it."""
    from salience.core.run import Run, as_run

    run = as_run(run)
    missing = [q for q in run if q not in queries]
    if missing:
        raise InvalidParameterError(f"the run ranks {len(missing)} queries with no text, e.g. {missing[0]!r}: pass "
                                    "the queries file the run was made from.")
    from salience.parallel import progress_bar

    out, start = {}, time.perf_counter()
    with progress_bar(len(run), "rerank", show_progress, unit="query") as bar:
        for q in run:
            out[q] = rerank(queries[q], run[q], judge, texts, **options)
            bar.update(1)
    seconds = (time.perf_counter() - start) / max(len(run), 1)
    return Run(out, name=f"{run.name}+{judge.method}"), seconds

"""Reranking a first-stage ranking with a costly judge through the core's sorting algorithms.

``rerank(query, candidates, judge, texts, algorithm=...)`` reorders the top ``depth`` of a
ranking and keeps the rest below them in their first-stage order; :func:`rerank_run` does it
for every query of a :class:`~salience.Run`. The algorithms are the ``rerank`` family
(``salience methods --domain rerank``), each a :class:`RerankAlgorithm`:

* ``score``: one score per passage (pointwise, qlm, icr judges), sorted; with ``interpolate=w``
  the judge's and the first stage's per-query z-scores are mixed, ``(1 - w) first + w judge``
  (the core's weighted-sum fusion);
* ``sliding``: RankGPT's sliding window of a listwise judge (``window``, ``stride``, default half
  the window);
* ``setwise``: the judge picks the best of small sets (``set_size``), top ``k``;
* ``prp``: pairwise ranking prompting by heapsort, top ``k``, each pair asked in both orders;
* ``allpairs``: every pair in both orders, ranked by wins;
* ``jointrank``: overlapping blocks (of ``window`` passages) ranked independently, aggregated.

A scoring judge works with every algorithm (its pairs and lists are derived from its scores);
a pairwise judge with ``prp`` and ``allpairs``; a listwise judge with ``sliding``, ``setwise``
and ``jointrank``. A new algorithm is one :class:`RerankAlgorithm` subclass registered with
``@register_method("rerank", name, description)``: it states the judges it ``accepts`` and
orders the passages in :meth:`RerankAlgorithm.order`.
"""

from __future__ import annotations

import abc
import time
from typing import Any, Callable, Mapping

import numpy as np

from salience.core import sort
from salience.core.base import Scorer, method_of, register_method, registered_name
from salience.core.checks import check_k
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError

__all__ = ["rerank", "rerank_run", "RerankAlgorithm", "ScoreSort", "SlidingWindow", "Setwise", "PRP", "AllPairs",
           "JointRankBlocks", "default_algorithm"]

#: the default depth and interpolation weight of a judge whose scores are sorted, chosen on a
#: dev split (the guide says which): the LM pointwise judge over the top 10 at judge weight 0.3,
#: the bi-encoder over the top 20 at 0.7, a trained cross-encoder over the top 20 at 0.3; the
#: other judges lost to the first stage at every weight, so they get none.
JUDGE_DEFAULTS = {"pointwise": {"depth": 10, "interpolate": 0.3}, "encoder": {"depth": 20, "interpolate": 0.7},
                  "cross": {"depth": 20, "interpolate": 0.3}}

#: the kinds of judge: "scores" for any judge that scores passages one by one
JUDGE_KINDS = ("scores", "pairwise", "listwise")


def default_algorithm(judge) -> str:
    """The natural algorithm for a judge (or a judge's ``kind``): scores sorted, PRP for pairs,
    a sliding window for lists."""
    kind = judge if isinstance(judge, str) else _kind(judge)
    return {"pairwise": "prp", "listwise": "sliding"}.get(kind, "score")


def _kind(judge) -> str:
    """How a judge answers: ``"scores"``, ``"pairwise"`` or ``"listwise"`` (its ``kind``; any
    object with ``scores(query, passages)`` is a scoring judge)."""
    return getattr(judge, "kind", "scores")


class RerankAlgorithm(Scorer, abc.ABC):
    """Base of the rerank algorithms (the ``rerank`` family). ``accepts``: the judge kinds that
    can drive it (a scoring judge drives every algorithm: its pairs and lists come from its
    scores). :meth:`order` gives the head's ids in their new order (an algorithm that finds
    only a top k may return fewer: the rest follow in first-stage order);
    ``score(query, candidates, judge, texts)`` reranks every candidate."""

    accepts: tuple[str, ...] = JUDGE_KINDS

    def __init__(self):
        self._validate_params()

    @abc.abstractmethod
    def order(self, query: str, head: Scores, judge, texts) -> list:
        """The subclass's part (see the class docstring)."""

    def score(self, query: str, candidates: Scores, judge, texts) -> Scores:
        return rerank(query, candidates, judge, texts, algorithm=self, depth=max(len(candidates), 1))

    def score_batch(self, batch, judge, texts) -> list[Scores]:
        """``score`` of each (query, candidates) of ``batch``."""
        return [self.score(query, candidates, judge, texts) for query, candidates in batch]

    @staticmethod
    def _comparator(judge, texts, kind: str):
        """The judge as the core's sorting algorithms call it: pairwise (asked in both orders)
        or listwise; a scoring judge's pairs and lists derived from its scores."""
        from salience.core.judges import PairwiseJudge

        fn = judge.judge(texts)
        scoring = _kind(judge) == "scores"
        if kind == "pairwise":
            return PairwiseJudge(fn.pairwise if scoring else fn, both_orders=True)
        return fn.listwise if scoring else fn


@register_method("rerank", "score", "one judge score per passage, sorted; interpolate mixes z-scores with the first "
                                    "stage's")
class ScoreSort(RerankAlgorithm):
    accepts = ("scores",)
    _parameter_constraints = {"interpolate": [None, Interval("real", 0, 1)]}

    def __init__(self, *, interpolate: float | None = None):
        self.interpolate = interpolate
        super().__init__()

    def order(self, query, head, judge, texts) -> list:
        lookup = texts if callable(texts) else texts.__getitem__
        values = judge.scores(query, [lookup(i) for i in head.ids])
        if self.interpolate is not None:  # per-query z-scores (Scores.normalize, as the core's fusion)
            first = head.normalize("zscore").values
            values = (1.0 - self.interpolate) * first + self.interpolate * Scores(values, head.ids).normalize("zscore").values
        return [head.ids[i] for i in np.argsort(-values, kind="stable")]


@register_method("rerank", "sliding", "RankGPT's sliding window of a listwise judge, from the bottom up")
class SlidingWindow(RerankAlgorithm):
    accepts = ("scores", "listwise")
    _parameter_constraints = {"window": [Interval("int", 1)], "stride": [None, Interval("int", 1)]}

    def __init__(self, *, window: int = 20, stride: int | None = None):
        self.window, self.stride = window, stride
        super().__init__()

    def order(self, query, head, judge, texts) -> list:
        return sort.sliding_window(head.ids, self._comparator(judge, texts, "listwise"), window=self.window,
                                   stride=self.stride or max(1, self.window // 2), query=query).ranked_ids()


@register_method("rerank", "setwise", "setwise top-k: the judge picks the best of small sets")
class Setwise(RerankAlgorithm):
    accepts = ("scores", "listwise")
    _parameter_constraints = {"k": [Interval("int", 1)], "set_size": [Interval("int", 2)]}

    def __init__(self, *, k: int = 10, set_size: int = 4):
        self.k, self.set_size = k, set_size
        super().__init__()

    def order(self, query, head, judge, texts) -> list:
        return sort.setwise_top_k(head.ids, self._comparator(judge, texts, "listwise"), k=min(self.k, len(head)),
                                  set_size=self.set_size, query=query).ranked_ids()


@register_method("rerank", "prp", "pairwise ranking prompting by heapsort: the top k, each pair asked in both orders")
class PRP(RerankAlgorithm):
    accepts = ("scores", "pairwise")
    _parameter_constraints = {"k": [Interval("int", 1)]}

    def __init__(self, *, k: int = 10):
        self.k = k
        super().__init__()

    def order(self, query, head, judge, texts) -> list:
        return sort.heapsort_top_k(head.ids, self._comparator(judge, texts, "pairwise"), k=min(self.k, len(head)),
                                   query=query).ranked_ids()


@register_method("rerank", "allpairs", "every pair asked in both orders, ranked by wins")
class AllPairs(RerankAlgorithm):
    accepts = ("scores", "pairwise")

    def order(self, query, head, judge, texts) -> list:
        return sort.allpairs(head.ids, self._comparator(judge, texts, "pairwise"), query=query).ranked_ids()


@register_method("rerank", "jointrank", "JointRank: overlapping blocks of window passages ranked independently, "
                                        "aggregated")
class JointRankBlocks(RerankAlgorithm):
    accepts = ("scores", "listwise")
    _parameter_constraints = {"window": [Interval("int", 2)]}

    def __init__(self, *, window: int = 20):
        self.window = window
        super().__init__()

    def order(self, query, head, judge, texts) -> list:
        return sort.jointrank(head.ids, self._comparator(judge, texts, "listwise"),
                              block_size=min(self.window, len(head)), query=query).ranked_ids()


def rerank(query: str, candidates: Scores, judge, texts: Mapping | Callable, *,
           algorithm: str | RerankAlgorithm | None = None, depth: int = 20, **params) -> Scores:
    """``candidates``' top ``depth`` reordered by ``judge`` (an
    :class:`~salience.search.lm_judges.Judge` of the ``judge`` family, or any object with
    ``method`` and ``scores(query, passages)``) through ``algorithm`` (a registered ``rerank`` name built with
    ``params``, or a :class:`RerankAlgorithm`; default: the judge's natural one), the rest kept
    below in their order. Returned scores decrease down the new order."""
    algorithm = method_of("rerank", algorithm or default_algorithm(judge), RerankAlgorithm, **params)
    depth = check_k(depth, "depth")
    kind = _kind(judge)
    if kind not in algorithm.accepts:
        from salience.core.base import registered

        fits = [m.name for m in registered("rerank") if kind in m.factory.accepts]
        raise InvalidParameterError(f"the {judge.method} judge cannot drive the "
                                    f"{registered_name(algorithm, 'rerank')!r} algorithm: use "
                                    f"{', '.join(fits)}.")
    ranked = candidates.sorted()
    head, tail = ranked.ids[:depth], ranked.ids[depth:]
    if not head:
        return ranked
    if isinstance(texts, Mapping):
        absent = [i for i in head if i not in texts]
        if absent:
            raise IdMismatchError(f"{len(absent)} of the {len(head)} passages to rerank have no text, e.g. "
                                  f"{absent[0]!r}: texts must hold every candidate's id.")
    order = algorithm.order(query, Scores(ranked.values[: len(head)], head), judge, texts)
    placed = set(order)
    order = list(order) + [i for i in head if i not in placed]  # top-k algorithms: the rest in first-stage order
    ids = order + list(tail)
    return Scores(np.arange(len(ids), 0, -1, dtype=np.float64), ids)


def rerank_run(run, queries: Mapping[Any, str], judge, texts: Mapping | Callable, *,
               algorithm: str | RerankAlgorithm | None = None, depth: int = 20, show_progress: bool = False, **params):
    """Every query of ``run`` reranked (see :func:`rerank`); returns ``(Run, seconds per query)``.
    A query id of the run missing from ``queries`` is an error naming it."""
    from salience.core.run import Run, as_run

    algorithm = method_of("rerank", algorithm or default_algorithm(judge), RerankAlgorithm, **params)
    run = as_run(run)
    missing = [q for q in run if q not in queries]
    if missing:
        raise InvalidParameterError(f"the run ranks {len(missing)} queries with no text, e.g. {missing[0]!r}: pass "
                                    "the queries file the run was made from.")
    from salience.parallel import progress_bar

    out, start = {}, time.perf_counter()
    with progress_bar(len(run), "rerank", show_progress, unit="query") as bar:
        for q in run:
            out[q] = rerank(queries[q], run[q], judge, texts, algorithm=algorithm, depth=depth)
            bar.update(1)
    seconds = (time.perf_counter() - start) / max(len(run), 1)
    return Run(out, name=f"{run.name}+{judge.method}"), seconds

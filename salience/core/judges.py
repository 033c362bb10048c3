"""Judges: costly, noisy comparators and listwise rankers, wrapped so that every call is
counted, cached, optionally asked in both orders, bounded by a budget, and checked.

A *pairwise* judge is a callable ``judge(query, a, b)`` returning the probability that ``a``
belongs before ``b`` (a float in [0, 1]) or a preference ``1`` (a first), ``0`` (tie),
``-1`` (b first); ``True``/``False`` mean 1/-1. A *listwise* judge is a callable
``judge(query, items)`` returning the items best first, as the items themselves or as
positions ``0..m-1``.
"""

from __future__ import annotations

import numbers
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from salience.core.checks import check_n_jobs
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, JudgeError

__all__ = ["PairwiseJudge", "ListwiseJudge", "ScorerJudge", "as_pairwise", "as_listwise"]


class _CountingJudge:
    def __init__(self, fn: Callable, *, budget: int | None = None, cache: bool = True, n_jobs: int = 1):
        if not callable(fn):
            raise InvalidParameterError(f"a judge must be callable; got {type(fn).__name__}.")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0):
            raise InvalidParameterError(f"budget must be a non-negative integer or None; got {budget!r}.")
        n_jobs = check_n_jobs(n_jobs)  # -1: one thread per core, as everywhere
        self.fn = fn
        self.budget = budget
        self.n_jobs = int(n_jobs)
        self.calls = 0
        self.cache_hits = 0
        self._cache: dict | None = {} if cache else None

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.calls

    def require(self, needed: int, what: str) -> None:
        """Refuse up front when the remaining budget cannot cover ``needed`` calls."""
        if self.budget is not None and needed > self.remaining:
            raise InvalidParameterError(
                f"{what} needs up to {needed} judge calls, but the budget allows {self.remaining} more "
                f"(budget {self.budget}, {self.calls} used). Raise the budget to at least {self.calls + needed}, "
                "or ask for a smaller k."
            )

    def _run(self, keys: list, args: list[tuple], check: Callable) -> list:
        """Answer each key from the cache or by calling the judge (in a thread pool if asked)."""
        results: list = [None] * len(keys)
        todo: dict = {}
        for i, key in enumerate(keys):
            if self._cache is not None and key in self._cache:
                results[i] = self._cache[key]
                self.cache_hits += 1
            elif key in todo:
                todo[key].append(i)
                self.cache_hits += 1
            else:
                todo[key] = [i]
        pending = list(todo)
        if self.budget is not None and len(pending) > self.remaining:
            raise JudgeError(
                f"judge budget exhausted: {self.budget} calls allowed, {self.calls} used, {len(pending)} more needed."
            )
        call_args = [args[todo[key][0]] for key in pending]
        first_call = self.calls + 1
        self.calls += len(pending)

        def call(j: int):
            try:
                value = self.fn(*call_args[j])
            except Exception as err:  # a judge is user code: name the call, keep the cause
                raise JudgeError(f"judge call #{first_call + j} {self._describe(call_args[j])} raised {type(err).__name__}: {err}") from err
            return check(value, call_args[j], first_call + j)

        if self.n_jobs > 1 and len(pending) > 1:
            with ThreadPoolExecutor(max_workers=self.n_jobs) as pool:
                answers = list(pool.map(call, range(len(pending))))
        else:
            answers = [call(j) for j in range(len(pending))]
        for key, answer in zip(pending, answers):
            if self._cache is not None:
                self._cache[key] = answer
            for i in todo[key]:
                results[i] = answer
        return results

    @staticmethod
    def _describe(args: tuple) -> str:
        text = ", ".join(repr(a) for a in args)
        return f"judge({text[:200]}{'...' if len(text) > 200 else ''})"


class PairwiseJudge(_CountingJudge):
    """A counted, cached pairwise judge.

    ``both_orders=True`` asks ``(a, b)`` and ``(b, a)`` and averages ``P(a first)`` with
    ``1 - P(b first)``, cancelling a bias toward the first (or second) position.

    >>> judge = PairwiseJudge(lambda q, a, b: a < b, both_orders=True)
    >>> judge.prefer(None, 1, 2), judge.calls
    (1.0, 2)
    """

    def __init__(self, fn, *, both_orders: bool = False, budget=None, cache=True, n_jobs=1):
        super().__init__(fn, budget=budget, cache=cache, n_jobs=n_jobs)
        self.both_orders = bool(both_orders)

    @property
    def calls_per_comparison(self) -> int:
        return 2 if self.both_orders else 1

    @staticmethod
    def _check(value: Any, args: tuple, number: int) -> float:
        if isinstance(value, (bool, np.bool_)):
            return 1.0 if value else 0.0
        if isinstance(value, numbers.Integral) and value in (-1, 0, 1):
            return (float(value) + 1.0) / 2.0
        if isinstance(value, numbers.Real) and 0.0 <= float(value) <= 1.0:
            return float(value)
        raise JudgeError(
            f"judge call #{number} {_CountingJudge._describe(args)} returned {value!r}; "
            "a pairwise judge must return a probability in [0, 1], or -1 / 0 / 1."
        )

    def prefer_batch(self, query: Any, pairs: Sequence[tuple[Hashable, Hashable]]) -> list[float]:
        """``P(a before b)`` for each pair."""
        keys, args = [], []
        for a, b in pairs:
            keys.append((query, a, b))
            args.append((query, a, b))
            if self.both_orders:
                keys.append((query, b, a))
                args.append((query, b, a))
        answers = self._run(keys, args, self._check)
        if not self.both_orders:
            return answers
        return [(answers[2 * i] + 1.0 - answers[2 * i + 1]) / 2.0 for i in range(len(pairs))]

    def prefer(self, query: Any, a: Hashable, b: Hashable) -> float:
        return self.prefer_batch(query, [(a, b)])[0]


class ListwiseJudge(_CountingJudge):
    """A counted, cached listwise judge; answers are checked to be permutations of the input."""

    @staticmethod
    def _check(value: Any, args: tuple, number: int) -> list:
        items = list(args[1])
        try:
            answer = list(value)
        except TypeError:
            answer = None
        if answer is not None and len(answer) == len(items):
            try:
                if set(answer) == set(items) and len(set(answer)) == len(answer):
                    return answer
            except TypeError:  # unhashable entries: not ids
                pass
            if all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in answer) and sorted(answer) == list(range(len(items))):
                return [items[i] for i in answer]
        raise JudgeError(
            f"judge call #{number} {_CountingJudge._describe(args)} returned {value!r}; "
            f"a listwise judge must return a permutation of its {len(items)} items (or of positions 0..{len(items) - 1})."
        )

    def rank_batch(self, query: Any, lists: Sequence[Sequence[Hashable]]) -> list[list]:
        keys = [(query, tuple(items)) for items in lists]
        args = [(query, list(items)) for items in lists]
        return self._run(keys, args, self._check)

    def rank(self, query: Any, items: Sequence[Hashable]) -> list:
        return self.rank_batch(query, [items])[0]


def as_pairwise(judge) -> PairwiseJudge:
    if isinstance(judge, PairwiseJudge):
        return judge
    if isinstance(judge, ScorerJudge):
        return PairwiseJudge(judge.pairwise)
    if isinstance(judge, ListwiseJudge):
        raise InvalidParameterError("this algorithm needs a pairwise judge; got a ListwiseJudge.")
    return PairwiseJudge(judge)


def as_listwise(judge) -> ListwiseJudge:
    if isinstance(judge, ListwiseJudge):
        return judge
    if isinstance(judge, ScorerJudge):
        return ListwiseJudge(judge.listwise)
    if isinstance(judge, PairwiseJudge):
        raise InvalidParameterError("this algorithm needs a listwise judge; got a PairwiseJudge.")
    return ListwiseJudge(judge)


class ScorerJudge:
    """Turn any scorer into pairwise and listwise judges.

    ``scorer(query, items)`` returns one score per item (a sequence, an array or
    :class:`~salience.Scores`); a BM25 index's :meth:`~salience.search.BM25.score` fits, as
    does any function. ``pairwise`` gives ``sigmoid((s_a - s_b) / temperature)`` (or a hard
    1 / 0.5 / 0 with ``temperature=0``); ``listwise`` sorts by score, ties kept in input order.

    >>> judge = ScorerJudge(lambda q, items: [len(i) for i in items])
    >>> judge.listwise(None, ["bb", "a", "ccc"])
    ['ccc', 'bb', 'a']
    """

    def __init__(self, scorer: Callable, *, temperature: float = 1.0):
        if not callable(scorer):
            raise InvalidParameterError(f"scorer must be callable; got {type(scorer).__name__}.")
        if not isinstance(temperature, numbers.Real) or temperature < 0:
            raise InvalidParameterError(f"temperature must be a number >= 0; got {temperature!r}.")
        self.scorer = scorer
        self.temperature = float(temperature)

    def scores(self, query: Any, items: Sequence[Hashable]) -> np.ndarray:
        raw = self.scorer(query, list(items))
        values = raw.values if isinstance(raw, Scores) else np.asarray(raw, dtype=np.float64)
        if values.shape != (len(items),) or np.isnan(values).any():
            raise JudgeError(f"scorer returned {values.shape[0] if values.ndim else 'a scalar'} scores (or NaN) for {len(items)} items.")
        return values

    def pairwise(self, query: Any, a: Hashable, b: Hashable) -> float:
        sa, sb = self.scores(query, [a, b])
        if self.temperature == 0:
            return 1.0 if sa > sb else 0.0 if sa < sb else 0.5
        return float(1.0 / (1.0 + np.exp(-(sa - sb) / self.temperature)))

    def listwise(self, query: Any, items: Sequence[Hashable]) -> list:
        values = self.scores(query, items)
        return [items[i] for i in np.argsort(-values, kind="stable")]

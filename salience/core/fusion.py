"""Fusion of several runs into one: RRF, Borda, CombSUM / MNZ / MAX / MIN, weighted sum.

Definitions follow ranx (so results agree with ``ranx.fuse``): normalisations are applied per
subject and run (see :meth:`salience.Scores.normalize`; ``borda`` normalises over the union of
candidates), then the method combines the runs' scores or ranks:

* ``rrf``: sum of ``w / (k + rank)`` (Cormack et al., 2009), ``k = 60``;
* ``borda`` (BordaFuse, Aslam and Montague, 2001): a run gives ``n - i`` points to its item at
  0-based rank ``i`` and ``(n - len(run) + 1) / 2`` to each candidate it did not rank, where
  ``n`` is the number of candidates;
* ``combsum`` / ``wsum``: sum of (weighted) scores over the runs that hold the item;
* ``combmnz``: that sum times the number of runs holding the item;
* ``combmax`` / ``combmin``: the largest / smallest (weighted) score over the runs holding the item.

Ties in the fused ranking keep the order in which items were first met (run by run, best first).

References
----------
Fox and Shaw. Combination of multiple searches. TREC 1993.
Cormack, Clarke and Buettcher. Reciprocal rank fusion outperforms Condorcet and individual rank
learning methods. SIGIR 2009.
Aslam and Montague. Models for metasearch. SIGIR 2001.
"""

from __future__ import annotations

import abc
from itertools import chain
from typing import Mapping, Sequence

import numpy as np

from salience.core.base import Scorer, register_method, registered_name
from salience.core.params import Interval, Options
from salience.core.run import Run, as_run
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError

__all__ = ["fuse", "FUSION_NORMS", "Fuser", "reciprocal_rank"]

FUSION_NORMS = ("minmax", "zscore", "sum", "max", "rank", "borda")


def _check_weights(weights, n_runs: int) -> np.ndarray:
    if weights is None:
        return np.ones(n_runs)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_runs,):
        raise InvalidParameterError(f"weights needs one number per run; got {w.size} weights for {n_runs} runs.")
    if not np.isfinite(w).all() or (w < 0).any():
        raise InvalidParameterError(f"weights must be finite and non-negative; got {w.tolist()}.")
    return w


def _borda_norm(ranked: Scores, candidates: list) -> dict:
    n = len(candidates)
    position = {item: i for i, item in enumerate(ranked.ids)}
    unranked = 0.5 - (len(ranked) - 1) / (2 * n)
    return {c: (1 - position[c] / n) if c in position else unranked for c in candidates}


def fuse(runs: Sequence[Run | Mapping], *, method: str = "rrf", name: str | None = None, **params) -> Run:
    """Fuse runs that rank the same subjects.

    Parameters
    ----------
    runs : sequence of Run or ``{subject: {item: score}}``
        Two or more runs.
    method : a registered ``fusion`` method ({"rrf", "borda", "combsum", "combmnz", "combmax", "combmin", "wsum"})
    **params : that method's parameters, below (one that does not apply to it is refused)
    normalize : {"minmax", "zscore", "sum", "max", "rank", "borda"} or None
        Per-subject score normalisation applied before score-based methods (refused with the
        rank-based ``rrf`` and ``borda``, where it would do nothing).
    weights : sequence of float, optional
        One non-negative weight per run (required for ``wsum``; multiplies each run's
        contribution in every method).
    rrf_k : float
        RRF constant (``rrf`` only).
    missing_subjects : {"error", "empty"}
        A subject absent from some run is an error, or treated as an empty ranking there (the
        name says subjects: ``evaluate``'s ``missing`` is about judged subjects a run lacks).

    Examples
    --------
    >>> a = {"q": {"d1": 3.0, "d2": 2.0}}
    >>> b = {"q": {"d2": 9.0, "d3": 1.0}}
    >>> fuse([a, b], method="rrf")["q"].ranked_ids()
    ['d2', 'd1', 'd3']
    """
    from salience.core.base import create

    return create("fusion", method, **params).fuse(runs, name=name)


class Fuser(Scorer, abc.ABC):
    """Base of the fusion methods: ``score(rankings)`` fuses one subject's rankings (a list of
    :class:`~salience.Scores`), ``score_batch`` many subjects, ``fuse(runs)`` whole runs.
    A subclass combines one subject's rankings (in rank order) in :meth:`combine`.

    >>> from salience.core.base import create
    >>> create("fusion", "rrf").score([Scores([3.0, 2.0], ids=["d1", "d2"]), Scores([9.0, 1.0], ids=["d2", "d3"])]).ranked_ids()
    ['d2', 'd1', 'd3']
    """

    _parameter_constraints = {"weights": [None, "array-like"], "missing_subjects": [Options(("error", "empty"))]}

    def __init__(self, *, weights: Sequence[float] | None = None, missing_subjects: str = "error"):
        self.weights, self.missing_subjects = weights, missing_subjects
        self._validate_params()

    @abc.abstractmethod
    def combine(self, ranked: list[Scores], w: np.ndarray, candidates: list) -> Scores:
        """The subclass's part (see the class docstring)."""

    def score(self, rankings: Sequence[Scores]) -> Scores:
        if isinstance(rankings, Scores) or len(rankings) < 2 or not all(isinstance(r, Scores) for r in rankings):
            raise InvalidParameterError("rankings must be a list of two or more Scores (one subject's rankings).")
        return self._subject([r.sorted() for r in rankings], _check_weights(self.weights, len(rankings)))

    def score_batch(self, batch: Sequence[Sequence[Scores]]) -> list[Scores]:
        return [self.score(rankings) for rankings in batch]

    def _subject(self, ranked: list[Scores], w: np.ndarray) -> Scores:
        candidates = list(dict.fromkeys(chain.from_iterable(r.ids for r in ranked)))
        if not candidates:
            return Scores([], ids=[])
        return self.combine(ranked, w, candidates)

    def fuse(self, runs: Sequence[Run | Mapping], *, name: str | None = None) -> Run:
        """Fuse whole runs that rank the same subjects (see :func:`fuse`)."""
        if isinstance(runs, (Run, Mapping)) or len(runs) < 2:
            raise InvalidParameterError("fuse needs a list of two or more runs.")
        runs = [as_run(r, name=f"run{i}") for i, r in enumerate(runs)]
        w = _check_weights(self.weights, len(runs))
        subjects = list(dict.fromkeys(s for run in runs for s in run))
        if self.missing_subjects == "error":
            for i, run in enumerate(runs):
                absent = [s for s in subjects if s not in run]
                if absent:
                    raise IdMismatchError(
                        f"run {i} ({run.name!r}) has no ranking for {len(absent)} subject(s), e.g. {absent[0]!r}; "
                        "runs to fuse must rank the same subjects. Pass missing_subjects='empty' to treat them as "
                        "empty rankings."
                    )
        empty = Scores([], ids=[])
        fused = {subject: self._subject([run[subject].sorted() if subject in run else empty for run in runs], w)
                 for subject in subjects}
        return Run(fused, name=name or registered_name(self, "fusion"))


def reciprocal_rank(rank: np.ndarray, k: float, weight: float = 1.0) -> np.ndarray:
    """RRF's contribution ``weight / (k + rank)`` of items at 1-based ``rank`` (Cormack et al.,
    2009): what :class:`RRF` adds per run, for callers that rank many subjects at once."""
    return weight / (k + rank)


def _positions(r: Scores, index: dict) -> np.ndarray:
    return np.fromiter(map(index.__getitem__, r.ids), dtype=np.int64, count=len(r))


@register_method("fusion", "rrf", "reciprocal rank fusion: sum of 1 / (rrf_k + rank) (Cormack et al., 2009)")
class RRF(Fuser):
    _parameter_constraints = {"rrf_k": [Interval("real", 0)]}

    def __init__(self, *, weights: Sequence[float] | None = None, rrf_k: float = 60, missing_subjects: str = "error"):
        self.rrf_k = rrf_k
        super().__init__(weights=weights, missing_subjects=missing_subjects)

    def combine(self, ranked, w, candidates) -> Scores:
        # run by run, in order, as a running sum: the same additions (and roundings) item by item
        index, total, k = dict(zip(candidates, range(len(candidates)))), np.zeros(len(candidates)), float(self.rrf_k)
        for weight, r in zip(w, ranked):
            contribution = np.zeros(len(candidates))
            contribution[_positions(r, index)] = reciprocal_rank(np.arange(1, len(r) + 1), k, weight)
            total += contribution
        return Scores.unchecked(total, candidates).sorted()


@register_method("fusion", "borda", "Borda count: each run gives an item points by its rank")
class BordaFuse(Fuser):
    def combine(self, ranked, w, candidates) -> Scores:
        n = len(candidates)
        index, total = dict(zip(candidates, range(len(candidates)))), np.zeros(n)
        for weight, r in zip(w, ranked):
            contribution = np.full(n, (n - len(r) + 1) / 2)
            contribution[_positions(r, index)] = n - np.arange(len(r))
            total += contribution * weight
        return Scores.unchecked(total, candidates).sorted()


class _ScoreFusion(Fuser):
    """Score-based fusion: each run's scores normalised per subject (``normalize``), weighted,
    then combined over the runs that hold the item by :meth:`reduce`."""

    _parameter_constraints = {"normalize": [None, Options(FUSION_NORMS)]}

    def __init__(self, *, normalize: str | None = None, weights: Sequence[float] | None = None,
                 missing_subjects: str = "error"):
        self.normalize = normalize
        super().__init__(weights=weights, missing_subjects=missing_subjects)

    def combine(self, ranked, w, candidates) -> Scores:
        runs = _normalized(ranked, self.normalize, candidates)
        index = dict(zip(candidates, range(len(candidates))))
        values = self.fused_values([r.values for r in runs], w, [_positions(r, index) for r in runs], len(candidates))
        # candidates are distinct and every value finite (normalised scores, finite weights): no checks
        return Scores.unchecked(values, candidates).sorted()

    def fused_values(self, runs: list[np.ndarray], w: np.ndarray, places: list[np.ndarray], n: int) -> np.ndarray:
        """Each of ``n`` candidates' fused score from the normalised scores of ``runs`` (one
        array per run, rank order), whose items stand at ``places`` among the candidates (a
        caller that numbers the candidates its own way, as the hybrid does by index position,
        gets the same additions in the same order)."""
        total, held = np.zeros(n), np.zeros(n, dtype=np.int64)
        largest, smallest = np.full(n, -np.inf), np.full(n, np.inf)
        for weight, run, pos in zip(w, runs, places):
            values = weight * run
            total[pos] += values
            held[pos] += 1
            largest[pos] = np.maximum(largest[pos], values)
            smallest[pos] = np.minimum(smallest[pos], values)
        return self.reduce(total, held, largest, smallest)

    @abc.abstractmethod
    def reduce(self, total, held, largest, smallest) -> np.ndarray:
        """The subclass's part (see the class docstring)."""


@register_method("fusion", "combsum", "sum of (normalised) scores (Fox and Shaw, 1994)")
class CombSUM(_ScoreFusion):
    def reduce(self, total, held, largest, smallest):
        return total


@register_method("fusion", "combmnz", "CombSUM times the number of runs that rank the item")
class CombMNZ(_ScoreFusion):
    def reduce(self, total, held, largest, smallest):
        return total * held


@register_method("fusion", "combmax", "the largest (normalised) score")
class CombMAX(_ScoreFusion):
    def reduce(self, total, held, largest, smallest):
        return largest


@register_method("fusion", "combmin", "the smallest (normalised) score")
class CombMIN(_ScoreFusion):
    def reduce(self, total, held, largest, smallest):
        return smallest


@register_method("fusion", "wsum", "weighted sum of (normalised) scores, one weight per run")
class WSum(CombSUM):
    def __init__(self, *, weights: Sequence[float] | None = None, normalize: str | None = None,
                 missing_subjects: str = "error"):
        super().__init__(normalize=normalize, weights=weights, missing_subjects=missing_subjects)

    def _validate_params(self) -> None:
        if self.weights is None:
            raise InvalidParameterError("method='wsum' needs weights=[...], one per run.")
        super()._validate_params()


def _normalized(ranked: list[Scores], norm: str | None, candidates: list) -> list[Scores]:
    """Each run's scores after ``norm``, in rank order (``borda`` scores every candidate)."""
    if norm is None:
        return ranked
    if norm == "borda":
        return [Scores.from_dict(_borda_norm(r, candidates)).sorted() for r in ranked]
    return [r.normalize(norm) for r in ranked]  # monotone: rank order is kept

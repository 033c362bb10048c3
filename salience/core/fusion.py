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

import math
import numbers
from typing import Mapping, Sequence

import numpy as np

from salience.core.base import Scorer, register, reject_options
from salience.core.run import Run, as_run
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError, unknown_choice

__all__ = ["fuse", "FUSION_METHODS", "FUSION_NORMS"]

FUSION_METHODS = ("rrf", "borda", "combsum", "combmnz", "combmax", "combmin", "wsum")
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


def fuse(
    runs: Sequence[Run | Mapping],
    *,
    method: str = "rrf",
    normalize: str | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: float = 60,
    missing_subjects: str = "error",
    name: str | None = None,
) -> Run:
    """Fuse runs that rank the same subjects.

    Parameters
    ----------
    runs : sequence of Run or ``{subject: {item: score}}``
        Two or more runs.
    method : {"rrf", "borda", "combsum", "combmnz", "combmax", "combmin", "wsum"}
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
    _check_fusion(method, normalize, weights, rrf_k, missing_subjects)
    if isinstance(runs, (Run, Mapping)) or len(runs) < 2:
        raise InvalidParameterError("fuse needs a list of two or more runs.")
    runs = [as_run(r, name=f"run{i}") for i, r in enumerate(runs)]
    w = _check_weights(weights, len(runs))
    subjects = list(dict.fromkeys(s for run in runs for s in run))
    if missing_subjects == "error":
        for i, run in enumerate(runs):
            absent = [s for s in subjects if s not in run]
            if absent:
                raise IdMismatchError(
                    f"run {i} ({run.name!r}) has no ranking for {len(absent)} subject(s), e.g. {absent[0]!r}; "
                    "runs to fuse must rank the same subjects. Pass missing_subjects='empty' to treat them as empty rankings."
                )
    empty = Scores([], ids=[])
    fused: dict = {}
    for subject in subjects:
        ranked = [run[subject].sorted() if subject in run else empty for run in runs]
        fused[subject] = _fuse_subject(ranked, method, normalize, w, float(rrf_k))
    return Run(fused, name=name or method)


def _check_fusion(method, normalize, weights, rrf_k, missing_subjects) -> None:
    if method not in FUSION_METHODS:
        raise unknown_choice("fusion method", method, FUSION_METHODS)
    if normalize is not None and normalize not in FUSION_NORMS:
        raise unknown_choice("normalization", normalize, FUSION_NORMS)
    if missing_subjects not in ("error", "empty"):
        raise unknown_choice("missing_subjects", missing_subjects, ("error", "empty"))
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, numbers.Real) or not math.isfinite(rrf_k) or rrf_k < 0:
        raise InvalidParameterError(f"rrf_k must be a finite number >= 0; got {rrf_k!r}.")
    if method == "wsum" and weights is None:
        raise InvalidParameterError("method='wsum' needs weights=[...], one per run.")
    allowed = ("weights",) + (("rrf_k",) if method == "rrf" else ()) + (("normalize",) if method not in ("rrf", "borda") else ())
    reject_options(method, {"normalize": normalize, "rrf_k": rrf_k}, allowed, {"rrf_k": 60},
                   {"rrf_k": "rrf", "normalize": "the score-based methods (combsum, combmnz, combmax, combmin, wsum)"})


class Fuser(Scorer):
    """One fusion method with its options: ``score(rankings)`` fuses one subject's rankings
    (a list of :class:`~salience.Scores`), ``score_batch`` many subjects, ``fuse(runs)`` whole runs.

    >>> Fuser(method="rrf").score([Scores([3.0, 2.0], ids=["d1", "d2"]), Scores([9.0, 1.0], ids=["d2", "d3"])]).ranked_ids()
    ['d2', 'd1', 'd3']
    """

    def __init__(self, *, method: str = "rrf", normalize: str | None = None, weights: Sequence[float] | None = None,
                 rrf_k: float = 60, missing_subjects: str = "error"):
        _check_fusion(method, normalize, weights, rrf_k, missing_subjects)
        self.method, self.normalize, self.weights, self.rrf_k = method, normalize, weights, rrf_k
        self.missing_subjects = missing_subjects

    def score(self, rankings: Sequence[Scores]) -> Scores:
        if isinstance(rankings, Scores) or len(rankings) < 2 or not all(isinstance(r, Scores) for r in rankings):
            raise InvalidParameterError("rankings must be a list of two or more Scores (one subject's rankings).")
        w = _check_weights(self.weights, len(rankings))
        return _fuse_subject([r.sorted() for r in rankings], self.method, self.normalize, w, float(self.rrf_k))

    def score_batch(self, batch: Sequence[Sequence[Scores]]) -> list[Scores]:
        return [self.score(rankings) for rankings in batch]

    def fuse(self, runs: Sequence[Run | Mapping], *, name: str | None = None) -> Run:
        return fuse(runs, **self.get_params(), name=name)


_DESCRIPTIONS = {
    "rrf": "reciprocal rank fusion: sum of 1 / (rrf_k + rank) (Cormack et al., 2009)",
    "borda": "Borda count: each run gives an item points by its rank",
    "combsum": "sum of (normalised) scores (Fox and Shaw, 1994)",
    "combmnz": "CombSUM times the number of runs that rank the item",
    "combmax": "the largest (normalised) score",
    "combmin": "the smallest (normalised) score",
    "wsum": "weighted sum of (normalised) scores, one weight per run",
}
for _method in FUSION_METHODS:
    register("fusion", _method, Fuser, _DESCRIPTIONS[_method], method=_method)


def _normalized(ranked: list[Scores], norm: str | None, candidates: list) -> list[Scores]:
    """Each run's scores after ``norm``, in rank order (``borda`` scores every candidate)."""
    if norm is None:
        return ranked
    if norm == "borda":
        return [Scores.from_dict(_borda_norm(r, candidates)).sorted() for r in ranked]
    return [r.normalize(norm) for r in ranked]  # monotone: rank order is kept


def _fuse_subject(ranked: list[Scores], method: str, norm: str | None, w: np.ndarray, k: float) -> Scores:
    candidates = list(dict.fromkeys(item for r in ranked for item in r.ids))
    if not candidates:
        return Scores([], ids=[])
    runs = _normalized(ranked, norm, candidates)
    n = len(candidates)
    index = {item: i for i, item in enumerate(candidates)}
    # run by run, in order, as a running sum: the same additions (and roundings) item by item
    total = np.zeros(n)
    if method in ("rrf", "borda"):
        for weight, r in zip(w, runs):
            pos = np.fromiter(map(index.__getitem__, r.ids), dtype=np.int64, count=len(r))
            if method == "rrf":
                contribution = np.zeros(n)
                contribution[pos] = weight / (k + np.arange(1, len(r) + 1))
            else:
                contribution = np.full(n, (n - len(r) + 1) / 2)
                contribution[pos] = n - np.arange(len(r))
                contribution *= weight
            total += contribution
        return Scores.unchecked(total, candidates).sorted()
    held = np.zeros(n, dtype=np.int64)
    extreme = np.full(n, -np.inf if method == "combmax" else np.inf)
    for weight, r in zip(w, runs):
        pos = np.fromiter(map(index.__getitem__, r.ids), dtype=np.int64, count=len(r))
        values = weight * r.values
        total[pos] += values
        held[pos] += 1
        if method == "combmax":
            extreme[pos] = np.maximum(extreme[pos], values)
        elif method == "combmin":
            extreme[pos] = np.minimum(extreme[pos], values)
    if method in ("combsum", "wsum"):
        fused = total
    elif method == "combmnz":
        fused = total * held
    else:
        fused = extreme
    return Scores(fused, ids=candidates).sorted()

"""Label errors by confident learning (Northcutt, Jiang and Chuang, 2021), on the valuation contract.

Out-of-fold predicted probabilities (``folds`` fits of the model, each row predicted by the fit
that did not see it) give every row a label quality: the probability of its given label
(self-confidence) or that less the most likely other label's (normalized margin); the lowest
are the likeliest errors. The rows flagged as label issues (``label_issues_``) come from the
confident joint: per class j the threshold ``t_j`` is the mean predicted probability of j over
the rows labelled j; a row counts toward (given label, class j) when its probability of j
reaches ``t_j`` (the likeliest such j); the joint is calibrated to the label counts, and for
each off-diagonal cell that many rows of the given label with the largest margin ``p_j -
p_given`` are flagged (pruning by noise rate), unless the model's own prediction agrees with
the given label (cleanlab's defaults).

``neighbors=k`` averages that label quality with the share of the row's ``k`` nearest other rows
(euclidean, in the features) that carry its label: the neighbourhood vote of deep k-NN label
filtering (Bahri, Jiang and Gupta, 2020), which costs no fit and catches errors a linear model's
probabilities blur. ``k = 5`` was chosen on sets the benchmark does not report (iris, the DSIR
pool's eight smaller domains, a synthetic four-class set): there the blend was at or above plain
self-confidence on all three.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from salience.core.base import register_method
from salience.core.params import SEED, Interval, Options
from salience.data.utility import fresh, require_sklearn
from salience.data.valuation import Valuation
from salience.exceptions import InvalidParameterError

__all__ = ["ConfidentLearning", "out_of_fold_probabilities", "confident_joint", "label_issues", "neighbor_agreement"]


@register_method("valuation", "confident_learning", "label quality from out-of-fold probabilities; label issues by the "
                                               "confident joint (Northcutt et al., 2021)")
class ConfidentLearning(Valuation):
    """Label quality of every training row (higher: the given label is more likely right) from
    ``folds`` out-of-fold fits of ``model`` (it needs ``predict_proba``); ``rank_by``:
    ``self_confidence`` (cleanlab's default) or ``normalized_margin``; ``neighbors``: average it with
    the share of the ``neighbors`` nearest other rows carrying the row's label (no extra fit; None:
    cleanlab's score alone). After ``score``:
    ``probabilities_`` (rows x classes, out of fold), ``classes_`` and ``label_issues_`` (a
    boolean per row). The test set is not used and may be omitted."""

    _parameter_constraints = {"folds": [Interval("int", 2)], "rank_by": [Options(("self_confidence",
                                                                                  "normalized_margin"))],
                              "neighbors": [None, Interval("int", 1)], "seed": SEED}
    needs_test = False

    def __init__(self, *, model: Any = None, folds: int = 5, rank_by: str = "self_confidence",
                 neighbors: int | None = None, seed: Any = 0, n_jobs: int = 1, executor: Any = "local",
                 show_progress: bool = False):
        self.folds, self.rank_by, self.neighbors, self.seed = folds, rank_by, neighbors, seed
        super().__init__(model=model, n_jobs=n_jobs, executor=executor, show_progress=show_progress)

    def _values(self, utility):
        train = utility.train
        if not callable(getattr(utility.model, "predict_proba", None)):
            raise InvalidParameterError(f"model {type(utility.model).__name__} has no predict_proba: confident "
                                        "learning needs predicted probabilities (e.g. LogisticRegression).")
        probabilities = out_of_fold_probabilities(utility.model, train.X, train.codes, folds=self.folds, seed=self.seed,
                                                  runner=utility.runner)
        utility.fits += self.folds
        self.probabilities_, self.classes_ = probabilities, train.classes
        self.label_issues_ = label_issues(probabilities, train.codes)
        quality = probabilities[np.arange(len(train)), train.codes]
        if self.rank_by == "normalized_margin":
            others = probabilities.copy()
            others[np.arange(len(train)), train.codes] = -np.inf
            quality = quality - others.max(axis=1)
        if self.neighbors is None:
            return quality
        return (quality + neighbor_agreement(train.X, train.codes, self.neighbors)) / 2


def neighbor_agreement(X: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """The share of each row's ``k`` nearest other rows (euclidean) whose code is its own; a row
    whose copies crowd it out of its own neighbour list still leaves itself out."""
    if k >= len(codes):
        raise InvalidParameterError(f"neighbors={k} needs more than {k} training rows; train has {len(codes)}.")
    NearestNeighbors = require_sklearn("neighbors", "confident learning's neighbour vote").NearestNeighbors
    found = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X, return_distance=False)
    others = found != np.arange(len(codes))[:, None]
    others[others.all(axis=1), -1] = False  # itself not found among its copies: drop the farthest instead
    neighbours = found[others].reshape(len(codes), k)
    return (codes[neighbours] == codes[:, None]).mean(axis=1)


def _fold_job(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    model, X, codes, train_rows, held_rows, n_classes = job
    fitted = fresh(model)
    fitted.fit(X[train_rows], codes[train_rows])
    out = np.zeros((len(held_rows), n_classes))
    out[:, np.asarray(fitted.classes_, dtype=int)] = fitted.predict_proba(X[held_rows])
    return held_rows, out


def out_of_fold_probabilities(model: Any, X: np.ndarray, codes: np.ndarray, *, folds: int = 5, seed: Any = 0,
                              runner=None) -> np.ndarray:
    """Each row's predicted class probabilities (columns: class codes 0..K-1) from the one of
    ``folds`` stratified fits that held it out (a class with fewer rows than folds is missing
    from some fits, which then give it probability 0, as cleanlab's cross-validation does)."""
    import warnings

    StratifiedKFold = require_sklearn("model_selection", "Out-of-fold probabilities").StratifiedKFold

    if len(codes) < folds:
        raise InvalidParameterError(f"train has {len(codes)} rows, fewer than folds={folds}.")
    counts = np.bincount(codes)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True,
                               random_state=int(np.random.default_rng(seed).integers(2**31)))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class")
        splits = list(splitter.split(X, codes))
    jobs = [(model, X, codes, train_rows, held_rows, len(counts)) for train_rows, held_rows in splits]
    results = runner.map(_fold_job, jobs) if runner is not None else [_fold_job(job) for job in jobs]
    probabilities = np.zeros((len(codes), len(counts)))
    for held_rows, out in results:
        probabilities[held_rows] = out
    return probabilities


def confident_joint(probabilities: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The calibrated confident joint: counts of (given label, likely true label), each row
    scaled to its given label's count."""
    n_classes = probabilities.shape[1]
    thresholds = np.array([probabilities[codes == j, j].mean() for j in range(n_classes)])
    above = probabilities >= thresholds[None, :] - 1e-6 * np.finfo(float).eps
    masked = np.where(above, probabilities, -np.inf)
    counted = above.any(axis=1)
    likely = masked.argmax(axis=1)
    joint = np.zeros((n_classes, n_classes))
    np.add.at(joint, (codes[counted], likely[counted]), 1)
    totals = np.bincount(codes, minlength=n_classes).astype(float)
    row_sums = joint.sum(axis=1, keepdims=True)
    return np.divide(joint * totals[:, None], row_sums, out=np.zeros_like(joint), where=row_sums > 0)


def label_issues(probabilities: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Rows flagged as label errors by pruning the confident joint's off-diagonal counts (the
    largest margins first), never a row whose predicted class is its given label."""
    joint = confident_joint(probabilities, codes)
    flagged = np.zeros(len(codes), dtype=bool)
    for given in range(joint.shape[0]):
        rows = np.flatnonzero(codes == given)
        for true in range(joint.shape[1]):
            if true == given:
                continue
            count = int(round(joint[given, true]))
            if count:
                margin = probabilities[rows, true] - probabilities[rows, given]
                flagged[rows[np.argsort(-margin, kind="stable")[:count]]] = True
    flagged &= probabilities.argmax(axis=1) != codes
    return flagged

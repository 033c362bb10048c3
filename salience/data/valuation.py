"""Data valuation: which training examples matter to a model, the ``valuation`` family (apart
from the ``data`` family's document scorers: its verb values labelled rows against a test set).

Every method scores the rows of a labelled training set ``(X_train, y_train)`` against a
labelled test set and returns :class:`~salience.Scores` over the training rows (higher: the
example helps the model more; the lowest are the suspects: mislabelled, off-distribution)::

    KnnShapley(k=10).score((X_train, y_train), (X_test, y_test))
    create("valuation", "tmc_shapley", budget=2000, seed=0).score(train, test, ids=names)

The value of a coalition of examples is a model refitted on it and scored on the test set
(:class:`~salience.data.utility.ModelUtility`; budgets are counted in those fits); the
estimators are the core's cooperative-game machinery (:mod:`salience.core.games`), which the
explain domain's Shapley values share. After ``score``, ``fits_`` holds the fits made, and the
sampling methods' ``standard_errors_`` and ``converged_`` (stopped by ``tolerance`` before the
budget) say how far to trust the values; ``failed_fits_`` counts coalitions the model could not
be fitted on (valued as the empty coalition, as pyDVL does), ``first_failure_`` says why.
``score(..., journal=PATH)`` keeps every evaluated coalition on disk: a run killed midway and
started again with the same settings replays them instead of refitting, and ends with the values
an unbroken run gives (:mod:`salience.data.journal`); the journal is removed once the values are
returned.

* ``loo``: leave-one-out, ``v(N) - v(N - i)`` (n + 1 fits);
* ``knn_shapley``: exact Shapley values of a k-nearest-neighbour classifier's test likelihood
  in closed form (Jia et al., 2019): no fit, O(n log n) per test row;
* ``data_banzhaf``: Banzhaf values by maximum sample reuse (Wang and Jia, 2023), robust to
  the noise of refitting;
* ``tmc_shapley``: Shapley values by truncated Monte Carlo over permutations (Ghorbani and
  Zou, 2019);
* ``beta_shapley``: Beta(alpha, beta) Shapley (Kwon and Zou, 2022), the same walks reweighted
  by position; alpha = 16, beta = 1 stresses small coalitions, where one example's effect shows.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

import numpy as np

from salience.core.base import Scorer, register_method
from salience.core.games import (RunningMean, banzhaf_regression, msr_banzhaf, permutation_contributions, random_orders,
                                 position_weights, semivalue_weights)
from salience.core.params import SEED, Check, Exempt, Interval, Options
from salience.core.scores import Scores
from salience.data.utility import ModelUtility, check_ids, check_refittable, labelled, require_sklearn
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["Valuation", "LeaveOneOut", "KnnShapley", "DataBanzhaf", "TmcShapley", "BetaShapley", "knn_shapley_values",
           "exact_values", "coalition_values"]

_EXECUTOR = Check(lambda v: isinstance(v, str) or all(callable(getattr(v, verb, None)) for verb in ("map", "close")),
                  "'local', 'ray' or an executor object")


class Valuation(Scorer, abc.ABC):
    """Base of the valuation methods: ``score(train, test, ids=None)`` returns the training
    rows' values as :class:`~salience.Scores` (ids: positions unless given). ``model``: any
    scikit-learn-style estimator, refitted on coalitions (default: logistic regression);
    ``scoring``: the test metric (``None``: the model's ``score``); ``n_jobs`` and ``executor``
    (``local``, ``ray``) spread the fits; ``show_progress`` draws a bar."""

    _parameter_constraints = {"model": [None, Exempt("a scikit-learn estimator, checked when it is fitted")],
                              "scoring": [None, str, callable], "n_jobs": [Interval("int", 1)],
                              "executor": [_EXECUTOR], "show_progress": [bool]}
    #: whether the method refits ``model`` (KNN-Shapley does not); whether it needs the test set
    uses_model = True
    needs_test = True
    #: which end of the values holds the suspects (mislabelled rows): "lowest" for values, "highest"
    #: for difficulty scores (EL2N, GraNd, forgetting)
    suspects = "lowest"

    def __init__(self, *, model: Any = None, scoring: Any = None, n_jobs: int = 1, executor: Any = "local",
                 show_progress: bool = False):
        self.model, self.scoring, self.n_jobs, self.executor = model, scoring, n_jobs, executor
        self.show_progress = show_progress
        self._validate_params()

    def score(self, train, test=None, *, ids: Sequence | None = None, journal: Any = None) -> Scores:
        """The value of each of ``train``'s rows for a model tested on ``test`` (both ``(X, y)``).
        ``journal``: a file keeping the coalitions evaluated, so that a killed run resumes (the
        methods that refit the model on coalitions); removed when the values are returned."""
        train = labelled(train, "train")
        if test is None and self.needs_test:
            raise InvalidParameterError(f"{type(self).__name__} values rows by a test score: pass test=(X_test, "
                                        "y_test).")
        test = labelled(test, "test", classes=False) if test is not None else train
        if not self.uses_model or _classifies(self.model):
            check_shared_labels(train.y, test.y)
        if train.X.shape[1] != test.X.shape[1]:
            raise ShapeError(f"train has {train.X.shape[1]} features, test {test.X.shape[1]}.")
        ids = check_ids(ids, len(train))
        model = check_refittable(self.model) if self.uses_model else None
        log = self._journal(journal, model, train, test) if journal is not None and self.uses_model else None
        utility = ModelUtility(model, train, test, scoring=self.scoring, executor=self.executor, n_jobs=self.n_jobs,
                               journal=log)
        with utility:
            values = self._values(utility)
        self.replayed_fits_ = log.replayed if log is not None else 0
        if log is not None:
            log.remove()
        self.fits_ = utility.fits
        self.failed_fits_, self.first_failure_ = utility.failed_fits, utility.first_failure
        return Scores(values, ids=ids)

    def _journal(self, path: Any, model: Any, train, test):
        from salience.data.journal import CoalitionJournal, fingerprint

        # what the values depend on: the data, the model, the metric and the method's settings
        # (not n_jobs, executor or progress: the values do not depend on them)
        settings = {k: f"{v.__module__}.{v.__qualname__}" if callable(v) and hasattr(v, "__qualname__") else v
                    for k, v in sorted(self.get_params().items())
                    if k not in ("model", "n_jobs", "executor", "show_progress")}
        described = sorted(model.get_params().items()) if hasattr(model, "get_params") else repr(model)
        return CoalitionJournal(path, fingerprint(train.X, train.y, test.X, test.y, type(self).__name__,
                                                  type(model).__name__, described, settings))

    def score_batch(self, games: Sequence[tuple], **options) -> list[Scores]:
        """``score`` of each ``(train, test)`` pair."""
        return [self.score(train, test, **options) for train, test in games]

    @abc.abstractmethod
    def _values(self, utility: ModelUtility) -> np.ndarray:
        """The training rows' values, from ``utility`` (each method's own estimator)."""


def _classifies(model: Any) -> bool:
    """Whether ``model`` predicts classes: every model but one that says it is a regressor
    (scikit-learn's tags), whose test targets need not repeat its training targets."""
    if model is None:
        return True
    try:
        from sklearn.base import is_regressor

        return not is_regressor(model)
    except Exception:  # noqa: BLE001 - not scikit-learn, or a duck-typed model without tags
        return getattr(model, "_estimator_type", None) != "regressor"


def check_shared_labels(train_labels, test_labels) -> None:
    """Refuse test labels that share no class with the training labels (``"c0"`` against ``0``):
    no model trained on the rows could score a point on them, so every value would be 0."""
    train_classes, test_classes = set(np.asarray(train_labels).tolist()), set(np.asarray(test_labels).tolist())
    if test_classes and not train_classes & test_classes:
        def shown(classes: set) -> str:
            listed = sorted(map(repr, classes))
            return ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")

        raise InvalidParameterError(f"the test labels ({shown(test_classes)}) share no class with the training labels "
                                    f"({shown(train_classes)}): every value would be 0. Give both the same label "
                                    "values (both numbers or both strings).")


@register_method("valuation", "loo", "leave-one-out: the test score lost when an example is left out (n + 1 fits)")
class LeaveOneOut(Valuation):
    """Leave-one-out values ``v(N) - v(N - i)``: one fit on every row, one without each row."""

    def _values(self, utility):
        n = len(utility.train)
        masks = ~np.eye(n, dtype=bool)
        full = utility(np.ones((1, n), dtype=bool))[0]
        return full - _batched(utility, masks, self.show_progress, "leave-one-out")


def _batched(utility: ModelUtility, masks: np.ndarray, show_progress: bool, what: str) -> np.ndarray:
    from salience.parallel import progress_bar

    size = max(16, 4 * utility.n_jobs)
    out = []
    with progress_bar(len(masks), what, show_progress, unit="fit") as bar:
        for start in range(0, len(masks), size):
            out.append(utility(masks[start : start + size]))
            bar.update(len(out[-1]))
    return np.concatenate(out) if out else np.zeros(0)


@register_method("valuation", "knn_shapley", "exact Shapley values of a k-nearest-neighbour classifier, closed form "
                                        "(Jia et al., 2019)")
class KnnShapley(Valuation):
    """Exact Shapley values of the utility "likelihood of the right label under a ``k``-nearest-
    neighbour vote" (Jia et al., 2019), averaged over the test rows, by the closed-form
    recursion from the farthest training row to the nearest: no model is fitted. ``metric``:
    ``euclidean`` (pyDVL's and scikit-learn's default) or ``cosine``. Vectorised over blocks of
    test rows; the values equal pyDVL's ``KNNShapleyValuation`` to 1e-9 wherever no two training
    rows with different labels lie at the same distance from a test row (4.8e-18 on 10^4 distinct
    rows; a row repeated with another label has no order of its
    own, and scikit-learn's versions break that tie differently).

    >>> X, y = [[0.0], [1.0], [5.0]], ["a", "a", "b"]
    >>> KnnShapley(k=1).score((X, y), ([[0.2]], ["a"])).values.round(4).tolist()
    [0.5, 0.5, 0.0]
    """

    _parameter_constraints = {"k": [Interval("int", 1)], "metric": [Options(("euclidean", "cosine"))]}
    uses_model = False

    def __init__(self, *, k: int = 10, metric: str = "euclidean", show_progress: bool = False):
        self.k, self.metric = k, metric
        super().__init__(show_progress=show_progress)  # one process: no fits to spread

    def _values(self, utility):
        train, test = utility.train, utility.test
        test_codes = train.codes_of(test.y)  # -1: a label train lacks
        return knn_shapley_values(train.X, train.codes, test.X, test_codes, self.k, metric=self.metric)


def knn_shapley_values(X_train: np.ndarray, train_codes: np.ndarray, X_test: np.ndarray, test_codes: np.ndarray,
                       k: int, *, metric: str = "euclidean", block_cells: int = 4_000_000) -> np.ndarray:
    """The closed form of :class:`KnnShapley`: for each test row, training rows sorted nearest
    first (by scikit-learn's brute-force neighbour search, as its classifier orders them) with ``match[j]`` whether row j's label is the test row's, the
    farthest row's value is ``match[N] / N`` and ``s[j] = s[j+1] + (match[j] - match[j+1]) /
    max(k, j)``; returns the mean over test rows (these are the Shapley values of the share of
    the right label among a coalition's min(k, |S|) nearest rows). Blocks of test rows keep
    memory at about ``block_cells`` distances."""
    NearestNeighbors = require_sklearn("neighbors", "KNN-Shapley's neighbour order").NearestNeighbors

    n = len(X_train)
    k = min(k, n)  # the recursion holds for k <= n; with fewer rows every row is among the k nearest
    total = np.zeros(n)
    # scikit-learn's neighbour search (brute force, as its k-NN classifier does on such data): the
    # same distances and the same order of ties as the classifier whose vote is valued
    options = {"metric": "cosine"} if metric == "cosine" else {"metric": "minkowski", "p": 2}
    neighbors = NearestNeighbors(n_neighbors=n, algorithm="brute", **options).fit(X_train)
    step = 1.0 / np.maximum(k, np.arange(1, n))  # 1 / max(k, j) for j = 1..n-1
    block = max(1, block_cells // max(n, 1))
    for start in range(0, len(X_test), block):
        queries = X_test[start : start + block]
        order = neighbors.kneighbors(queries, return_distance=False)
        match = (train_codes[order] == test_codes[start : start + block, None]).astype(np.float64)
        # s[:, j] for sorted position j (0-based): the farthest's, plus the steps after it
        steps = (match[:, :-1] - match[:, 1:]) * step[None, :]
        values = match[:, -1:] / n + np.concatenate([np.cumsum(steps[:, ::-1], axis=1)[:, ::-1],
                                                     np.zeros((len(queries), 1))], axis=1)
        _scatter_add(total, order, values)
    return total / max(len(X_test), 1)


def _scatter_add(total: np.ndarray, order: np.ndarray, values: np.ndarray) -> None:
    """total[order[r, j]] += values[r, j] for every r, j (each row of ``order`` a permutation)."""
    unsorted = np.empty_like(values)
    np.put_along_axis(unsorted, order, values, axis=1)
    total += unsorted.sum(axis=0)


class _Sampled(Valuation):
    """A sampling method: ``budget`` fits at most, ``tolerance`` (standard error relative to the
    largest value) to stop sooner, ``seed``."""

    _parameter_constraints = {"budget": [Interval("int", 1)], "tolerance": [None, Interval("real", 0, closed="neither")],
                              "seed": SEED}

    def __init__(self, *, model: Any = None, scoring: Any = None, budget: int = 1000, tolerance: float | None = None,
                 seed: Any = 0, n_jobs: int = 1, executor: Any = "local", show_progress: bool = False):
        self.budget, self.tolerance, self.seed = budget, tolerance, seed
        super().__init__(model=model, scoring=scoring, n_jobs=n_jobs, executor=executor, show_progress=show_progress)

    def _finish(self, running: RunningMean) -> np.ndarray:
        self.standard_errors_ = running.standard_errors
        self.converged_ = running.converged
        return running.mean.copy()


@register_method("valuation", "data_banzhaf", "Data Banzhaf by maximum sample reuse: every sampled coalition informs "
                                         "every example (Wang and Jia, 2023)")
class DataBanzhaf(_Sampled):
    """Banzhaf values by maximum sample reuse: ``budget`` coalitions drawn uniformly (each row
    in with probability 1/2), one fit each, every one informing every row. ``estimator``:
    ``difference`` (Wang and Jia's: the mean test score of the coalitions holding a row less the
    mean of those without it) or ``regression`` (the least-squares linear fit of the scores on
    membership, whose coefficients are the Banzhaf values: it corrects each difference for the
    other rows' chance imbalance; 16-19% closer to exact values at 100-300 samples on
    breast_cancer games of 10 rows); ``auto`` (default) regresses once there are at least twice
    as many samples as rows, and takes differences before."""

    _parameter_constraints = {"estimator": [Options(("auto", "difference", "regression"))]}

    def __init__(self, *, model: Any = None, scoring: Any = None, budget: int = 1000, estimator: str = "auto",
                 tolerance: float | None = None, seed: Any = 0, n_jobs: int = 1, executor: Any = "local",
                 show_progress: bool = False):
        self.estimator = estimator
        super().__init__(model=model, scoring=scoring, budget=budget, tolerance=tolerance, seed=seed, n_jobs=n_jobs,
                         executor=executor, show_progress=show_progress)

    def _values(self, utility):
        from salience.parallel import progress_bar

        n = len(utility.train)
        rng = np.random.default_rng(self.seed)
        masks, values = [], []
        batch = 32  # coalitions per round (not per job: the values must not depend on n_jobs)
        self.standard_errors_, self.converged_ = np.full(n, np.inf), False
        with progress_bar(self.budget, "data banzhaf", self.show_progress, unit="fit") as bar:
            while len(values) < self.budget:
                drawn = rng.random((min(batch, self.budget - len(values)), n)) < 0.5
                masks.append(drawn)
                values.extend(utility(drawn).tolist())
                bar.update(len(drawn))
                if self.tolerance is not None and self._settled(np.concatenate(masks), np.asarray(values)):
                    self.converged_ = True
                    break
        masks, values = np.concatenate(masks), np.asarray(values)
        self._settled(masks, values)
        regress = self.estimator == "regression" or (self.estimator == "auto" and len(values) >= 2 * (n + 1))
        return banzhaf_regression(masks, values) if regress else msr_banzhaf(masks, values)

    def _settled(self, masks: np.ndarray, values: np.ndarray) -> bool:
        """Standard errors of the difference of means; True when within the tolerance."""
        inside = masks.sum(axis=0)
        outside = len(masks) - inside
        if inside.min() < 2 or outside.min() < 2:
            return False
        square_in = (values**2) @ masks
        mean_in, mean_out = values @ masks / inside, (values.sum() - values @ masks) / outside
        var_in = np.maximum(square_in / inside - mean_in**2, 0) * inside / (inside - 1)
        var_out = np.maximum(((values**2).sum() - square_in) / outside - mean_out**2, 0) * outside / (outside - 1)
        self.standard_errors_ = np.sqrt(var_in / inside + var_out / outside)
        scale = max(float(np.abs(mean_in - mean_out).max()), np.finfo(float).tiny)
        return self.tolerance is not None and bool(np.all(self.standard_errors_ <= self.tolerance * scale))


#: permutation walks evaluated side by side, at most
WALKS_PER_ROUND = 8


class _Walks(_Sampled):
    """Permutation walks: each walk adds the rows in a random order, one fit per coalition
    (the grand coalition fitted once), and stops once the test score is within ``truncation``
    (relative) of the grand coalition's, later rows counting zero (truncated Monte Carlo).
    ``antithetic``: every other walk is the one before it reversed (chosen on dev sets: under
    truncation it puts each row near the front of a walk twice as often). A walk the budget
    cuts short is dropped, and rounds hold only as many walks as the budget can finish."""

    _parameter_constraints = {"truncation": [None, Interval("real", 0)], "antithetic": [bool]}
    kind = "shapley"

    def __init__(self, *, model: Any = None, scoring: Any = None, budget: int = 1000, truncation: float | None = 0.01,
                 antithetic: bool = True, tolerance: float | None = None, seed: Any = 0, n_jobs: int = 1,
                 executor: Any = "local", show_progress: bool = False):
        self.truncation, self.antithetic = truncation, antithetic
        super().__init__(model=model, scoring=scoring, budget=budget, tolerance=tolerance, seed=seed, n_jobs=n_jobs,
                         executor=executor, show_progress=show_progress)

    def _weights(self, n: int) -> np.ndarray:
        return np.ones(n)

    def _values(self, utility):
        from salience.parallel import progress_bar

        n = len(utility.train)
        if self.budget < n:
            raise InvalidParameterError(f"budget={self.budget} fits is less than one permutation of the {n} training rows "
                                        f"(up to {n} fits): give at least {n}.")
        rng = np.random.default_rng(self.seed)
        full = float(utility(np.ones((1, n), dtype=bool))[0])
        empty = utility.default
        weights = self._weights(n)
        running = RunningMean(n, budget=self.budget, tolerance=self.tolerance)
        running.evaluations = utility.fits
        walk_fits = n - 1  # what a walk may cost, until walks have been seen
        order_source = random_orders(rng, n, antithetic=self.antithetic)
        with progress_bar(self.budget, self.name_for_progress, self.show_progress, unit="fit") as bar:
            while not running.done():
                remaining = self.budget - running.evaluations
                # as many walks as the budget can finish, 8 at most per round (not per job: the
                # values must not depend on n_jobs)
                walks = int(np.clip(remaining // max(walk_fits, 1), 1, WALKS_PER_ROUND))
                orders = np.array([next(order_source) for _ in range(walks)])
                before = utility.fits
                contributions, _, reached = permutation_contributions(
                    utility, orders, empty_value=empty, full_value=full, truncation=self.truncation,
                    max_evaluations=remaining)
                # a walk the budget cut short is dropped: only its first players were reached, and
                # their small-coalition contributions alone would skew their means
                finished = reached.all(axis=1)
                positions = np.empty_like(orders)
                positions[np.arange(walks)[:, None], orders] = np.arange(n)[None, :]
                # fits, not coalitions, are the budget (a one-class coalition needs no fit): a round
                # that fitted nothing still spends what it evaluated, so the loop ends
                spent = max(utility.fits - before, int(reached.sum() > 0))
                if finished.any():
                    walk_fits = spent / walks
                running.update(contributions[finished] * weights[positions[finished]], spent,
                               counted=reached[finished])
                bar.update(spent)
        return self._finish(running)

    name_for_progress = "tmc shapley"


@register_method("valuation", "tmc_shapley", "Data Shapley by truncated Monte Carlo over permutations (Ghorbani and "
                                        "Zou, 2019)")
class TmcShapley(_Walks):
    """Shapley values of the training rows by truncated Monte Carlo: permutation walks until
    ``budget`` fits are spent (or the standard errors fall within ``tolerance``)."""


@register_method("valuation", "beta_shapley", "Beta(alpha, beta) Shapley: a semivalue weighting small coalitions "
                                         "(Kwon and Zou, 2022)")
class BetaShapley(_Walks):
    """Beta(``alpha``, ``beta``) Shapley values: the semivalue whose weight of a coalition of k
    other rows is ``B(k + beta, n - 1 - k + alpha) / B(alpha, beta)``, estimated from
    permutation walks reweighted by position (Beta(1, 1) is Shapley)."""

    _parameter_constraints = {"alpha": [Interval("real", 0, closed="neither")],
                              "beta": [Interval("real", 0, closed="neither")]}
    name_for_progress = "beta shapley"

    def __init__(self, *, model: Any = None, scoring: Any = None, alpha: float = 16.0, beta: float = 1.0,
                 budget: int = 1000, truncation: float | None = 0.01, antithetic: bool = True,
                 tolerance: float | None = None, seed: Any = 0, n_jobs: int = 1, executor: Any = "local",
                 show_progress: bool = False):
        self.alpha, self.beta = alpha, beta
        super().__init__(model=model, scoring=scoring, budget=budget, truncation=truncation, antithetic=antithetic,
                         tolerance=tolerance, seed=seed, n_jobs=n_jobs, executor=executor, show_progress=show_progress)

    def _weights(self, n: int) -> np.ndarray:
        return position_weights(n, semivalue_weights(n, "beta", alpha=self.alpha, beta=self.beta))


def coalition_values(train, test, *, model: Any = None, scoring: Any = None, n_jobs: int = 1) -> np.ndarray:
    """The test score of every one of the 2^n coalitions of ``train``'s rows (n <= 20), in the
    order of :func:`~salience.core.games.all_coalitions`: one fit each."""
    from salience.core.games import all_coalitions

    train, test = labelled(train, "train"), labelled(test, "test", classes=False)
    with ModelUtility(check_refittable(model), train, test, scoring=scoring, n_jobs=n_jobs) as utility:
        return _batched(utility, all_coalitions(len(train)), False, "exact")


def exact_values(train, test, *, model: Any = None, scoring: Any = None, kind: str = "shapley", alpha: float = 1.0,
                 beta: float = 1.0, ids: Sequence | None = None, n_jobs: int = 1,
                 coalitions: np.ndarray | None = None) -> Scores:
    """The exact semivalues (``kind``: ``shapley``, ``banzhaf``, ``beta``) of ``train``'s rows,
    every one of the 2^n coalitions fitted (n <= 20): the reference the sampling methods are
    measured against. ``coalitions``: :func:`coalition_values` computed before (several kinds
    from one set of fits)."""
    from salience.core.games import exact_semivalues

    n = len(labelled(train, "train"))
    ids = check_ids(ids, n)
    if coalitions is None:
        coalitions = coalition_values(train, test, model=model, scoring=scoring, n_jobs=n_jobs)
    elif len(coalitions) != 2**n:
        raise ShapeError(f"coalitions holds {len(coalitions)} values; {n} rows have {2**n} coalitions.")
    weights = semivalue_weights(n, kind, alpha=alpha, beta=beta)
    return Scores(exact_semivalues(coalitions, n, weights), ids=ids)

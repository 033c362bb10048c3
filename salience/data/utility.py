"""What a coalition of training examples is worth: a model refitted on it, scored on test data.

:class:`ModelUtility` is the value function the data valuation methods
(:mod:`salience.data.valuation`) pass to the core's cooperative-game estimators
(:mod:`salience.core.games`): a batch of coalitions (boolean masks over the training rows) in,
one test score per coalition out, each a fresh fit of a clone of the model. Fits are counted
(budgets are counted in fits) and can run on the project's executors (local processes, Ray).

Conventions (pyDVL's, so that values compare): the empty coalition is worth ``default``; so is
a coalition whose examples hold a single class, where a classifier cannot be fitted, and one
the model fails on (a 5-neighbour vote on 3 rows): those failures are counted
(``failed_fits``) and the first one's message kept, not hidden. A model that fails on the whole
training set is an error naming it.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np

from salience.core.scores import first_duplicate
from salience.exceptions import DuplicateIdError, InvalidParameterError, ShapeError
from salience.extras import require

__all__ = ["LabelledData", "labelled", "ModelUtility", "default_model", "check_refittable"]


class LabelledData:
    """Rows ``X`` (n x d floats) and their labels ``y`` (n hashable values), checked."""

    __slots__ = ("X", "y", "classes", "codes")

    def __init__(self, X: np.ndarray, y: np.ndarray):
        self.X, self.y = X, y
        self.classes, self.codes = np.unique(y, return_inverse=True)

    def __len__(self) -> int:
        return len(self.y)

    def codes_of(self, labels: np.ndarray) -> np.ndarray:
        """``labels`` coded as these rows' classes are (0..K-1), -1 for a label they lack."""
        lookup = {label: code for code, label in enumerate(self.classes.tolist())}
        return np.array([lookup.get(label, -1) for label in np.asarray(labels).tolist()], dtype=np.int64)


def labelled(data: Any, name: str, *, min_rows: int = 1, classes: bool = True) -> LabelledData:
    """``data`` as an (X, y) pair, or a clear error naming ``name``: X two-dimensional and
    finite, y one label per row, hashable, with at least two classes when ``classes``."""
    if isinstance(data, LabelledData):
        return data
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise InvalidParameterError(f"{name} must be a pair (X, y) of features and labels; got "
                                    f"{type(data).__name__}.")
    X, y = data
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InvalidParameterError(f"{name}: X must be numbers ({err}).") from None
    if X.ndim != 2:
        raise ShapeError(f"{name}: X must be two-dimensional (rows x features); got shape {X.shape}.")
    if not np.isfinite(X).all():
        row, column = np.argwhere(~np.isfinite(X))[0]
        raise InvalidParameterError(f"{name}: X holds {X[row, column]} at row {row}, feature {column}; "
                                    "impute or drop it first.")
    labels = list(y) if not isinstance(y, np.ndarray) else y
    if len(labels) != len(X):
        raise ShapeError(f"{name}: {len(X)} rows of X but {len(labels)} labels.")
    for i, label in enumerate(labels):
        try:
            hash(label)
        except TypeError:
            raise InvalidParameterError(f"{name}: label {i} ({label!r}) is not hashable: labels must be numbers or "
                                        "strings.") from None
    y = np.asarray(labels)
    if y.dtype == object:
        try:
            y = np.asarray([str(v) for v in labels]) if any(isinstance(v, str) for v in labels) else y
            np.unique(y)
        except TypeError:
            raise InvalidParameterError(f"{name}: labels of mixed kinds cannot be ordered; use one type.") from None
    if len(y) < min_rows:
        raise InvalidParameterError(f"{name} has {len(y)} rows; at least {min_rows} are needed.")
    data = LabelledData(X, y)
    if classes and len(data.classes) < 2:
        raise InvalidParameterError(f"{name} holds a single class ({data.classes[0]!r} if any): valuing examples by "
                                    "a classifier needs at least two.")
    return data


def check_ids(ids: Sequence | None, n: int, name: str = "ids") -> list:
    if ids is None:
        return list(range(n))
    ids = list(ids)
    if len(ids) != n:
        raise ShapeError(f"{name}: {len(ids)} ids for {n} training rows.")
    duplicate = first_duplicate(ids)
    if duplicate is not None:
        raise DuplicateIdError(f"{name}: {duplicate!r} is given twice; every training row needs its own id.")
    return ids


def require_sklearn(module: str, purpose: str):
    """``sklearn.<module>``, or an error naming the extra that installs scikit-learn."""
    return require(f"sklearn.{module}", "valuation", purpose)


def default_model():
    """The model valued examples are fitted to when none is given: scikit-learn's logistic
    regression (lbfgs, up to 1,000 iterations)."""
    return require_sklearn("linear_model", "Data valuation's default model").LogisticRegression(max_iter=1000)


def check_refittable(model: Any) -> Any:
    """``model`` if a fresh copy of it can be fitted again and again (a scikit-learn-style
    estimator: ``fit`` and ``predict``), else a clear error."""
    if model is None:
        return default_model()
    missing = [verb for verb in ("fit", "predict") if not callable(getattr(model, verb, None))]
    if missing:
        raise InvalidParameterError(f"model {type(model).__name__} cannot be refitted: it has no {' or '.join(missing)}"
                                    ". Valuation refits the model on subsets: pass a scikit-learn-style estimator "
                                    "(fit(X, y), predict(X)).")
    try:
        fresh(model)
    except Exception as err:  # noqa: BLE001 - any failure to copy is the user's model's
        raise InvalidParameterError(f"model {type(model).__name__} cannot be refitted: a fresh copy cannot be made "
                                    f"({err}).") from None
    return model


def fresh(model: Any) -> Any:
    """An unfitted copy: scikit-learn's ``clone`` where the model supports it, else a deep copy."""
    if hasattr(model, "get_params"):
        return require_sklearn("base", "Refitting a scikit-learn-style model").clone(model)
    return copy.deepcopy(model)


def _scorer(scoring: Any) -> Callable:
    if scoring is None:
        return lambda model, X, y: model.score(X, y)
    if callable(scoring):
        return scoring
    get_scorer = require_sklearn("metrics", f"scoring={scoring!r}").get_scorer
    try:
        return get_scorer(scoring)
    except ValueError:
        raise InvalidParameterError(f"scoring {scoring!r} is not a scikit-learn scorer name (e.g. 'accuracy', "
                                    "'f1_macro', 'roc_auc') or a callable (model, X, y) -> float.") from None


def _fit_and_score(job: tuple) -> tuple[list[float], list[int], int, str | None]:
    """Worker: each coalition's test score and fits made (0 or 1), the failed fits and the first
    failure's message (a module-level function, so processes can run it)."""
    model, train, test, masks, scoring, default = job
    score = _scorer(scoring)
    out, fits, failed, first = [], [], 0, None
    for mask in masks:
        if not mask.any() or len(np.unique(train.codes[mask])) < 2:
            out.append(default)
            fits.append(0)
            continue
        fits.append(1)
        fitted = fresh(model)
        try:
            fitted.fit(train.X[mask], train.y[mask])
            value = float(score(fitted, test.X, test.y))
        except Exception as err:  # noqa: BLE001 - counted and reported, or raised for the whole set
            message = f"model {type(model).__name__} failed on {int(mask.sum())} training rows: " \
                      f"{type(err).__name__}: {err}"
            if mask.all():
                raise InvalidParameterError(message) from None
            failed, first = failed + 1, first or message
            value = default
        out.append(value if np.isfinite(value) else default)
    return out, fits, failed, first


class ModelUtility:
    """The value of coalitions of ``train``'s rows: ``model`` (a copy) fitted on each, scored
    on ``test`` by ``scoring`` (``None``: the model's own ``score``, accuracy for a classifier;
    a scikit-learn scorer name; or a callable ``(model, X, y) -> float``). Call it with boolean
    masks (coalitions x rows); ``fits`` counts the fits made. ``executor`` and ``n_jobs`` spread
    a batch's fits over processes or a Ray cluster; use it as a context manager to keep the
    workers for the whole run. ``journal`` (a :class:`~salience.data.journal.CoalitionJournal`)
    replays the coalitions a killed run evaluated and records the new ones."""

    def __init__(self, model: Any, train: LabelledData, test: LabelledData, *, scoring: Any = None,
                 default: float = 0.0, executor: Any = "local", n_jobs: int = 1, journal: Any = None):
        self.model, self.train, self.test = model, train, test
        self.journal = journal
        self.scoring, self.default = scoring, float(default)
        self.executor, self.n_jobs = executor, n_jobs
        self.fits = 0
        self.failed_fits, self.first_failure = 0, None
        self.runner = None
        _scorer(scoring)  # an unknown scorer name fails now, not in a worker

    def __enter__(self):
        if self.n_jobs > 1 or not isinstance(self.executor, str):
            from salience.parallel import make_executor

            # spawned, not forked: a fork of a parent that ran OpenMP (scikit-learn, BLAS) can hang
            self.runner = make_executor(self.executor, self.n_jobs, start_method="spawn")
        return self

    def __exit__(self, *exc) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        masks = np.atleast_2d(np.asarray(masks, dtype=bool))
        if masks.shape[1] != len(self.train):
            raise ShapeError(f"coalitions over {masks.shape[1]} rows for {len(self.train)} training rows.")
        if self.journal is None:
            return self._evaluate(masks)[0]
        values, todo = np.empty(len(masks)), []
        for i, mask in enumerate(masks):
            known = self.journal.known.get(self.journal.key(mask))
            if known is None:
                todo.append(i)
            else:  # replayed: counted as the fits it took, so budgets run as in an unbroken run
                values[i] = known[0]
                self.fits += known[1]
                self.journal.replayed += 1
        if todo:
            values[todo], fits = self._evaluate(masks[todo])
            self.journal.record(masks[todo], values[todo], fits)
        return values

    def _evaluate(self, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each coalition's value, the fits it took) by fitting the model."""
        if self.runner is None or len(masks) < 2:
            parts = [_fit_and_score((self.model, self.train, self.test, masks, self.scoring, self.default))]
        else:
            chunks = np.array_split(np.arange(len(masks)), min(len(masks), 2 * self.n_jobs))
            jobs = [(self.model, self.train, self.test, masks[c], self.scoring, self.default) for c in chunks if c.size]
            parts = self.runner.map(_fit_and_score, jobs)
        for _, fits, failed, first in parts:
            self.fits += sum(fits)
            self.failed_fits += failed
            self.first_failure = self.first_failure or first
        return (np.concatenate([np.asarray(values, dtype=np.float64) for values, _, _, _ in parts]),
                np.concatenate([np.asarray(fits, dtype=np.int64) for _, fits, _, _ in parts]))

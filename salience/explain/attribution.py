"""What an explainer returns, and the checked, counted, batched model calls every explainer makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["Attribution", "ModelCalls"]


@dataclass
class Attribution:
    """Attributions of one explanation: ``values`` shaped like the explained inputs (one row
    per input row; a value per feature), the ``base_value`` (the model's output at the
    baselines, so that ``values.sum(axis=-1) + base_value`` is the output for additive
    methods), the ``method`` name and the ``model_calls`` (rows evaluated) it used.

    >>> a = Attribution(np.array([[0.5, -0.25]]), np.array([1.0]), "exact_shapley", 4, ["x0", "x1"])
    >>> a.to_scores().ranked_ids()
    ['x0', 'x1']
    """

    values: np.ndarray
    base_value: np.ndarray
    method: str
    model_calls: int
    feature_names: list | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def to_scores(self, row: int = 0, *, absolute: bool = False) -> Scores:
        """The core's :class:`~salience.Scores` over the features of one explained row (by
        ``feature_names`` when given, else positions): ranking, selection and agreement
        metrics apply unchanged. ``absolute`` scores by magnitude."""
        values = np.atleast_2d(self.values)
        if not -len(values) <= row < len(values):
            raise InvalidParameterError(f"row {row} is out of range: the attribution has {len(values)} rows.")
        v = np.abs(values[row]) if absolute else values[row]
        return Scores(v, ids=list(self.feature_names) if self.feature_names is not None else None)

    def __len__(self) -> int:
        return len(np.atleast_2d(self.values))


class ModelCalls:
    """A model (a callable from a 2-D array of rows to one output per row, or to ``(rows,
    outputs)``) called in batches, its outputs checked and its rows counted. ``target``
    picks one output column of a model with several."""

    def __init__(self, model: Callable, target: int | None = None, batch_size: int | None = None):
        if not callable(model):
            raise InvalidParameterError(f"model must be a callable from a 2-D array of rows to outputs; got "
                                        f"{type(model).__name__}.")
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
            raise InvalidParameterError(f"batch_size must be a positive integer or None; got {batch_size!r}.")
        self.model, self.target, self.batch_size = model, target, batch_size
        self.calls = 0  # rows evaluated
        self.batches = 0

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        step = self.batch_size or max(len(rows), 1)
        out = [self._one_batch(rows[lo : lo + step]) for lo in range(0, len(rows), step)]
        return np.concatenate(out) if out else np.zeros(0)

    def _one_batch(self, rows: np.ndarray) -> np.ndarray:
        self.batches += 1
        self.calls += len(rows)
        try:
            raw = self.model(rows)
        except Exception as err:  # the model's own error, named as a model call
            raise InvalidParameterError(f"the model failed on a batch of {len(rows)} rows (call {self.batches}): "
                                        f"{type(err).__name__}: {err}") from err
        out = np.asarray(raw, dtype=np.float64)
        if out.ndim == 2 and out.shape[0] == len(rows):
            if self.target is None:
                if out.shape[1] != 1:
                    raise ShapeError(f"the model returned {out.shape[1]} outputs per row (call {self.batches}): pass "
                                     "target= to choose the one to explain.")
                out = out[:, 0]
            else:
                if not -out.shape[1] <= self.target < out.shape[1]:
                    raise ShapeError(f"target {self.target} is out of range: the model returns {out.shape[1]} outputs "
                                     "per row.")
                out = out[:, self.target]
        elif out.ndim != 1 or out.shape[0] != len(rows):
            raise ShapeError(f"the model returned shape {out.shape} for {len(rows)} rows (call {self.batches}): it must "
                             "return one output per row, or (rows, outputs).")
        if not np.isfinite(out).all():
            bad = int(np.flatnonzero(~np.isfinite(out))[0])
            raise InvalidParameterError(f"the model returned {out[bad]} for row {bad} of call {self.batches}: outputs "
                                        "must be finite.")
        return out


def check_inputs(inputs, name: str = "inputs") -> np.ndarray:
    """A 2-D float array of rows to explain (one row may be given as 1-D), finite."""
    x = np.asarray(inputs, dtype=np.float64) if not isinstance(inputs, np.ndarray) else inputs.astype(np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] == 0:
        raise ShapeError(f"{name} must be a 2-D array (rows x features) or one row; got shape {np.shape(inputs)}.")
    if not np.isfinite(x).all():
        row, col = np.argwhere(~np.isfinite(x))[0]
        raise InvalidParameterError(f"{name} holds {x[row, col]} at row {row}, feature {col}: values must be finite.")
    return x


def check_baselines(baselines, n_features: int) -> np.ndarray:
    """Background rows (the "absent" values): a 2-D array with ``n_features`` columns; a single
    row or a scalar broadcasts; ``None`` means zeros."""
    if baselines is None:
        return np.zeros((1, n_features))
    b = np.asarray(baselines, dtype=np.float64)
    if b.ndim == 0:
        b = np.full((1, n_features), float(b))
    if b.ndim == 1:
        b = b[None, :]
    if b.ndim != 2 or b.shape[1] != n_features or len(b) == 0:
        raise ShapeError(f"baselines must have {n_features} features per row (the inputs'); got shape {np.shape(baselines)}.")
    if not np.isfinite(b).all():
        raise InvalidParameterError("baselines must be finite.")
    return b


def feature_names_of(names: Sequence | None, n_features: int) -> list | None:
    if names is None:
        return None
    names = list(names)
    if len(names) != n_features:
        raise ShapeError(f"feature_names has {len(names)} names for {n_features} features.")
    return names

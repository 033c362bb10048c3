"""Calling a model on rows of features: batched, its outputs checked, its rows counted. The
explainers and the faithfulness measures call every model through this."""

from __future__ import annotations

from typing import Callable

import numpy as np

from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["ModelCalls", "check_inputs", "check_baselines"]


class ModelCalls:
    """A model (a callable from a 2-D array of rows to one output per row, or to ``(rows,
    outputs)``) called in batches, its outputs checked and its rows counted. ``target``
    picks one output column of a model with several."""

    def __init__(self, model: Callable, target: int | None = None, batch_size: int | None = None):
        if not callable(model):
            raise InvalidParameterError(f"model must be a callable from a 2-D array of rows to outputs; got "
                                        f"{type(model).__name__}.")
        if batch_size is not None:
            batch_size = check_k(batch_size, "batch_size")
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



"""What an explainer returns (the model calls it makes are :class:`salience.core.calls.ModelCalls`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from salience.core.calls import ModelCalls, check_baselines, check_inputs
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["Attribution", "ModelCalls", "check_inputs", "check_baselines"]


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
        metrics apply unchanged; a name met again (a word twice in a text) becomes ``"name#2"``,
        ``"name#3"``, ... so that ids stay distinct. ``absolute`` scores by magnitude. Pairwise values (rows x M x
        M, as :class:`~salience.explain.ShapleyInteraction`'s) give Scores over the pairs
        i < j, named ``"a x b"``."""
        values = np.atleast_2d(self.values)
        if not -len(values) <= row < len(values):
            raise InvalidParameterError(f"row {row} is out of range: the attribution has {len(values)} rows.")
        v = np.abs(values[row]) if absolute else values[row]
        names = distinct_names(list(self.feature_names)) if self.feature_names is not None else list(range(v.shape[-1]))
        if v.ndim == 2:
            upper = np.triu_indices(len(v), k=1)
            return Scores(v[upper], ids=[f"{names[i]} x {names[j]}" for i, j in zip(*upper)])
        return Scores(v, ids=names if self.feature_names is not None else None)

    def __len__(self) -> int:
        return len(np.atleast_2d(self.values))


def distinct_names(names: list) -> list:
    """``names`` with the second, third... occurrence of a name suffixed ``#2``, ``#3``.

    >>> distinct_names(["good", "not", "good"])
    ['good', 'not', 'good#2']
    """
    seen: dict = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def feature_names_of(names: Sequence | None, n_features: int) -> list | None:
    if names is None:
        return None
    names = list(names)
    if len(names) != n_features:
        raise ShapeError(f"feature_names has {len(names)} names for {n_features} features.")
    return names

"""The contract of the attribution methods: :class:`Explainer` (one ``attribute()``, Captum's
shape), :class:`CoalitionExplainer` (the methods that evaluate coalitions of features row by
row) and the coalition value function they share."""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from salience.core.base import Scorer
from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution, ModelCalls, check_baselines, check_inputs, feature_names_of

__all__ = ["Explainer", "CoalitionExplainer", "coalition_values"]


def coalition_values(calls: ModelCalls, x: np.ndarray, background: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """v(S) for each coalition (row of boolean ``masks``): the mean output over the background
    rows of ``x`` on S and the background elsewhere. One batched model call sequence."""
    hybrid = np.where(masks[:, None, :], x[None, None, :], background[None, :, :])
    outputs = calls(hybrid.reshape(-1, len(x)))
    return outputs.reshape(len(masks), len(background)).mean(axis=1)


class Explainer(Scorer, abc.ABC):
    """Base of the attribution methods: ``Method(model, **options).attribute(inputs, *,
    baselines=None, target=None, n_samples=None, batch_size=None, seed=0)`` returns an
    :class:`~salience.explain.Attribution` for every row of ``inputs``.

    ``model``: any callable from a 2-D array of rows to one output per row (or to ``(rows,
    outputs)``, with ``target`` naming the column). ``baselines``: background rows that stand
    for an absent feature (default: zeros). ``n_samples``: the coalitions evaluated per row,
    for the sampling methods. ``batch_size``: rows per model call (default: all of a row's
    coalitions at once)."""

    name = ""
    #: whether the method needs nothing of the model but its outputs on inputs with features
    #: removed (coalitions): such a method explains any black box, a text or a prompt
    model_agnostic = False

    _parameter_constraints = {"model": [callable], "feature_names": [None, "array-like"]}

    def __init__(self, model: Callable, *, feature_names=None):
        # subclasses set their own parameters first: the values are validated here, together
        self.model = model
        self.feature_names = feature_names
        self._validate_params()

    @abc.abstractmethod
    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        """Attributions of every row of ``inputs`` (see the class docstring)."""

    def _checked(self, inputs, baselines, n_samples):
        """(rows, background rows, feature names) of a call, each validated."""
        x = check_inputs(inputs)
        background = check_baselines(baselines, x.shape[1])
        names = feature_names_of(self.feature_names, x.shape[1])
        if n_samples is not None:
            n_samples = check_k(n_samples, "n_samples")
        return x, background, names

    def score(self, inputs, **options):
        """The attribution of one row as :class:`~salience.Scores` over its features."""
        x = check_inputs(inputs)
        if len(x) != 1:
            raise InvalidParameterError(f"score explains one row; got {len(x)}: use score_batch or attribute.")
        return self.attribute(x, **options).to_scores()

    def score_batch(self, inputs, **options) -> list:
        """The attribution of each row as :class:`~salience.Scores`."""
        attribution = self.attribute(inputs, **options)
        return [attribution.to_scores(r) for r in range(len(attribution))]


class CoalitionExplainer(Explainer):
    """The methods that evaluate coalitions of features (:func:`coalition_values`), row by row."""

    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        x, background, names = self._checked(inputs, baselines, n_samples)
        calls = ModelCalls(self.model, target, batch_size)
        # each row draws from its own generator seeded alike: a row's attribution does not
        # depend on the rows explained with it
        explained = [self._explain_row(calls, row, background, n_samples, np.random.default_rng(seed)) for row in x]
        values = np.array([phi for phi, _ in explained], dtype=np.float64)
        base = np.array([b for _, b in explained], dtype=np.float64)
        return Attribution(values, base, self.name, calls.calls, names, {"batches": calls.batches})

    @abc.abstractmethod
    def _explain_row(self, calls, x, background, n_samples, rng) -> tuple[np.ndarray, float]:
        """(attributions, base value) of one row."""

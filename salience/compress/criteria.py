"""Which weights of a matrix matter: the ``weights`` family's criteria (magnitude, Wanda, LAMP,
Taylor, SparseGPT's saliency), each a :class:`WeightCriterion` that scores a (out, in) weight
matrix; :func:`salience.compress.prune` applies one to a model."""

from __future__ import annotations

import abc
import numpy as np

from salience.core.base import Scorer, method_of, register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError

__all__ = ["WeightCriterion", "Magnitude", "Wanda", "LAMP", "Taylor", "SparseGPT", "weight_criterion", "weight_scores"]


class WeightCriterion(Scorer, abc.ABC):
    """Base of the weight-importance criteria (the ``weights`` family). ``importance(weight,
    input_norms=None, gradient=None, hessian_inverse_diagonal=None)`` gives one score per
    weight of a (out, in) matrix in its floating-point type; ``score`` the same as
    :class:`~salience.Scores` (row-major).

    Class attributes tell :func:`prune` what a criterion needs: ``needs`` (``"input_norms"``,
    ``"gradient"`` or ``"hessian"``, gathered over calibration windows), ``default_group``
    (the comparison group) and ``reconstructs`` (the remaining weights are updated, as
    SparseGPT does, instead of only masked)."""

    needs: str | None = None
    default_group = "layer"
    reconstructs = False

    def __init__(self):
        self._validate_params()

    @abc.abstractmethod
    def importance(self, weight, *, input_norms=None, gradient=None) -> np.ndarray:
        """The subclass's part (see the class docstring)."""

    def score(self, weight, *, input_norms=None, gradient=None) -> Scores:
        return Scores(self.importance(_weight_matrix(weight), input_norms=input_norms, gradient=gradient).ravel())

    def score_batch(self, batch, **per_call) -> list[Scores]:
        return [self.score(weight, **per_call) for weight in batch]


def _weight_matrix(weight) -> np.ndarray:
    w = np.asarray(weight)
    if w.dtype.kind != "f":
        w = w.astype(np.float64)
    if w.ndim != 2:
        raise InvalidParameterError(f"a weight matrix is 2-D (out, in); got shape {w.shape}.")
    return w


@register_method("weights", "magnitude", "weight magnitude |W|")
class Magnitude(WeightCriterion):
    def importance(self, weight, *, input_norms=None, gradient=None) -> np.ndarray:
        return np.abs(weight)


@register_method("weights", "wanda", "Wanda: |W| x the norm of the weight's input feature over calibration tokens "
                                     "(Sun et al., 2024)")
class Wanda(WeightCriterion):
    needs = "input_norms"
    default_group = "row"

    def importance(self, weight, *, input_norms=None, gradient=None) -> np.ndarray:
        if input_norms is None or np.shape(input_norms) != (weight.shape[1],):
            raise InvalidParameterError(f"wanda needs the norm of each of the {weight.shape[1]} input features over "
                                        f"calibration tokens; got {None if input_norms is None else np.shape(input_norms)}.")
        return np.abs(weight) * np.asarray(input_norms, dtype=weight.dtype)[None, :]


@register_method("weights", "lamp", "LAMP: layer-adaptive magnitude, W^2 over the layer's mass at or above it (Lee et "
                                    "al., 2021)")
class LAMP(WeightCriterion):
    default_group = "global"

    def importance(self, weight, *, input_norms=None, gradient=None) -> np.ndarray:
        w = weight.astype(np.float64)
        squared = (w * w).ravel()
        order = np.argsort(squared, kind="stable")
        sorted_sq = squared[order]
        tail = np.cumsum(sorted_sq[::-1])[::-1]  # sum over the weights at or above each one in the order
        out = np.empty_like(squared)
        out[order] = sorted_sq / np.where(tail > 0, tail, 1.0)
        return out.reshape(w.shape)


@register_method("weights", "taylor", "first-order Taylor: |W x dL/dW| on calibration data (Molchanov et al., 2019)")
class Taylor(WeightCriterion):
    needs = "gradient"

    def importance(self, weight, *, input_norms=None, gradient=None) -> np.ndarray:
        if gradient is None or np.shape(gradient) != weight.shape:
            raise InvalidParameterError(f"taylor needs the loss gradient of the weights, shape {weight.shape}; got "
                                        f"{None if gradient is None else np.shape(gradient)}.")
        return np.abs(weight * np.asarray(gradient, dtype=weight.dtype))


@register_method("weights", "sparsegpt", "SparseGPT: optimal brain surgeon saliency W^2 / [H^-1]_jj^2, the remaining "
                                         "weights updated to compensate (Frantar and Alistarh, 2023)")
class SparseGPT(WeightCriterion):
    """SparseGPT: weights pruned by OBS saliency, column block by column block, the rest of each
    row updated with the inverse Hessian of the calibration inputs (:func:`prune` applies it).
    ``score`` gives the saliency of one matrix given the inverse Hessian's diagonal (before any
    update): ``W^2 / d^2``."""

    needs = "hessian"
    default_group = "row"
    reconstructs = True
    _parameter_constraints = {"blocksize": [Interval("int", 1)], "damp": [Interval("real", 0, closed="neither")]}

    def __init__(self, *, blocksize: int = 128, damp: float = 0.01):
        self.blocksize, self.damp = blocksize, damp
        super().__init__()

    def importance(self, weight, *, input_norms=None, gradient=None, hessian_inverse_diagonal=None) -> np.ndarray:
        d = hessian_inverse_diagonal
        if d is None or np.shape(d) != (weight.shape[1],):
            raise InvalidParameterError(f"sparsegpt's saliency needs the inverse Hessian's diagonal, one value per "
                                        f"input ({weight.shape[1]}); got {None if d is None else np.shape(d)}.")
        d = np.asarray(d, dtype=weight.dtype)
        return weight * weight / (d * d)[None, :]

    def score(self, weight, *, hessian_inverse_diagonal=None, **unused) -> Scores:
        return Scores(self.importance(_weight_matrix(weight),
                                      hessian_inverse_diagonal=hessian_inverse_diagonal).ravel())


def weight_criterion(method: str | WeightCriterion, **params) -> WeightCriterion:
    """A registered ``weights`` criterion by name, built with ``params``, or one as it is."""
    return method_of("weights", method, WeightCriterion, **params)


def weight_scores(method: str | WeightCriterion, weight: np.ndarray, *, input_norms: np.ndarray | None = None,
                  gradient: np.ndarray | None = None) -> np.ndarray:
    """The importance of each weight of a (out, in) matrix, in the weights' floating-point type
    (float32 for a float32 model, as Wanda's reference computes it; LAMP's sums in float64)."""
    return weight_criterion(method).importance(_weight_matrix(weight), input_norms=input_norms, gradient=gradient)

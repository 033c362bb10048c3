"""The ``quantizers`` family: how a weight matrix is put on an integer grid.

* ``rtn``: round to nearest on each group's min-max grid;
* ``gptq``: GPTQ (Frantar et al., 2023): columns rounded one by one, each one's rounding error
  spread over the columns still to come with the inverse Hessian of the calibration inputs
  (the Cholesky machinery SparseGPT uses here), in order of decreasing input energy
  (``actorder``), grids fixed from the original weights (llm-compressor's defaults);
* ``awq``: activation-aware scaling (Lin et al., 2024): the input columns that carry large
  activations are scaled up before rounding and the scale folded into the operation before
  (:func:`salience.compress.quantize.quantize` does the folding), each layer group's scale
  exponent searched on the output error ``tr(dW H dW^T)``.

Each is a scorer: ``score(weight, hessian=None)`` gives, per weight (row-major), the squared
output error its rounding causes (``(w - q)^2 H_jj``; GPTQ's ``(w - q)^2 / [H^-1]_jj^2``, the
loss it records), the quantity outlier-aware quantization keeps in high precision; and
``quantize(weight, hessian=None)`` returns the :class:`~salience.compress.quant_grid.QuantizedWeight`.
"""

from __future__ import annotations

import abc

import numpy as np

from salience.compress.weights import upper_cholesky_of_inverse
from salience.compress.quant_grid import QuantizedWeight, QuantScheme, group_params, quantize_rtn, round_to_grid
from salience.core.base import Scorer, method_of, register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch

__all__ = ["Quantizer", "RTN", "GPTQ", "AWQ", "quantizer_of", "output_error"]


def _torch():
    return require_torch("Quantization")


def _matrix(weight):
    torch = _torch()
    w = torch.as_tensor(np.asarray(weight) if not isinstance(weight, torch.Tensor) else weight)
    if w.ndim != 2:
        raise InvalidParameterError(f"a weight matrix is 2-D (out, in); got shape {tuple(w.shape)}.")
    if not torch.is_floating_point(w):
        w = w.double()
    if not bool(torch.isfinite(w).all()):
        raise InvalidParameterError("the weight matrix holds NaN or inf.")
    return w.detach()


def _hessian(hessian, columns: int):
    if hessian is None:
        return None
    torch = _torch()
    h = torch.as_tensor(np.asarray(hessian) if not isinstance(hessian, torch.Tensor) else hessian).double()
    if tuple(h.shape) != (columns, columns):
        raise InvalidParameterError(f"the Hessian of the inputs must be ({columns}, {columns}); got {tuple(h.shape)}.")
    return h


def _keep_mask(keep, shape):
    """A boolean mask of the weights kept exact, checked against the matrix's shape, or None."""
    if keep is None:
        return None
    torch = _torch()
    mask = torch.as_tensor(np.asarray(keep) if not isinstance(keep, torch.Tensor) else keep)
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(shape):
        raise InvalidParameterError(f"keep must be a boolean mask of the weight's shape {tuple(shape)}; got "
                                    f"{mask.dtype} {tuple(mask.shape)}.")
    return mask


def output_error(weight, quantized, hessian) -> float:
    """``tr(dW H dW^T)``: the squared error the rounding adds to the layer's outputs summed over
    the calibration tokens (H = X^T X), or ``||dW||^2`` without a Hessian."""
    torch = _torch()
    delta = (quantized.double() if isinstance(quantized, torch.Tensor) else quantized.dequantize(torch.float64)) \
        - weight.double()
    if hessian is None:
        return float((delta * delta).sum())
    return float(((delta @ hessian) * delta).sum())


class Quantizer(Scorer, abc.ABC):
    """Base of the ``quantizers`` family (see the module docstring). Parameters shared by all:
    ``bits``, ``group_size`` (None: one scale per output row), ``symmetric``."""

    needs_hessian = False
    #: scales whole input columns of the layers sharing an input before rounding (AWQ): the model is
    #: quantized block by block with those scales folded in, and no weight is kept as an outlier
    scales_inputs = False
    _parameter_constraints = {"bits": [Interval("int", 2, 8)], "group_size": [None, Interval("int", 2)],
                              "symmetric": [bool]}

    def __init__(self, *, bits: int = 4, group_size: int | None = 128, symmetric: bool = True):
        self.bits, self.group_size, self.symmetric = bits, group_size, symmetric
        self._validate_params()

    @property
    def scheme(self) -> QuantScheme:
        return QuantScheme(self.bits, self.group_size, self.symmetric)

    @abc.abstractmethod
    def quantize(self, weight, *, hessian=None, keep=None) -> QuantizedWeight:
        """The subclass's part. ``keep``: a boolean mask of the weights kept exact (outliers in
        floating point, left out of the grids)."""

    def score(self, weight, *, hessian=None) -> Scores:
        w = _matrix(weight)
        h = _hessian(hessian, w.shape[1])
        delta = self.quantize(w, hessian=h).dequantize(_torch().float64) - w.double()
        energy = _torch().ones(w.shape[1], dtype=_torch().float64) if h is None else _torch().diagonal(h)
        return Scores(((delta * delta) * energy[None, :]).reshape(-1).numpy())

    def score_batch(self, batch, **per_call) -> list[Scores]:
        return [self.score(weight, **per_call) for weight in batch]


@register_method("quantizers", "rtn", "round to nearest on each group's min-max integer grid")
class RTN(Quantizer):
    def quantize(self, weight, *, hessian=None, keep=None) -> QuantizedWeight:
        w = _matrix(weight)
        return quantize_rtn(w, self.scheme, keep=_keep_mask(keep, w.shape))


@register_method("quantizers", "gptq", "GPTQ: columns rounded in turn, the error spread over the rest with the inverse "
                                       "Hessian of the calibration inputs (Frantar et al., 2023)")
class GPTQ(Quantizer):
    needs_hessian = True
    _parameter_constraints = {"blocksize": [Interval("int", 1)], "damp": [Interval("real", 0, closed="neither")],
                              "actorder": [bool]}

    def __init__(self, *, bits: int = 4, group_size: int | None = 128, symmetric: bool = True, blocksize: int = 128,
                 damp: float = 0.01, actorder: bool = True):
        self.blocksize, self.damp, self.actorder = blocksize, damp, actorder
        super().__init__(bits=bits, group_size=group_size, symmetric=symmetric)

    def quantize(self, weight, *, hessian=None, keep=None) -> QuantizedWeight:
        w = _matrix(weight)
        h = _hessian(hessian, w.shape[1])
        if h is None:
            raise InvalidParameterError("gptq needs the Hessian of the layer's calibration inputs (X^T X); give "
                                        "calibration windows.")
        return self.quantize_with_losses(w, h, _keep_mask(keep, w.shape))[0]

    def score(self, weight, *, hessian=None) -> Scores:
        w = _matrix(weight)
        h = _hessian(hessian, w.shape[1])
        if h is None:
            raise InvalidParameterError("gptq's saliency needs the Hessian of the layer's calibration inputs.")
        return Scores(self.quantize_with_losses(w, h)[1].reshape(-1).numpy())

    def quantize_with_losses(self, w, h, keep=None):
        """(QuantizedWeight, per-weight loss (w - q)^2 / d^2) by GPTQ. Rows are independent
        given the Hessian, so layers that share their input can be passed stacked. ``keep``:
        weights kept exact (outliers, as SpQR keeps them: their updated value, no error to
        spread), left out of the grids."""
        torch = _torch()
        scheme = self.scheme
        W = w.to(torch.float32).clone()
        # grids from the original weights (outliers left out), fixed (llm-compressor's)
        scale, zero = group_params(W, scheme, keep)
        probe = QuantizedWeight(torch.zeros(W.shape, dtype=torch.int8), scale, zero, scheme)
        col_scale, col_zero = probe.column_params()
        col_zero = None if col_zero is None else col_zero.to(torch.float32)
        H = h.to(torch.float64).clone()
        rows, cols = W.shape
        dead = torch.diagonal(H) == 0
        H[dead, dead] = 1.0
        W[:, dead] = 0.0
        perm = torch.argsort(torch.diagonal(H), descending=True, stable=True) if self.actorder else None
        kept = keep
        if perm is not None:
            W, H = W[:, perm], H[perm][:, perm]
            kept = None if keep is None else keep[:, perm]
            col_scale = col_scale[:, perm]
            col_zero = None if col_zero is None else col_zero[:, perm]
        H += self.damp * torch.mean(torch.diagonal(H)) * torch.eye(cols, dtype=H.dtype)
        Hinv = upper_cholesky_of_inverse(H).to(torch.float32)
        # the loop runs over columns: held transposed, each column is a contiguous row (the same
        # arithmetic as column-major, in half the time)
        WT, scale_of = W.T.contiguous(), col_scale.T.contiguous()
        zero_of = None if col_zero is None else col_zero.T.contiguous()
        keptT = None if kept is None else kept.T.contiguous()
        QT, ErrT = torch.empty_like(WT), torch.empty_like(WT)
        for i1 in range(0, cols, self.blocksize):
            i2 = min(i1 + self.blocksize, cols)
            W1, Hinv1 = WT[i1:i2], Hinv[i1:i2, i1:i2]
            for i in range(i2 - i1):
                column = W1[i]
                _, q = round_to_grid(column, scale_of[i1 + i], None if zero_of is None else zero_of[i1 + i], scheme)
                if keptT is not None:
                    q = torch.where(keptT[i1 + i], column, q)
                QT[i1 + i] = q
                err = ErrT[i1 + i]
                torch.sub(column, q, out=err).div_(Hinv1[i, i])
                if i + 1 < i2 - i1:
                    W1[i + 1:].addr_(Hinv1[i, i + 1:], err, alpha=-1.0)
            if i2 < cols:
                WT[i2:].addmm_(Hinv[i1:i2, i2:].T, ErrT[i1:i2], alpha=-1.0)
        Q, losses = QT.T, ErrT.T * ErrT.T
        if perm is not None:
            inverse = torch.argsort(perm)
            Q, losses = Q[:, inverse], losses[:, inverse]
        return quantize_rtn(Q, scheme, scale, zero, keep), losses.double()


@register_method("quantizers", "awq", "activation-aware scaling: salient input channels scaled up before rounding, "
                                      "the scale searched on the output error (Lin et al., 2024)")
class AWQ(Quantizer):
    """AWQ's rounding of one matrix: the input columns scaled by ``s = e^alpha`` (``e`` the RMS
    of each input over the calibration tokens, ``alpha`` searched on a grid of ``n_grid``
    points in [0, 1) for the least output error), rounded to nearest, then divided back. On a
    model, :func:`~salience.compress.quantize.quantize` searches one scale per group of layers
    sharing an input and folds it into the operation before."""

    needs_hessian = True
    scales_inputs = True
    _parameter_constraints = {"n_grid": [Interval("int", 1)]}

    def __init__(self, *, bits: int = 4, group_size: int | None = 128, symmetric: bool = True, n_grid: int = 20):
        self.n_grid = n_grid
        super().__init__(bits=bits, group_size=group_size, symmetric=symmetric)

    def search_scale(self, weights: list, hessian):
        """The input scale (one per column) that least increases the summed output error of
        ``weights`` (matrices sharing an input whose Hessian is ``hessian``), and that error."""
        torch = _torch()
        h = hessian.double()
        energy = torch.sqrt(torch.clamp(torch.diagonal(h), min=0.0) / max(float(torch.diagonal(h).mean()), 1e-30))
        energy = torch.clamp(energy, min=1e-4)
        best = (None, float("inf"))
        for step in range(self.n_grid):
            alpha = step / self.n_grid
            s = energy ** alpha
            s = s / torch.sqrt(s.max() * s.min())
            error = 0.0
            for w in weights:
                q = quantize_rtn(w * s[None, :].to(w.dtype), self.scheme).dequantize(torch.float64) / s[None, :]
                error += output_error(w, q, h)
            if error < best[1]:
                best = (s, error)
        return best

    def quantize(self, weight, *, hessian=None, keep=None) -> QuantizedWeight:
        """The matrix with its best scale applied (``weight x s``, to be divided by ``s``
        outside); ``scale_`` holds that ``s``."""
        if keep is not None:
            raise InvalidParameterError("awq scales whole input columns; it does not keep outliers (use rtn or gptq).")
        w = _matrix(weight)
        h = _hessian(hessian, w.shape[1])
        if h is None:
            raise InvalidParameterError("awq needs the Hessian of the layer's calibration inputs; give calibration "
                                        "windows.")
        s, _ = self.search_scale([w], h)
        self.scale_ = s
        return quantize_rtn(w * s[None, :].to(w.dtype), self.scheme)

    def score(self, weight, *, hessian=None) -> Scores:
        torch = _torch()
        w = _matrix(weight)
        h = _hessian(hessian, w.shape[1])
        q = self.quantize(w, hessian=h)
        delta = q.dequantize(torch.float64) / self.scale_[None, :] - w.double()
        return Scores(((delta * delta) * torch.diagonal(h)[None, :]).reshape(-1).numpy())


def quantizer_of(method: str | Quantizer, **params) -> Quantizer:
    """A registered quantizer by name, built with ``params``, or one as it is."""
    return method_of("quantizers", method, Quantizer, **params)


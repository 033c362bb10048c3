"""RISE (Petsiuk et al., 2018): saliency of an image's pixels for a black-box model, from its
outputs on randomly masked copies.

Each mask is a coarse ``grid x grid`` grid of cells kept with probability ``p``, upsampled
bilinearly to the image's size plus one cell and cropped at a random shift (so mask edges
fall anywhere). A masked copy keeps the image where the mask is 1 and takes the baseline
(default zeros) where it is 0, smoothly in between. A pixel's saliency is the expected
output given that it is kept::

    S(i) = 1 / (N p) * sum_n f(x * M_n + b * (1 - M_n)) * M_n(i)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from salience.core.params import Interval
from salience.core.checks import check_k
from salience.core.base import register
from salience.core.calls import ModelCalls, check_baselines, check_inputs
from salience.exceptions import ShapeError
from salience.explain.attribution import Attribution
from salience.explain.base import Explainer

__all__ = ["Rise", "rise_masks"]


def rise_masks(n_masks: int, image_shape: tuple[int, int], grid: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """``n_masks`` smooth random masks of ``image_shape`` (height, width), values in [0, 1]."""
    height, width = image_shape
    cell_h, cell_w = -(-height // grid), -(-width // grid)  # ceil: cells cover the image
    up_h, up_w = (grid + 1) * cell_h, (grid + 1) * cell_w
    cells = (rng.random((n_masks, grid, grid)) < p).astype(np.float64)
    # bilinear upsampling of the grid to (grid + 1) cells, as separable linear interpolation
    # between cell centres (pixel centres mapped into grid coordinates, clamped at the edges)
    rows = np.clip((np.arange(up_h) + 0.5) * grid / up_h - 0.5, 0, grid - 1)
    cols = np.clip((np.arange(up_w) + 0.5) * grid / up_w - 0.5, 0, grid - 1)
    along_rows = _interpolation_matrix(rows, grid)  # up_h x grid
    along_cols = _interpolation_matrix(cols, grid)  # up_w x grid
    upsampled = np.einsum("hg,ngk,wk->nhw", along_rows, cells, along_cols)
    shift_h = rng.integers(0, cell_h, size=n_masks)
    shift_w = rng.integers(0, cell_w, size=n_masks)
    masks = np.empty((n_masks, height, width))
    for n in range(n_masks):
        masks[n] = upsampled[n, shift_h[n] : shift_h[n] + height, shift_w[n] : shift_w[n] + width]
    return masks


def _interpolation_matrix(positions: np.ndarray, size: int) -> np.ndarray:
    lower = np.floor(positions).astype(int)
    upper = np.minimum(lower + 1, size - 1)
    frac = positions - lower
    matrix = np.zeros((len(positions), size))
    matrix[np.arange(len(positions)), lower] += 1 - frac
    matrix[np.arange(len(positions)), upper] += frac
    return matrix


class Rise(Explainer):
    """RISE saliency for images (see the module docstring). ``inputs``: images as ``(n, height,
    width)`` or ``(n, height, width, channels)`` (the model gets batches of the same shape),
    or flattened rows with ``image_shape=(height, width[, channels])`` (the model gets
    rows). Masks are shared by all channels. ``n_samples``: masks per image (default 2000);
    ``grid``: cells per side (default 7); ``p``: the chance a cell is kept (default 0.5).
    The values are shaped like the inputs; ``base_value`` is the output at the baseline.
    Not additive: the saliency is an expectation, not a share of the output."""

    name = "rise"
    _parameter_constraints = {"image_shape": [None, tuple], "grid": [Interval("int", 1)],
                              "p": [Interval("real", 0, 1, closed="neither")]}

    def __init__(self, model: Callable, *, image_shape: tuple | None = None, grid: int = 7, p: float = 0.5,
                 feature_names=None):
        self.image_shape, self.grid, self.p = image_shape, grid, p
        super().__init__(model, feature_names=feature_names)

    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        raw = np.asarray(inputs, dtype=np.float64)
        images_given = raw.ndim >= 3
        shape = tuple(raw.shape[1:]) if images_given else self.image_shape
        if shape is None:
            raise ShapeError(f"inputs of shape {raw.shape} are flat rows: give images as (n, height, width[, channels]) "
                             "or pass image_shape=(height, width[, channels]).")
        shape = tuple(int(d) for d in shape)
        if len(shape) not in (2, 3) or any(d < 1 for d in shape):
            raise ShapeError(f"image_shape must be (height, width) or (height, width, channels); got {shape}.")
        x = check_inputs(raw.reshape(len(raw), -1) if images_given else raw)
        if x.shape[1] != int(np.prod(shape)):
            raise ShapeError(f"rows of {x.shape[1]} values do not hold images of shape {shape}.")
        if n_samples is not None:
            n_samples = check_k(n_samples, "n_samples")
        background = check_baselines(baselines, x.shape[1])
        n_masks = n_samples if n_samples is not None else 2000
        calls = ModelCalls(self._model_on(shape if images_given else None), target, batch_size)
        channels = shape[2] if len(shape) == 3 else 1
        values, base = np.zeros(x.shape), np.zeros(len(x))
        for r, row in enumerate(x):
            rng = np.random.default_rng(seed)
            masks = rise_masks(n_masks, shape[:2], self.grid, self.p, rng).reshape(n_masks, -1)
            masks = np.repeat(masks, channels, axis=1)  # channels last: each pixel's channels share its mask
            outputs = np.zeros(n_masks)
            for b in background:
                outputs += calls(row[None, :] * masks + b[None, :] * (1 - masks))
            outputs /= len(background)
            values[r] = outputs @ masks / (n_masks * self.p)
            base[r] = calls(background).mean()
        return Attribution(values.reshape(raw.shape), base, self.name, calls.calls, None, {"batches": calls.batches})

    def _model_on(self, image_shape):
        if image_shape is None:
            return self.model
        return lambda rows: self.model(rows.reshape((len(rows),) + image_shape))


register("explain", "rise", Rise, "RISE: saliency from randomly masked inputs (Petsiuk et al., 2018)")

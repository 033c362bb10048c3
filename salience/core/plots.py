"""Pictures of importance (``pip install 'salience[plot]'``, matplotlib): faithfulness curves
and attribution bar charts, as PNG or SVG (by the path's suffix), written atomically."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Mapping

import numpy as np

from salience.core.checks import check_k
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.extras import require

__all__ = ["plot_curves", "plot_attribution"]

FORMATS = {".png": "png", ".svg": "svg"}


def _pyplot():
    matplotlib = require("matplotlib", "plot", "Plots")
    matplotlib.use("Agg")  # no screen needed; files only
    return require("matplotlib.pyplot", "plot", "Plots")


def _save(figure, path) -> None:
    from salience.io.files import atomic_write_bytes

    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InvalidParameterError(f"plot path {str(path)!r} must end in .png or .svg.")
    buffer = io.BytesIO()
    figure.savefig(buffer, format=FORMATS[path.suffix.lower()], dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def plot_curves(curves: Mapping, path=None, *, title: str | None = None, ylabel: str = "model output"):
    """Deletion/insertion curves (:class:`~salience.core.faithfulness.Curve`) or retraining
    curves (:class:`~salience.core.faithfulness.RetrainCurve`), one line each, labelled by
    their key and area. Returns the matplotlib figure; writes it to ``path`` when given."""
    if not isinstance(curves, Mapping) or not curves:
        raise InvalidParameterError("curves must be a non-empty mapping from a label to a Curve or RetrainCurve.")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(5.5, 3.6))
    for label, curve in curves.items():
        outputs = getattr(curve, "outputs", None)
        if outputs is None:
            outputs = getattr(curve, "scores", None)
        if outputs is None or not hasattr(curve, "fractions"):
            raise InvalidParameterError(f"curves[{label!r}] is not a Curve or RetrainCurve.")
        axes.plot(curve.fractions, outputs, marker="." if len(outputs) < 30 else None, label=f"{label} (AUC {curve.auc:.3g})")
    axes.set_xlabel("fraction of features removed or added")
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    if path is not None:
        _save(figure, path)
    plt.close(figure)
    return figure


def plot_attribution(attribution, path=None, *, k: int = 20, title: str | None = None, row: int = 0):
    """A horizontal bar chart of the ``k`` largest attributions by magnitude (positive red, negative
    blue), from :class:`~salience.Scores` or an :class:`~salience.explain.Attribution` (its
    ``row``). Returns the matplotlib figure; writes it to ``path`` when given."""
    scores = attribution if isinstance(attribution, Scores) else getattr(attribution, "to_scores", None)
    if scores is None:
        raise InvalidParameterError(f"plot_attribution takes Scores or an Attribution; got {type(attribution).__name__}.")
    if not isinstance(scores, Scores):
        scores = attribution.to_scores(row)
    k = check_k(k)
    if not len(scores):
        raise InvalidParameterError("there is nothing to plot: the attribution has no features.")
    plt = _pyplot()
    order = np.argsort(-np.abs(scores.values), kind="stable")[:k][::-1]
    values = scores.values[order]
    labels = [str(scores.ids[i]) for i in order]
    figure, axes = plt.subplots(figsize=(5.5, 0.3 * len(order) + 1.0))
    axes.barh(range(len(order)), values, color=np.where(values >= 0, "#c0392b", "#2e6da4"))
    axes.set_yticks(range(len(order)), labels, fontsize=8)
    axes.axvline(0, color="black", linewidth=0.6)
    axes.set_xlabel("attribution")
    if title:
        axes.set_title(title)
    if path is not None:
        _save(figure, path)
    plt.close(figure)
    return figure

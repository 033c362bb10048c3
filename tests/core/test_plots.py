import numpy as np
import pytest

from salience import Scores
from salience.core.faithfulness import deletion_curve, insertion_curve
from salience.exceptions import InvalidParameterError
from salience.explain import Attribution

pytest.importorskip("matplotlib", reason="plots need the plot extra: pip install 'salience[plot]'")
from salience.core.plots import plot_attribution, plot_curves  # noqa: E402


def test_curves_and_bars_are_written_as_png_and_svg(tmp_path):
    f = lambda X: X @ np.array([3.0, -1.0, 0.5])  # noqa: E731
    x = np.array([1.0, 1.0, 1.0])
    curves = {"deletion": deletion_curve(f, x, [3.0, -1.0, 0.5]), "insertion": insertion_curve(f, x, [3.0, -1.0, 0.5])}
    figure = plot_curves(curves, tmp_path / "curves.png", title="t")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == [f"deletion (AUC {curves['deletion'].auc:.3g})", f"insertion (AUC {curves['insertion'].auc:.3g})"]
    attribution = Attribution(np.array([[0.5, -2.0, 1.0]]), np.zeros(1), "m", 0, ["a", "b", "c"])
    figure = plot_attribution(attribution, tmp_path / "bars.svg", k=2)
    assert (tmp_path / "bars.svg").read_text().lstrip().startswith("<?xml")
    ticks = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert ticks == ["c", "b"]  # the two largest magnitudes, the largest on top
    bars = [p.get_width() for p in figure.axes[0].patches]
    assert bars == [1.0, -2.0]
    plot_attribution(Scores([1.0, 2.0], ids=["x", "y"]))  # no path: only the figure


def test_plots_refuse_bad_input(tmp_path):
    with pytest.raises(InvalidParameterError, match="png or .svg"):
        plot_attribution(Scores([1.0]), tmp_path / "out.jpg")
    with pytest.raises(InvalidParameterError, match="mapping"):
        plot_curves({})
    with pytest.raises(InvalidParameterError, match="k must be a positive integer"):
        plot_attribution(Scores([1.0]), k=0)
    with pytest.raises(InvalidParameterError, match="Scores or an Attribution"):
        plot_attribution([1.0, 2.0])
    assert not list(tmp_path.iterdir())

import numpy as np
import pytest

from salience import InvalidParameterError, ShapeError
from salience.core.faithfulness import deletion_curve
from salience.explain import Rise
from salience.explain.rise import rise_masks


def test_masks_are_smooth_cover_the_image_and_keep_p_of_it():
    masks = rise_masks(4000, (10, 13), grid=4, p=0.3, rng=np.random.default_rng(0))
    assert masks.shape == (4000, 10, 13) and masks.min() >= 0 and masks.max() <= 1
    assert masks.mean() == pytest.approx(0.3, abs=0.01)
    # bilinear: neighbouring pixels differ by at most one step between cell centres
    assert np.abs(np.diff(masks, axis=2)).max() <= 1 / 3 + 1e-9
    assert len(np.unique(masks.round(6))) > 10


def test_rise_on_a_model_that_looks_at_one_corner():
    image = np.ones((1, 12, 12))
    model = lambda batch: batch[:, :4, :4].mean(axis=(1, 2))  # noqa: E731
    a = Rise(model, grid=4).attribute(image, n_samples=500, seed=0)
    assert a.values.shape == (1, 12, 12) and a.model_calls == 500 + 1 and a.base_value.tolist() == [0.0]
    corner, rest = a.values[0, :4, :4].mean(), a.values[0, 6:, 6:].mean()
    assert corner > rest + 0.1
    # same seed, same masks; flat rows with image_shape give the same values
    flat = Rise(lambda rows: model(rows.reshape(-1, 12, 12)), image_shape=(12, 12), grid=4)
    assert np.allclose(flat.attribute(image.reshape(1, -1), n_samples=500, seed=0).values.reshape(1, 12, 12), a.values)


def test_rise_on_digits_beats_a_random_order_on_deletion():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    clf = LogisticRegression(max_iter=2000).fit(x[:1000], y[:1000])
    images = x[1000:1010].reshape(-1, 8, 8)
    labels = clf.predict(x[1000:1010])
    rng = np.random.default_rng(0)
    wins = 0
    for image, label in zip(images, labels):
        f = lambda rows, c=label: clf.decision_function(rows.reshape(len(rows), -1))[:, c]  # noqa: E731
        saliency = Rise(f, grid=4).attribute(image[None], n_samples=1000, seed=0).values[0].ravel()
        flat = lambda rows, c=label: clf.decision_function(rows)[:, c]  # noqa: E731
        ours = deletion_curve(flat, image.ravel(), saliency).auc
        random = np.mean([deletion_curve(flat, image.ravel(), rng.normal(size=64)).auc for _ in range(5)])
        wins += ours < random
    assert wins >= 9


def test_rise_refuses_bad_input():
    model = lambda batch: batch.reshape(len(batch), -1).sum(axis=1)  # noqa: E731
    with pytest.raises(ShapeError, match="image_shape"):
        Rise(model).attribute(np.ones((1, 16)))
    with pytest.raises(ShapeError, match="do not hold"):
        Rise(model, image_shape=(3, 3)).attribute(np.ones((1, 16)))
    with pytest.raises(InvalidParameterError, match="p must"):
        Rise(model, p=1.0)
    with pytest.raises(InvalidParameterError, match="finite"):
        Rise(model).attribute(np.full((1, 4, 4), np.nan))
    with pytest.raises(ShapeError, match="baselines"):
        Rise(model).attribute(np.ones((1, 4, 4)), baselines=np.zeros(3))

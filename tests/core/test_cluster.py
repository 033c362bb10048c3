"""Spherical k-means: separated directions recovered, seeded, bad input named."""

import numpy as np
import pytest

from salience.core.cluster import spherical_kmeans
from salience.exceptions import InvalidParameterError, ShapeError


def test_separated_directions_are_recovered_exactly():
    rng = np.random.default_rng(0)
    axes = np.eye(8)[:4] * 5.0
    truth = rng.integers(0, 4, 400)
    X = axes[truth] + 0.3 * rng.normal(size=(400, 8))
    centroids, labels = spherical_kmeans(X, 4, seed=1)
    # the same partition whatever the cluster numbering
    pairs = {(t, l) for t, l in zip(truth.tolist(), labels.tolist())}
    assert len(pairs) == 4 and len({t for t, _ in pairs}) == 4 and len({l for _, l in pairs}) == 4
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0)
    # scale does not matter (cosine), the seed fixes the result
    again = spherical_kmeans(X * 7.0, 4, seed=1)[1]
    assert np.array_equal(again, labels)
    # as many clusters as rows: each its own
    assert sorted(spherical_kmeans(X[:5], 5)[1].tolist()) == [0, 1, 2, 3, 4]


def test_bad_input_is_named():
    with pytest.raises(InvalidParameterError, match="k=0"):
        spherical_kmeans(np.ones((3, 2)), 0)
    with pytest.raises(InvalidParameterError, match="k=4"):
        spherical_kmeans(np.ones((3, 2)), 4)
    with pytest.raises(ShapeError):
        spherical_kmeans(np.ones(3), 1)
    with pytest.raises(InvalidParameterError, match="NaN"):
        spherical_kmeans([[1.0, np.nan], [0.0, 1.0]], 1)

import numpy as np
import pytest

from salience.core.graph import pagerank_scores


@pytest.mark.parametrize("n", [6, 1200])  # exact solve and power iteration
def test_pagerank_solves_the_stationary_equation(n):
    rng = np.random.default_rng(0)
    W = rng.random((n, n))
    x = pagerank_scores(W, 0.85)
    P = W.copy()
    np.fill_diagonal(P, 0)
    P = P / P.sum(axis=1, keepdims=True)
    assert x == pytest.approx(0.85 * x @ P + 0.15 / n, rel=1e-6)
    assert x.sum() == pytest.approx(1.0)


def test_personalization_and_dangling_nodes():
    W = np.array([[0, 1.0, 0], [1.0, 0, 0], [0, 0, 0]])  # node 2 has no out-edges
    x = pagerank_scores(W, 0.85, personalization=np.array([0, 0, 1.0]))
    assert x.sum() == pytest.approx(1.0)
    assert x[2] == pytest.approx(0.15 / (1 - 0.85 / 3))  # it jumps uniformly, returns only by teleport

import numpy as np
import pytest

from salience import InvalidParameterError, Scores, kendall_tau, rank_biased_overlap, spearman_rho
from salience.core.correlation import jaccard_at_k, perfect_match_ratio


def test_parity_with_scipy_including_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 6, 40).astype(float)
        y = x + rng.integers(-3, 4, 40)
        assert kendall_tau(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_scores_are_matched_by_id():
    a = Scores([3, 2, 1], ids=["x", "y", "z"])
    b = Scores([1, 2, 3, 9], ids=["z", "y", "x", "only-here"])
    assert kendall_tau(a, b) == 1.0


def test_rbo():
    assert rank_biased_overlap(list("abcdef"), list("abcdef")) == pytest.approx(1.0)
    assert rank_biased_overlap(list("abc"), list("xyz")) == 0.0
    # equal-length lists: RBO_ext = (1-p)/p * sum_d (X_d/d) p^d + (X_k/k) p^k
    a, b, p = list("abcd"), list("bacd"), 0.8
    X = [0, 0, 2, 3, 4]
    expected = (1 - p) / p * sum(X[d] / d * p**d for d in range(1, 5)) + X[4] / 4 * p**4
    assert rank_biased_overlap(a, b, p) == pytest.approx(expected)
    assert rank_biased_overlap(list("abc"), list("abcxyz")) == rank_biased_overlap(list("abcxyz"), list("abc"))
    assert 0 < rank_biased_overlap(list("abc"), list("abcxyz")) < 1
    with pytest.raises(InvalidParameterError):
        rank_biased_overlap(list("ab"), list("ab"), p=1.0)


def test_jaccard_and_pmr():
    assert jaccard_at_k(list("abcd"), list("badx"), k=3) == pytest.approx(2 / 4)
    assert perfect_match_ratio([[1, 2], [2, 1], [3]], [[1, 2], [1, 2], [3]]) == pytest.approx(2 / 3)

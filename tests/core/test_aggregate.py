import itertools

import numpy as np
import pytest

from salience import IdMismatchError, InvalidParameterError, ShapeError, aggregate
from salience.core.base import method_names
from salience.core.aggregate import (
    bradley_terry,
    borda,
    copeland,
    kemeny,
    kemeny_distance,
    markov_chain,
    pagerank,
    pairwise_wins,
    win_rate,
)


def test_pairwise_wins_partial_rankings():
    items, W = pairwise_wins([["a", "b"], ["c"]])
    assert items == ["a", "b", "c"]
    # "a" beats "b" and "c" (left out) in the first; "c" beats both in the second
    assert W.tolist() == [[0, 1, 1], [0, 0, 1], [1, 1, 0]]


def test_borda_and_copeland_by_hand():
    rankings = [["a", "b", "c"], ["b", "c", "a"], ["a", "c", "b"]]
    assert borda(rankings).to_dict() == {"a": 7.0, "b": 6.0, "c": 5.0}
    assert copeland(rankings).to_dict() == {"a": 2.0, "b": 1.0, "c": 0.0}  # b beats c in 2 of 3


def test_kemeny_exact_equals_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(15):
        n = 6
        rankings = [list(rng.permutation(n)) for _ in range(5)]
        items, W = pairwise_wins(rankings, items=list(range(n)))
        best = min(kemeny_distance(list(p), W) for p in itertools.permutations(range(n)))
        result = kemeny(rankings, items=list(range(n)))
        order = [items.index(i) for i in result.ranked_ids()]
        assert kemeny_distance(order, W) == pytest.approx(best)


def test_kemeny_heuristic_close_to_exact():
    rng = np.random.default_rng(1)
    truth = list(range(11))
    rankings = []
    for _ in range(7):  # noisy copies of the truth
        r = truth.copy()
        for _ in range(4):
            i = rng.integers(10)
            r[i], r[i + 1] = r[i + 1], r[i]
        rankings.append(r)
    items, W = pairwise_wins(rankings, items=truth)
    exact = kemeny(rankings, items=truth, exact_max=11)
    heuristic = kemeny(rankings, items=truth, exact_max=5)
    cost = lambda s: kemeny_distance([items.index(i) for i in s.ranked_ids()], W)  # noqa: E731
    assert cost(heuristic) <= cost(exact) * 1.05


def test_matrix_methods_recover_true_strengths():
    rng = np.random.default_rng(2)
    n = 8
    strength = np.linspace(2, -2, n)  # item 0 strongest
    W = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            wins = rng.binomial(40, 1 / (1 + np.exp(strength[j] - strength[i])))
            W[i, j], W[j, i] = wins, 40 - wins
    for scores in (bradley_terry(W), pagerank(W), win_rate(W)):
        assert np.corrcoef(scores.values, strength)[0, 1] > 0.95
    fitted = bradley_terry(W, prior=0.0).values
    p = np.exp(fitted)
    expected_wins = ((W + W.T) * p[:, None] / (p[:, None] + p[None, :])).sum(axis=1)
    assert expected_wins == pytest.approx(W.sum(axis=1), abs=1e-3)  # the MLE's optimality condition


def test_bradley_terry_with_ties():
    W = np.array([[0, 6, 8], [4, 0, 6], [2, 4, 0]], dtype=float)
    T = np.array([[0, 5, 1], [5, 0, 2], [1, 2, 0]], dtype=float)
    with_ties = bradley_terry(W, ties=T)
    assert with_ties.ranked_ids() == [0, 1, 2]
    with pytest.raises(InvalidParameterError, match="symmetric"):
        bradley_terry(W, ties=np.triu(T))


def test_mc4_majority_winner_first():
    rankings = [["a", "b", "c"], ["a", "c", "b"], ["b", "a", "c"]]
    assert markov_chain(rankings).ranked_ids()[0] == "a"


@pytest.mark.parametrize("method", method_names("aggregate"))
def test_unanimous_rankings_are_reproduced(method):
    rankings = [["a", "b", "c", "d"]] * 3
    assert aggregate(rankings, method=method).ranked_ids() == ["a", "b", "c", "d"]


def test_bad_input():
    with pytest.raises(IdMismatchError, match="ranking 1 lists item 'x' twice"):
        aggregate([["a"], ["x", "x"]])
    with pytest.raises(IdMismatchError, match="not among"):
        aggregate([["a", "z"]], items=["a", "b"])
    with pytest.raises(InvalidParameterError, match="valid values"):
        aggregate([["a"]], method="plurality")
    with pytest.raises(ShapeError):
        pagerank(np.zeros((2, 3)))
    with pytest.raises(InvalidParameterError):
        win_rate(np.array([[0, np.nan], [1, 0]]))
    assert len(aggregate([], method="borda")) == 0

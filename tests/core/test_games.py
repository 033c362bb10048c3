"""The cooperative-game estimators the explain and data domains share, on games small enough
to enumerate by hand."""

import itertools
import math

import numpy as np
import pytest

from salience.core.games import (RunningMean, all_coalitions, banzhaf_regression, exact_semivalues, msr_banzhaf, permutation_contributions,
                                 position_weights, semivalue_weights)
from salience.exceptions import InvalidParameterError

# a 3-player game: v(S) = (number of players 0 and 1 in S)^2 + 3 [2 in S]
def game(masks):
    masks = np.atleast_2d(masks)
    return (masks[:, 0].astype(float) + masks[:, 1]) ** 2 + 3.0 * masks[:, 2]


VALUES = game(all_coalitions(3))


def test_exact_shapley_and_banzhaf_by_hand():
    # players 0 and 1 share v({0, 1}) = 4 equally; player 2 adds 3 to every coalition
    assert exact_semivalues(VALUES, 3, semivalue_weights(3, "shapley")).tolist() == pytest.approx([2.0, 2.0, 3.0])
    # Banzhaf: player 0's contributions 1 (without 1) or 3 (with 1), over 4 coalitions alike: 2
    assert exact_semivalues(VALUES, 3, semivalue_weights(3, "banzhaf")).tolist() == pytest.approx([2.0, 2.0, 3.0])


def test_beta_one_one_is_shapley_and_beta_weights_sum_to_one_per_size_class():
    assert np.allclose(semivalue_weights(6, "beta", alpha=1, beta=1), semivalue_weights(6, "shapley"))
    m = 7
    for kind, options in (("shapley", {}), ("beta", {"alpha": 16, "beta": 1}), ("beta", {"alpha": 4, "beta": 2})):
        w = semivalue_weights(m, kind, **options)
        # a semivalue's weights of all coalitions not holding a player sum to 1
        assert sum(math.comb(m - 1, k) * w[k] for k in range(m)) == pytest.approx(1.0)
    w = semivalue_weights(m, "beta", alpha=16, beta=1)
    assert w[0] > w[1] > w[m - 1]  # Beta(16, 1) weights small coalitions most
    with pytest.raises(InvalidParameterError, match="alpha and beta must be > 0"):
        semivalue_weights(3, "beta", alpha=0)
    with pytest.raises(InvalidParameterError, match="kind must be"):
        semivalue_weights(3, "owen")


def test_every_permutation_walked_gives_the_exact_shapley_and_beta_values():
    rng = np.random.default_rng(0)
    table = rng.normal(size=2**4)  # an arbitrary 4-player game
    bits = 1 << np.arange(4)

    def arbitrary(masks):
        return table[np.atleast_2d(masks).astype(int) @ bits]

    orders = np.array(list(itertools.permutations(range(4))))
    contributions, evaluated, reached = permutation_contributions(arbitrary, orders)
    assert reached.all()
    assert evaluated == 2 + len(orders) * 3  # the ends once, the inner coalitions of every walk
    assert np.allclose(contributions.mean(axis=0), exact_semivalues(table, 4, semivalue_weights(4)))
    weights = semivalue_weights(4, "beta", alpha=16, beta=1)
    positions = np.argsort(orders, axis=1)
    reweighted = contributions * position_weights(4, weights)[positions]
    assert np.allclose(reweighted.mean(axis=0), exact_semivalues(table, 4, weights))


def test_truncated_walks_stop_once_close_to_the_grand_coalition():
    orders = np.array([[2, 0, 1], [0, 1, 2]])
    full = float(game(np.ones(3, bool))[0])  # 7
    contributions, evaluated, reached = permutation_contributions(game, orders, empty_value=0.0, full_value=full,
                                                                  truncation=0.5)
    assert reached.all()  # the players after a cut count as zero
    # walk 1: {2} = 3 (|3 - 7| > 3.5), {2, 0} = 4 (within 3.5 of 7): stops, player 1 gets 0
    assert contributions[0].tolist() == [1.0, 0.0, 3.0]
    # walk 2: {0} = 1, {0, 1} = 4: stops, player 2 gets 0
    assert contributions[1].tolist() == [1.0, 3.0, 0.0]
    assert evaluated == 4


def test_a_budget_of_evaluations_ends_walks_unfinished():
    orders = np.array([[0, 1, 2], [2, 1, 0], [1, 0, 2]])
    contributions, evaluated, reached = permutation_contributions(game, orders, empty_value=0.0, full_value=7.0,
                                                                  max_evaluations=4)
    # position 1: three walks evaluated; position 2: room for one more
    assert evaluated == 4
    assert reached.tolist() == [[True, True, True], [False, False, True], [False, True, False]]
    assert contributions[0].tolist() == [1.0, 3.0, 3.0] and contributions[1].tolist() == [0.0, 0.0, 3.0]


def test_maximum_sample_reuse_on_every_coalition_is_banzhaf():
    masks = all_coalitions(3)
    assert msr_banzhaf(masks, VALUES).tolist() == pytest.approx([2.0, 2.0, 3.0])
    # and the least-squares linear fit over every coalition: the Banzhaf values too
    table = np.random.default_rng(2).normal(size=2**5)
    coalitions = all_coalitions(5)
    exact = exact_semivalues(table, 5, semivalue_weights(5, "banzhaf"))
    assert np.allclose(banzhaf_regression(coalitions, table), exact)
    assert np.allclose(msr_banzhaf(coalitions, table), exact)


def test_running_mean_matches_numpy_and_stops_by_tolerance_or_budget():
    rng = np.random.default_rng(1)
    samples = rng.normal(loc=[1.0, 5.0], scale=[0.1, 0.2], size=(50, 2))
    running = RunningMean(2, budget=10_000, tolerance=0.01)
    for chunk in np.array_split(samples, 7):
        running.update(chunk, evaluations=len(chunk))
    assert np.allclose(running.mean, samples.mean(axis=0))
    assert np.allclose(running.standard_errors, samples.std(axis=0, ddof=1) / np.sqrt(50))
    assert running.done() and running.converged  # 0.2 / sqrt(50) = 0.028 <= 0.01 x 5
    spent = RunningMean(2, budget=10)
    spent.update(samples[:3], evaluations=10)
    assert spent.done() and not spent.converged
    with pytest.raises(InvalidParameterError, match="budget must be"):
        RunningMean(2, budget=0)


def test_exact_enumeration_is_refused_past_its_limit():
    with pytest.raises(InvalidParameterError, match="limited to 20 players"):
        all_coalitions(21)

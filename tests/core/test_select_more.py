import itertools

import numpy as np
import pytest

from salience import InvalidParameterError, Scores, ShapeError
from salience.core.select import (
    expected_dcg_gain,
    expected_f1,
    select_coverage,
    select_cutoff,
    select_facility_location,
    select_fraction,
    select_mmr,
)


def test_fraction():
    s = Scores([5, 1, 4, 2, 3], ids="abcde")
    assert select_fraction(s, fraction=0.4).ids == ["a", "c"]
    assert select_fraction(s, fraction=0.01).ids == ["a"]
    with pytest.raises(InvalidParameterError):
        select_fraction(s, fraction=0)


def test_mmr_trades_relevance_for_novelty():
    s = Scores([1.0, 0.95, 0.5], ids=["a", "a-copy", "b"])
    S = np.array([[1, 0.99, 0.1], [0.99, 1, 0.1], [0.1, 0.1, 1]])
    assert select_mmr(s, S, k=2, diversity=0.0).ids == ["a", "a-copy"]
    assert select_mmr(s, S, k=2, diversity=0.5).ids == ["a", "b"]
    with pytest.raises(ShapeError):
        select_mmr(s, np.eye(2), k=2)


def _facility_value(S, chosen):
    return S[:, chosen].max(axis=1).sum() if chosen else 0.0


def test_facility_location_greedy_bound():
    rng = np.random.default_rng(0)
    X = rng.random((12, 3))
    S = X @ X.T
    picked = select_facility_location(S, k=3)
    value = _facility_value(S, list(picked.ids))
    best = max(_facility_value(S, list(c)) for c in itertools.combinations(range(12), 3))
    assert value >= (1 - 1 / np.e) * best
    assert value == pytest.approx(picked.values.sum())


def test_coverage():
    concepts = [{"a", "b", "c"}, {"c", "d"}, {"d", "e"}, {"a"}]
    picked = select_coverage(concepts, k=2, ids=["w", "x", "y", "z"])
    assert picked.ids == ["w", "y"] and picked.values.tolist() == [3.0, 2.0]
    weighted = select_coverage(concepts, k=1, ids=["w", "x", "y", "z"], concept_weights={"e": 10})
    assert weighted.ids == ["y"]


def test_expected_f1_matches_enumeration():
    p = np.array([0.95, 0.7, 0.4, 0.2, 0.05])
    curve = expected_f1(p)
    for k in range(len(p) + 1):
        total = 0.0
        for rel in itertools.product([0, 1], repeat=len(p)):
            prob = np.prod([q if r else 1 - q for q, r in zip(p, rel)])
            a, R = sum(rel[:k]), sum(rel)
            total += prob * (1.0 if k == 0 and R == 0 else 2 * a / (k + R))
        assert curve[k] == pytest.approx(total, abs=1e-12)


def test_cutoff_selection():
    s = Scores([0.9, 0.05, 0.8, 0.3, 0.6], ids="abcde")
    best_k = int(np.argmax(expected_f1(sorted(s.values, reverse=True))))
    assert select_cutoff(s).ids == s.ranked_ids()[:best_k]
    assert select_cutoff(s, objective="dcg").ids == ["a", "c", "e"]  # keeps items with p > 0.5
    assert expected_dcg_gain([0.5])[1] == 0.0
    with pytest.raises(InvalidParameterError, match="probabilities"):
        select_cutoff(Scores([2.0, 0.1]))


def test_functions_and_their_methods_share_one_declaration_of_constraints():
    """A selector function checks its arguments from the constraints it declares
    (validate_params), and the registered method made from it inherits them."""
    from salience.core.base import method_factory
    from salience.core.select import select_fraction, select_top_k
    from salience.core.sort import sliding_window
    from salience.exceptions import InvalidParameterError

    scores = Scores([1.0, 3.0, 2.0], ids=list("abc"))
    with pytest.raises(InvalidParameterError, match=r"select_top_k: k must be a positive integer; got True"):
        select_top_k(scores, k=True)
    with pytest.raises(InvalidParameterError, match=r"fraction must be a number in \(0, 1\]; got 1.5"):
        select_fraction(scores, fraction=1.5)
    with pytest.raises(InvalidParameterError, match=r"window must be an integer >= 2"):
        sliding_window(["a", "b"], None, window=1)
    assert method_factory("select", "top_k")._constraints() == select_top_k._parameter_constraints
    with pytest.raises(InvalidParameterError, match=r"TopK: k must be a positive integer; got 0"):
        method_factory("select", "top_k")(k=0)
    assert select_top_k(scores, k=2).ids == ["b", "c"]

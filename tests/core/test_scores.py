import numpy as np
import pytest

from salience import InvalidParameterError, Scores, ShapeError, select_budget, select_threshold, select_top_k
from salience.core.select import check_k


def test_rank_ties_keep_position():
    s = Scores([1.0, 3.0, 1.0, 3.0], ids=["a", "b", "c", "d"])
    assert s.ranked_ids() == ["b", "d", "a", "c"]
    assert s.rank().tolist() == [3, 1, 4, 2]


def test_top_k_ties_at_boundary_take_lowest_positions():
    values = np.array([5, 1, 2, 2, 2, 2, 0], dtype=float)
    s = Scores(values, ids=list("abcdefg"))
    assert s.top_k(3).ids == ["a", "c", "d"]
    assert s.top_k(100).ids == ["a", "c", "d", "e", "f", "b", "g"]


def test_top_k_matches_full_sort_on_random_data():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 20, size=500).astype(float)  # many ties
    s = Scores(values)
    for k in (1, 7, 50, 499, 500):
        assert s.top_k(k).ids == s.ranked_ids()[:k]


def test_normalize():
    s = Scores([1.0, 3.0, 2.0])
    assert s.normalize("minmax").values.tolist() == [0.0, 1.0, 0.5]
    assert s.normalize("sum").values.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])
    assert s.normalize("max").values.tolist() == pytest.approx([1 / 3, 1.0, 2 / 3])
    assert s.normalize("rank").values.tolist() == pytest.approx([1 / 3, 1.0, 2 / 3])
    z = s.normalize("zscore").values
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0)
    assert Scores([2.0, 2.0]).normalize("minmax").values.tolist() == [0.0, 0.0]
    with pytest.raises(InvalidParameterError, match="did you mean|valid values"):
        s.normalize("min-max")


def test_bad_scores():
    with pytest.raises(InvalidParameterError, match="NaN.*id 'b'"):
        Scores([1.0, float("nan")], ids=["a", "b"])
    with pytest.raises(ShapeError, match="2 values and 3 ids"):
        Scores([1.0, 2.0], ids=["a", "b", "c"])
    with pytest.raises(ShapeError):
        Scores(np.zeros((2, 2)))


@pytest.mark.parametrize("k", [0, -1, 1.5, "3", True])
def test_bad_k(k):
    with pytest.raises(InvalidParameterError, match="positive integer"):
        check_k(k)


def test_select_top_k_and_threshold():
    s = Scores([0.1, 0.9, 0.5], ids=["a", "b", "c"])
    assert select_top_k(s, k=2).ids == ["b", "c"]
    assert select_threshold(s, threshold=0.5).ids == ["b", "c"]
    assert select_threshold(s, threshold=0.5, inclusive=False).ids == ["b"]


def _brute_force_knapsack(values, costs, budget):
    best = 0.0
    n = len(values)
    for mask in range(1 << n):
        chosen = [i for i in range(n) if mask >> i & 1]
        if sum(costs[i] for i in chosen) <= budget:
            total = sum(values[i] for i in chosen)
            if total > best + 1e-12:
                best = total
    return best


def test_budget_exact_equals_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = 10
        values = rng.random(n)
        costs = rng.integers(1, 8, size=n)
        budget = int(rng.integers(0, 30))
        chosen = select_budget(Scores(values), costs, budget=budget)
        assert sum(costs[i] for i in chosen.ids) <= budget
        assert chosen.values.sum() == pytest.approx(_brute_force_knapsack(values, costs, budget))


def test_budget_greedy_is_feasible_and_half_optimal():
    rng = np.random.default_rng(2)
    for _ in range(20):
        values = rng.random(12)
        costs = rng.random(12) * 3
        budget = 4.2
        chosen = select_budget(Scores(values), costs, budget=budget)  # float costs -> greedy
        assert sum(costs[i] for i in chosen.ids) <= budget + 1e-12
        assert chosen.values.sum() >= 0.5 * _brute_force_knapsack(values, costs, budget) - 1e-12


def test_budget_bad_input():
    s = Scores([1.0, 2.0])
    with pytest.raises(ShapeError):
        select_budget(s, [1], budget=3)
    with pytest.raises(InvalidParameterError, match="budget"):
        select_budget(s, [1, 1], budget=-1)
    with pytest.raises(InvalidParameterError, match="non-negative"):
        select_budget(s, [1, -1], budget=3)
    with pytest.raises(InvalidParameterError, match="integer"):
        select_budget(s, [1.5, 1], budget=3, method="exact")


def test_unchecked_rows_cut_each_row_at_its_count():
    values = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 0.0], [0.0, 0.0, 0.0]])
    rows = Scores.unchecked_rows(values, [["a", "b", "c"], ["d", "e"], []], [3, 2, 0])
    assert [r.ids for r in rows] == [["a", "b", "c"], ["d", "e"], []]
    assert [r.values.tolist() for r in rows] == [[3.0, 2.0, 1.0], [5.0, 4.0], []]
    assert rows[0].top_k(2).ids == ["a", "b"] and rows[1]["e"] == 4.0
    assert Scores.unchecked_rows(np.zeros((0, 3)), [], []) == []

import numpy as np
import pytest

from salience import InvalidParameterError, JudgeError, ListwiseJudge, PairwiseJudge, ScorerJudge
from salience.core.sort import (
    allpairs,
    block_design,
    bubble_top_k,
    heapsort_top_k,
    jointrank,
    permutation_self_consistency,
    setwise_top_k,
    sliding_window,
    tsp_order,
)

TRUTH = {f"d{i}": i for i in range(40)}
ITEMS = [f"d{i}" for i in np.random.default_rng(0).permutation(40)]
BEST = sorted(TRUTH, key=lambda d: -TRUTH[d])


def perfect_pairwise(query, a, b):
    return TRUTH[a] > TRUTH[b]


def perfect_listwise(query, items):
    return sorted(items, key=lambda d: -TRUTH[d])


@pytest.mark.parametrize("algorithm", [heapsort_top_k, bubble_top_k])
def test_pairwise_top_k_with_a_perfect_judge(algorithm):
    judge = PairwiseJudge(perfect_pairwise)
    result = algorithm(ITEMS, judge, k=10)
    assert result.ids[:10] == BEST[:10]
    assert sorted(result.ids) == sorted(ITEMS)  # the rest follows in initial order
    assert 0 < judge.calls


def test_bubble_call_count_exact():
    judge = PairwiseJudge(perfect_pairwise)
    bubble_top_k(ITEMS, judge, k=3)
    n, k = 40, 3
    assert judge.calls + judge.cache_hits == k * (2 * n - k - 1) // 2


def test_allpairs_and_both_orders_cancel_position_bias():
    def biased(query, a, b):  # prefers whatever is shown first unless the gap is large
        return True if abs(TRUTH[a] - TRUTH[b]) < 5 else TRUTH[a] > TRUTH[b]

    plain = allpairs(ITEMS, PairwiseJudge(biased))
    judge = PairwiseJudge(biased, both_orders=True)
    debiased = allpairs(ITEMS, judge)
    assert judge.calls == 40 * 39  # both orders of every pair
    truth_scores = [TRUTH[i] for i in ITEMS]
    from salience import kendall_tau, Scores

    assert kendall_tau(debiased, Scores(truth_scores, ids=ITEMS)) > kendall_tau(plain, Scores(truth_scores, ids=ITEMS))
    assert allpairs(ITEMS, PairwiseJudge(perfect_pairwise)).ranked_ids() == BEST


def test_listwise_algorithms_with_a_perfect_judge():
    judge = ListwiseJudge(perfect_listwise)
    assert sliding_window(ITEMS, judge, window=10, stride=5).ids[:5] == BEST[:5]
    assert judge.calls == 7  # windows at 30, 25, ..., 0
    judge = ListwiseJudge(perfect_listwise)
    assert setwise_top_k(ITEMS, judge, k=5, set_size=4).ids[:5] == BEST[:5]
    assert permutation_self_consistency(ITEMS[:9], ListwiseJudge(perfect_listwise), shuffles=3).ranked_ids() == sorted(
        ITEMS[:9], key=lambda d: -TRUTH[d]
    )
    judge = ListwiseJudge(perfect_listwise, n_jobs=4)
    top = jointrank(ITEMS, judge, block_size=10, repetitions=3, aggregate_with="winrate").ranked_ids()
    assert judge.calls == len(block_design(40, 10, 3))
    assert len(set(top[:10]) & set(BEST[:10])) >= 8


def test_jointrank_shows_blocks_in_first_stage_order():
    """A judge that always prefers the first position (a small LM's bias) leaves the first
    stage's order nearly intact when blocks keep it, and scrambles it when they are shuffled."""
    items = [f"d{i}" for i in range(30)]
    first_position = ListwiseJudge(lambda query, shown: list(range(len(shown))))
    kept = jointrank(items, first_position, block_size=10).ranked_ids()
    assert kept[:3] == items[:3] and set(kept[:10]) == set(items[:10])
    shuffled = jointrank(items, first_position, block_size=10, block_order="random").ranked_ids()
    assert len(set(shuffled[:10]) & set(items[:10])) < 8
    with pytest.raises(InvalidParameterError, match="unknown block_order of jointrank"):
        jointrank(items, first_position, block_order="sorted")


def test_block_design_covers_and_connects():
    blocks = block_design(53, 8, 2, seed=3)
    counts = np.bincount(np.concatenate(blocks), minlength=53)
    assert (counts >= 2).all() and all(len(b) == 8 for b in blocks)
    single = block_design(53, 8, 1, seed=3)  # one partition alone is disconnected: bridges are added
    parent = list(range(53))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for b in single:
        for p in b[1:]:
            parent[find(p)] = find(b[0])
    assert len({find(p) for p in range(53)}) == 1


def test_tsp_exact_and_heuristic():
    rng = np.random.default_rng(4)
    n = 9
    S = rng.random((n, n))
    import itertools

    best = max(sum(S[p[i], p[i + 1]] for i in range(n - 1)) for p in itertools.permutations(range(n)))
    order = tsp_order(list(range(n)), preferences=S).ids
    assert sum(S[order[i], order[i + 1]] for i in range(n - 1)) == pytest.approx(best)
    judge = PairwiseJudge(perfect_pairwise)
    assert tsp_order(ITEMS[:20], judge, exact_max=5).ids == sorted(ITEMS[:20], key=lambda d: -TRUTH[d])


def test_cache_and_budget():
    judge = PairwiseJudge(perfect_pairwise, budget=100)
    with pytest.raises(InvalidParameterError, match=r"needs up to 780 judge calls.*at least 780"):
        allpairs(ITEMS, judge)
    assert judge.calls == 0
    with pytest.raises(InvalidParameterError, match="budget"):
        bubble_top_k(ITEMS, judge, k=10)
    small = PairwiseJudge(perfect_pairwise, budget=400)
    bubble_top_k(ITEMS, small, k=5)
    before = small.calls
    bubble_top_k(ITEMS, small, k=5)  # every comparison is cached now
    assert small.calls == before and small.cache_hits > 0


def test_judge_errors_name_the_call():
    def broken(query, a, b):
        raise TimeoutError("model timed out")

    with pytest.raises(JudgeError, match=r"judge call #1 judge\(None, 'd.*raised TimeoutError: model timed out"):
        heapsort_top_k(ITEMS, PairwiseJudge(broken), k=3)
    with pytest.raises(JudgeError, match=r"returned 'yes'"):
        heapsort_top_k(ITEMS, lambda q, a, b: "yes", k=3)
    with pytest.raises(JudgeError, match=r"returned 1.5"):
        allpairs(ITEMS[:3], lambda q, a, b: 1.5)
    with pytest.raises(JudgeError, match="permutation of its 10 items"):
        sliding_window(ITEMS, lambda q, items: items[:-1], window=10, stride=5)
    assert sliding_window(ITEMS[:4], lambda q, items: [3, 2, 1, 0], window=4, stride=2).ids == ITEMS[:4][::-1]
    with pytest.raises(InvalidParameterError, match="pairwise judge"):
        allpairs(ITEMS, ListwiseJudge(perfect_listwise))


def test_scorer_judge_on_bm25():
    from salience.search import BM25

    index = BM25().index(["red fox jumps", "red red fox", "blue whale", "fox"])
    judge = ScorerJudge(index.score, temperature=0)
    assert judge.pairwise("red fox", "1", "2") == 1.0
    assert judge.listwise("red fox", ["2", "3", "0", "1"]) == index.search("red fox", k=4).ids[:3] + ["2"]
    assert heapsort_top_k(["0", "1", "2", "3"], judge, k=2, query="red fox").ids[:2] == index.search("red fox", k=2).ids

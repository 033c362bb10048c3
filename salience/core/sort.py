"""Ranking with a costly, noisy judge.

Pairwise algorithms call a :class:`~salience.core.judges.PairwiseJudge`; listwise ones a
:class:`~salience.core.judges.ListwiseJudge`; a plain callable is wrapped. Every algorithm takes
the items in their initial order (usually a first-stage ranking), returns
:class:`~salience.Scores` whose rank order is the result (items it did not sort keep their
initial order below the sorted ones), and leaves the call count on the judge (``judge.calls``).
Before starting, an algorithm whose worst-case number of calls exceeds the judge's remaining
budget stops with an error that gives the minimum budget.

References
----------
Qin et al. Large language models are effective text rankers with pairwise ranking prompting. 2023 (PRP).
Sun et al. Is ChatGPT good at search? Investigating LLMs as re-ranking agents. EMNLP 2023 (sliding window).
Zhuang et al. A setwise approach to effective and highly efficient zero-shot ranking with LLMs. SIGIR 2024.
Tang et al. Found in the middle: permutation self-consistency improves listwise ranking in LLMs. NAACL 2024.
Dedov. JointRank: rank large sets with single queries. 2025.
TSPRank: bridging pairwise and listwise methods with a bilinear travelling salesman model. 2024.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Sequence

import numpy as np

from salience.core.judges import as_listwise, as_pairwise
from salience.core.base import FunctionMethod, create, function_method, register
from salience.core.graph import DisjointSets
from salience.core.scores import Scores, first_duplicate
from salience.core.params import SEED, Interval, Options, validate_params
from salience.exceptions import IdMismatchError, InvalidParameterError

__all__ = [
    "allpairs",
    "heapsort_top_k",
    "bubble_top_k",
    "sliding_window",
    "setwise_top_k",
    "jointrank",
    "block_design",
    "permutation_self_consistency",
    "tsp_order",
]


def _items(items: Sequence[Hashable]) -> list:
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidParameterError("items must be a list of item ids in their initial order.")
    items = list(items)
    dup = first_duplicate(items)
    if dup is not None:
        raise IdMismatchError(f"item {dup!r} appears twice in the list to rank.")
    return items


def _ranking_scores(order: list, items: list) -> Scores:
    """Scores that reproduce ``order`` (a prefix of the result) with the rest in initial order."""
    placed = set(order)
    full = order + [i for i in items if i not in placed]
    n = len(full)
    return Scores(np.arange(n, 0, -1, dtype=np.float64), ids=full)


# ------------------------------------------------------------------------------------------
# pairwise
def allpairs(items: Sequence[Hashable], judge, *, query: Any = None) -> Scores:
    """PRP-allpairs: each item scores the sum over all others of ``P(item before other)``.

    ``n (n - 1) / 2`` comparisons (twice that with ``both_orders``); robust to an inconsistent judge.
    """
    items, judge = _items(items), as_pairwise(judge)
    n = len(items)
    pairs = [(items[i], items[j]) for i in range(n) for j in range(i + 1, n)]
    judge.require(len(pairs) * judge.calls_per_comparison, f"allpairs over {n} items")
    probabilities = judge.prefer_batch(query, pairs)
    score = dict.fromkeys(items, 0.0)
    for (a, b), p in zip(pairs, probabilities):
        score[a] += p
        score[b] += 1.0 - p
    return Scores(list(score.values()), ids=items)


class _Comparator:
    """``before(a, b)``: the judge says ``a`` goes first (ties: the earlier item in the input)."""

    def __init__(self, judge, query, items):
        self.judge, self.query = judge, query
        self.position = {item: i for i, item in enumerate(items)}

    def before(self, a, b) -> bool:
        p = self.judge.prefer(self.query, a, b)
        return p > 0.5 or (p == 0.5 and self.position[a] < self.position[b])


@validate_params({"k": [Interval("int", 1)]})
def heapsort_top_k(items: Sequence[Hashable], judge, *, k: int = 10, query: Any = None) -> Scores:
    """PRP heapsort: build a heap with the judge, then pop the best ``k``.

    At most ``2 n + 2 k log2(n)`` comparisons.
    """
    items, judge = _items(items), as_pairwise(judge)
    n = len(items)
    if n == 0:
        return Scores([], ids=[])
    k = min(k, n)
    worst = (2 * n + 2 * k * max(1, math.ceil(math.log2(n)))) * judge.calls_per_comparison
    judge.require(worst, f"heapsort top-{k} of {n} items")
    cmp = _Comparator(judge, query, items)
    heap = list(items)

    def sift_down(start: int, end: int) -> None:
        root = start
        while 2 * root + 1 < end:
            child = 2 * root + 1
            if child + 1 < end and cmp.before(heap[child + 1], heap[child]):
                child += 1
            if cmp.before(heap[child], heap[root]):
                heap[root], heap[child] = heap[child], heap[root]
                root = child
            else:
                return

    for start in range(n // 2 - 1, -1, -1):
        sift_down(start, n)
    order = []
    end = n
    for _ in range(k):
        order.append(heap[0])
        end -= 1
        heap[0] = heap[end]
        sift_down(0, end)
    return _ranking_scores(order, items)


@validate_params({"k": [Interval("int", 1)]})
def bubble_top_k(items: Sequence[Hashable], judge, *, k: int = 10, query: Any = None) -> Scores:
    """PRP-sliding: ``k`` bubble passes from the bottom of the initial ranking to the top.

    Exactly ``k (2 n - k - 1) / 2`` comparisons (fewer when repeats hit the cache).
    """
    items, judge = _items(items), as_pairwise(judge)
    n = len(items)
    k = min(k, n)
    judge.require(k * (2 * n - k - 1) // 2 * judge.calls_per_comparison, f"bubble top-{k} of {n} items")
    cmp = _Comparator(judge, query, items)
    order = list(items)
    for p in range(k):
        for i in range(n - 1, p, -1):
            if cmp.before(order[i], order[i - 1]):
                order[i], order[i - 1] = order[i - 1], order[i]
    return _ranking_scores(order[:k], items)


# ------------------------------------------------------------------------------------------
# listwise
def _check_window(window: int, stride: int) -> None:
    if stride > window:
        raise InvalidParameterError(f"stride ({stride}) must not exceed window ({window}): items would be skipped.")


def _window_starts(n: int, window: int, stride: int) -> list[int]:
    if n <= window:
        return [0]
    starts = list(range(n - window, -1, -stride))
    if starts[-1] != 0:
        starts.append(0)
    return starts


@validate_params({"window": [Interval("int", 2)], "stride": [Interval("int", 1)], "passes": [Interval("int", 1)]})
def sliding_window(
    items: Sequence[Hashable], judge, *, window: int = 20, stride: int = 10, passes: int = 1, query: Any = None
) -> Scores:
    """RankGPT's sliding window: rerank windows of ``window`` items from the bottom of the list
    to the top, moving up by ``stride``, so strong items bubble to the top in one pass.

    Calls per pass: ``ceil((n - window) / stride) + 1``.
    """
    items, judge = _items(items), as_listwise(judge)
    _check_window(window, stride)
    order = list(items)
    starts = _window_starts(len(order), window, stride)
    judge.require(len(starts) * passes, f"sliding window ({window}/{stride}) over {len(order)} items")
    for _ in range(passes):
        for start in starts:
            order[start : start + window] = judge.rank(query, order[start : start + window])
    return _ranking_scores(order, items)


@validate_params({"k": [Interval("int", 1)], "set_size": [Interval("int", 2)]})
def setwise_top_k(items: Sequence[Hashable], judge, *, k: int = 10, set_size: int = 4, query: Any = None) -> Scores:
    """Setwise bubble selection: ``k`` passes; each slides a set of ``set_size`` items from the
    bottom up, asking the judge for the best of the set and carrying it upward.

    Calls per pass ``p``: ``ceil((n - p - 1) / (set_size - 1))``.
    """
    items, judge = _items(items), as_listwise(judge)
    n = len(items)
    k = min(k, n)
    step = set_size - 1
    needed = sum(math.ceil((n - p - 1) / step) for p in range(k) if n - p > 1)
    judge.require(needed, f"setwise top-{k} of {n} items (sets of {set_size})")
    order = list(items)
    for p in range(k):
        end = n
        while end - p > 1:
            start = max(p, end - set_size)
            best = judge.rank(query, order[start:end])[0]
            i = order.index(best, start, end)
            order.insert(start, order.pop(i))  # the best of the set moves to its top
            end = start + 1
    return _ranking_scores(order[:k], items)


@validate_params({"n": [Interval("int", 0)], "block_size": [Interval("int", 2)],
                  "repetitions": [Interval("int", 1)], "seed": SEED})
def block_design(n: int, block_size: int, repetitions: int, *, seed: int = 0) -> list[list[int]]:
    """Blocks of positions ``0..n-1``: every position in at least ``repetitions`` blocks of
    ``block_size`` (random, balanced: ``repetitions`` shuffled partitions, the short last block
    of each filled from its start), with the comparison graph connected."""
    rng = np.random.default_rng(seed)
    if n <= block_size:
        return [list(range(n))]
    blocks = []
    for _ in range(repetitions):
        perm = rng.permutation(n).tolist()
        for start in range(0, n, block_size):
            block = perm[start : start + block_size]
            if len(block) < block_size:
                block = block + [p for p in perm[: block_size - len(block)] if p not in block]
            blocks.append(block)
    # connect the comparison graph: bridge components with a block holding one of each
    sets = DisjointSets(n)
    for block in blocks:
        for p in block[1:]:
            sets.union(p, block[0])
    roots = sorted(set(sets.roots()))
    while len(roots) > 1:
        bridge = roots[:block_size]
        blocks.append(bridge)
        for r in bridge[1:]:
            sets.union(r, bridge[0])
        roots = sorted(set(sets.roots()))
    return blocks


@validate_params({"block_size": [Interval("int", 2)], "repetitions": [Interval("int", 1)], "aggregate_with": [str],
                  "seed": SEED, "block_order": [Options(("input", "random"))]})
def jointrank(
    items: Sequence[Hashable],
    judge,
    *,
    block_size: int = 20,
    repetitions: int = 3,
    aggregate_with: str = "pagerank",
    seed: int = 0,
    query: Any = None,
    block_order: str = "input",
) -> Scores:
    """JointRank: rank overlapping blocks (independently, so in parallel with ``n_jobs``),
    turn each block ranking into pairwise wins, and aggregate them (``pagerank`` or ``winrate``,
    or any registered ``aggregate`` method). Calls: the number of blocks.

    ``block_order="input"`` shows each block's items in their order in ``items`` (the first
    stage's, as sliding windows do), so a judge's position bias falls back on that order;
    ``"random"`` shows them in the design's random order. (With a position-biased judge and
    random order, every query of a run gets the same design, so the first stage's best items
    land in the same block positions for all of them.)"""
    items, judge = _items(items), as_listwise(judge)
    aggregator = create("aggregate", aggregate_with, unranked="ignore")  # an unknown name is refused before any call
    blocks = block_design(len(items), block_size, repetitions, seed=seed)
    if block_order == "input":
        blocks = [sorted(block) for block in blocks]
    judge.require(len(blocks), f"JointRank with {len(blocks)} blocks")
    rankings = judge.rank_batch(query, [[items[p] for p in block] for block in blocks])
    # a block ranks its own items only: nothing is implied about items outside it
    return aggregator.score(rankings, items=items)


@validate_params({"shuffles": [Interval("int", 1)], "aggregate_with": [str], "seed": SEED})
def permutation_self_consistency(
    items: Sequence[Hashable], judge, *, shuffles: int = 10, aggregate_with: str = "kemeny", seed: int = 0, query: Any = None
) -> Scores:
    """Permutation self-consistency: ask the listwise judge to rank ``shuffles`` random
    permutations of the list and aggregate the answers (Kemeny by default), cancelling
    position bias. Calls: ``shuffles``."""
    items, judge = _items(items), as_listwise(judge)
    aggregator = create("aggregate", aggregate_with)
    judge.require(shuffles, f"permutation self-consistency with {shuffles} shuffles")
    rng = np.random.default_rng(seed)
    lists = [[items[i] for i in rng.permutation(len(items))] for _ in range(shuffles)]
    rankings = judge.rank_batch(query, lists)
    return aggregator.score(rankings, items=items)


# ------------------------------------------------------------------------------------------
# TSP ordering
def _path_value(order: list[int], S: np.ndarray) -> float:
    return float(S[order[:-1], order[1:]].sum()) if len(order) > 1 else 0.0


def _held_karp_path(S: np.ndarray) -> list[int]:
    """Exact maximum-weight Hamiltonian path (any start, any end)."""
    n = len(S)
    size = 1 << n
    best = np.full((size, n), -np.inf)
    parent = np.full((size, n), -1, dtype=np.int64)
    for j in range(n):
        best[1 << j, j] = 0.0
    for mask in range(1, size):
        row = best[mask]
        ends = [j for j in range(n) if mask >> j & 1 and np.isfinite(row[j])]
        for j in ends:
            value = row[j]
            for t in range(n):
                if mask >> t & 1:
                    continue
                nxt = mask | (1 << t)
                cand = value + S[j, t]
                if cand > best[nxt, t]:
                    best[nxt, t] = cand
                    parent[nxt, t] = j
    mask = size - 1
    end = int(np.argmax(best[mask]))
    order = []
    while end != -1:
        order.append(end)
        prev = int(parent[mask, end])
        mask &= ~(1 << end)
        end = prev
    return order[::-1]


def _local_search_path(S: np.ndarray, order: list[int]) -> list[int]:
    """2-opt (segment reversal) and Or-opt (move a run of 1-3 items) until no move helps."""
    n = len(order)
    best = _path_value(order, S)
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for j in range(i + 1, n):
                candidate = order[:i] + order[i : j + 1][::-1] + order[j + 1 :]
                value = _path_value(candidate, S)
                if value > best + 1e-12:
                    order, best, improved = candidate, value, True
        for length in (1, 2, 3):
            for i in range(n - length + 1):
                run = order[i : i + length]
                rest = order[:i] + order[i + length :]
                for j in range(len(rest) + 1):
                    if j == i:
                        continue
                    candidate = rest[:j] + run + rest[j:]
                    value = _path_value(candidate, S)
                    if value > best + 1e-12:
                        order, best, improved = candidate, value, True
                        break
    return order


@validate_params({"exact_max": [Interval("int", 0)]})
def tsp_order(
    items: Sequence[Hashable], judge=None, *, preferences: np.ndarray | None = None, exact_max: int = 13, query: Any = None
) -> Scores:
    """TSPRank: order items along the Hamiltonian path that maximises the sum of
    ``P(a before b)`` over consecutive pairs.

    Give a pairwise ``judge`` (all pairs are asked) or a ready ``preferences`` matrix. Exact
    (Held-Karp) up to ``exact_max`` items; beyond, a greedy path (by PRP-allpairs score) refined
    with 2-opt and Or-opt moves.
    """
    items = _items(items)
    n = len(items)
    if preferences is None:
        if judge is None:
            raise InvalidParameterError("tsp_order needs a pairwise judge or a preferences matrix.")
        judge = as_pairwise(judge)
        pairs = [(items[i], items[j]) for i in range(n) for j in range(i + 1, n)]
        judge.require(len(pairs) * judge.calls_per_comparison, f"TSP ordering of {n} items")
        S = np.full((n, n), 0.5)
        for (i, j), p in zip(((i, j) for i in range(n) for j in range(i + 1, n)), judge.prefer_batch(query, pairs)):
            S[i, j], S[j, i] = p, 1.0 - p
    else:
        S = np.asarray(preferences, dtype=np.float64)
        if S.shape != (n, n) or not np.isfinite(S).all():
            raise InvalidParameterError(f"preferences must be a finite {n}x{n} matrix; got shape {S.shape}.")
    np.fill_diagonal(S, 0.0)
    if n <= 1:
        order = list(range(n))
    elif n <= exact_max:
        order = _held_karp_path(S)
    else:
        start = list(np.argsort(-S.sum(axis=1), kind="stable"))
        order = _local_search_path(S, start)
    return _ranking_scores([items[i] for i in order], items)


class JudgeSort(FunctionMethod):
    """Base of the sorting algorithms that ask a costly judge: one subclass per algorithm, its
    parameters the algorithm's; ``score(items, judge, query=...)`` is the order.

    >>> from salience.core.base import create
    >>> from salience.core.judges import ScorerJudge
    >>> judge = ScorerJudge(lambda query, items: [len(i) for i in items])
    >>> create("sort", "allpairs").score(["aa", "a", "aaa"], judge).ranked_ids()
    ['aaa', 'aa', 'a']
    """

    per_call = ("query", "preferences")


for _method, _function, _class, _description in (
    ("allpairs", allpairs, "AllPairs", "PRP all pairs: every pair compared, items ranked by wins (Qin et al., 2024)"),
    ("heapsort", heapsort_top_k, "HeapsortTopK", "PRP heapsort: the top k with O(n + k log n) comparisons"),
    ("bubble", bubble_top_k, "BubbleTopK", "PRP bubble sort: k passes of adjacent comparisons"),
    ("sliding_window", sliding_window, "SlidingWindow", "listwise sliding window from the bottom up (RankGPT)"),
    ("setwise", setwise_top_k, "SetwiseTopK", "setwise top-k: the judge picks the best of small sets (Zhuang et al., 2024)"),
    ("jointrank", jointrank, "JointRank", "JointRank: overlapping blocks ranked in parallel, then aggregated"),
    ("permutation_self_consistency", permutation_self_consistency, "PermutationSelfConsistency",
     "permutation self-consistency: shuffled lists aggregated (Tang et al., 2024)"),
    ("tsp", tsp_order, "TSPOrder", "ordering by a travelling-salesman path over pairwise preferences"),
):
    register("sort", _method, function_method(JudgeSort, _function, _class), _description)

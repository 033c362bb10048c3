"""Centrality on weighted graphs: the one PageRank that every domain uses (LexRank, TextRank,
PositionRank, TopicRank, JointRank's PageRank aggregation)."""

from __future__ import annotations

import numpy as np

__all__ = ["pagerank_scores"]

# Up to this many nodes the stationary vector is solved exactly; beyond, power iteration.
_EXACT_MAX_NODES = 1000


def pagerank_scores(weights: np.ndarray, damping: float = 0.85, personalization: np.ndarray | None = None,
                    tol: float = 1e-10, max_iter: int = 1000) -> np.ndarray:
    """Stationary distribution of the walk that follows out-edges in proportion to
    ``weights[i, j]`` (edge i -> j) with probability ``damping`` and otherwise jumps to a node
    drawn from ``personalization`` (uniform by default). Self-loops are ignored; a node without
    out-edges jumps uniformly.

    >>> np.round(pagerank_scores(np.array([[0, 1.0], [1.0, 0]])), 6).tolist()
    [0.5, 0.5]
    """
    W = np.array(weights, dtype=np.float64)
    n = len(W)
    if n == 0:
        return np.zeros(0)
    np.fill_diagonal(W, 0.0)
    totals = W.sum(axis=1, keepdims=True)
    P = np.where(totals > 0, W / np.where(totals > 0, totals, 1.0), 1.0 / n)
    teleport = np.full(n, 1.0 / n) if personalization is None else np.asarray(personalization, float) / np.sum(personalization)
    if n <= _EXACT_MAX_NODES:
        return np.linalg.solve(np.eye(n) - damping * P.T, (1 - damping) * teleport)
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        nxt = damping * (x @ P) + (1 - damping) * teleport
        if np.abs(nxt - x).sum() < tol:
            return nxt
        x = nxt
    return x

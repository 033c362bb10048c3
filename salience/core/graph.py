"""Graphs shared by every domain: the one PageRank (LexRank, TextRank, PositionRank, TopicRank,
JointRank's PageRank aggregation) and the one union-find (JointRank's block design, near-duplicate
groups)."""

from __future__ import annotations

import numpy as np

__all__ = ["pagerank_scores", "ProductGraph", "DisjointSets"]

# Up to this many nodes the stationary vector is solved exactly; beyond, power iteration.
_EXACT_MAX_NODES = 1000


def pagerank_scores(weights: np.ndarray, damping: float = 0.85, personalization: np.ndarray | None = None,
                    tol: float = 1e-10, max_iter: int = 1000) -> np.ndarray:
    """Stationary distribution of the walk that follows out-edges in proportion to
    ``weights[i, j]`` (edge i -> j) with probability ``damping`` and otherwise jumps to a node
    drawn from ``personalization`` (uniform by default). Self-loops are ignored; a node without
    out-edges jumps uniformly.

    ``weights`` may be a scipy sparse matrix: beyond the exact size the walk then iterates on
    it without ever making an n x n dense array. It may be a :class:`ProductGraph`: the walk
    then never forms the weights at all, in memory linear in the factors.

    >>> np.round(pagerank_scores(np.array([[0, 1.0], [1.0, 0]])), 6).tolist()
    [0.5, 0.5]
    """
    from scipy import sparse

    if isinstance(weights, ProductGraph):
        if weights.shape[0] > _EXACT_MAX_NODES:
            return _product_pagerank(weights, damping, personalization, tol, max_iter)
        weights = weights.toarray()
    if sparse.issparse(weights):
        if weights.shape[0] <= _EXACT_MAX_NODES:
            weights = weights.toarray()
        else:
            return _sparse_pagerank(weights, damping, personalization, tol, max_iter)
    W = np.array(weights, dtype=np.float64)
    n = len(W)
    if n == 0:
        return np.zeros(0)
    np.fill_diagonal(W, 0.0)
    totals = W.sum(axis=1, keepdims=True)
    if totals.all():  # no dangling node (the usual case): the same division without two selects
        P = W / totals
    else:
        P = np.where(totals > 0, W / np.where(totals > 0, totals, 1.0), 1.0 / n)
    teleport = np.full(n, 1.0 / n) if personalization is None else np.asarray(personalization, float) / np.sum(personalization)
    if n <= _EXACT_MAX_NODES:
        system = P.T * -damping
        system.flat[:: n + 1] += 1.0  # I - damping P^T without forming I
        return _solve(system, (1 - damping) * teleport)
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        nxt = damping * (x @ P) + (1 - damping) * teleport
        if np.abs(nxt - x).sum() < tol:
            return nxt
        x = nxt
    return x


def _solve(system: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``np.linalg.solve`` (overwriting its arguments) through LAPACK's ``gesv`` directly: the same LU solve without numpy's
    wrapper, which costs as much as the solve itself on a summary's few dozen sentences."""
    from scipy.linalg import lapack

    _, _, solution, info = lapack.dgesv(system, rhs, overwrite_a=True, overwrite_b=True)
    if info != 0:  # singular: never for 0 < damping < 1 and a stochastic P; numpy names the failure
        return np.linalg.solve(system, rhs)
    return solution


def _sparse_pagerank(W, damping: float, personalization, tol: float, max_iter: int) -> np.ndarray:
    """Power iteration on a sparse graph with one copy of it: self-loops dropped and rows
    normalised in place on that copy, the transpose a view."""
    from scipy import sparse

    n = W.shape[0]
    P = sparse.csr_matrix(W, dtype=np.float64, copy=True)
    P.setdiag(0.0)
    P.eliminate_zeros()
    totals = np.asarray(P.sum(axis=1)).ravel()
    dangling = totals <= 0
    P.data /= np.repeat(np.where(dangling, 1.0, totals), np.diff(P.indptr))
    PT = P.T  # CSC view of the transpose: no copy
    teleport = np.full(n, 1.0 / n) if personalization is None else np.asarray(personalization, float) / np.sum(personalization)
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        nxt = damping * (PT @ x + x[dangling].sum() / n) + (1 - damping) * teleport
        if np.abs(nxt - x).sum() < tol:
            return nxt
        x = nxt
    return x


class ProductGraph:
    """Edge weights ``W = A_1 @ B_1.T + A_2 @ B_2.T + ...`` kept as their sparse factors (each
    n x m): a similarity graph of n sentences over m terms has up to n^2 edges but only as
    many factor entries as the text has words, so a walk on it needs memory linear in the text.

    >>> import numpy as np
    >>> ProductGraph((np.eye(2), np.array([[0, 1.0], [1.0, 0]]))).toarray().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """

    def __init__(self, *factors):
        from scipy import sparse

        if not factors:
            raise ValueError("ProductGraph needs at least one (A, B) pair of factors.")
        self.factors = [(sparse.csr_matrix(a, dtype=np.float64), sparse.csr_matrix(b, dtype=np.float64))
                        for a, b in factors]
        n = self.factors[0][0].shape[0]
        if any(a.shape[0] != n or b.shape[0] != n or a.shape[1] != b.shape[1] for a, b in self.factors):
            raise ValueError("every factor of a ProductGraph has one row per node, and A and B of a pair as many columns.")
        self.shape = (n, n)

    def dot(self, x: np.ndarray) -> np.ndarray:
        """``W @ x``."""
        return sum(a @ (b.T @ x) for a, b in self.factors)

    def tdot(self, x: np.ndarray) -> np.ndarray:
        """``W.T @ x``."""
        return sum(b @ (a.T @ x) for a, b in self.factors)

    def diagonal(self) -> np.ndarray:
        return sum(np.asarray(a.multiply(b).sum(axis=1)).ravel() for a, b in self.factors)

    def toarray(self) -> np.ndarray:
        return sum((a @ b.T).toarray() for a, b in self.factors)


def _product_pagerank(graph: ProductGraph, damping: float, personalization, tol: float, max_iter: int) -> np.ndarray:
    """Power iteration on a :class:`ProductGraph` (self-loops dropped), as ``_sparse_pagerank``."""
    n = graph.shape[0]
    diagonal = graph.diagonal()
    totals = graph.dot(np.ones(n)) - diagonal
    # a node whose only edge is its self-loop keeps a rounding residue of its total: no out-edges
    dangling = totals <= 1e-12 * np.maximum(np.abs(diagonal), 1.0)
    inverse = np.where(dangling, 0.0, 1.0 / np.where(dangling, 1.0, totals))
    teleport = np.full(n, 1.0 / n) if personalization is None else np.asarray(personalization, float) / np.sum(personalization)
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        y = x * inverse
        nxt = damping * (graph.tdot(y) - diagonal * y + x[dangling].sum() / n) + (1 - damping) * teleport
        if np.abs(nxt - x).sum() < tol:
            return nxt
        x = nxt
    return x


class DisjointSets:
    """Union-find over ``0..n-1`` with path halving.

    >>> sets = DisjointSets(4)
    >>> sets.union(3, 1); sets.union(1, 0)
    >>> [sets.find(i) for i in range(4)]
    [0, 0, 2, 0]
    """

    __slots__ = ("parent",)

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, child: int, parent: int) -> None:
        """Attach the set of ``child`` under the root of ``parent``'s set."""
        a, b = self.find(child), self.find(parent)
        if a != b:
            self.parent[a] = b

    def roots(self) -> list[int]:
        """The root of every element, in element order."""
        return [self.find(i) for i in range(len(self.parent))]

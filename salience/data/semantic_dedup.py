"""Semantic deduplication (SemDeDup; Abbas et al., 2023): documents whose embeddings are nearly
parallel say the same thing, whatever their words.

The embeddings (any encoder of :mod:`salience.models.encoders`: a static encoder folder, the
bundled MiniLM, a callable) are clustered by spherical k-means (:mod:`salience.core.cluster`);
within each cluster the members are put in keep order and a member whose cosine similarity to
any member before it reaches ``similarity`` is a duplicate. The keep order (``keep_order``) is SemDeDup's:
``hard`` (default) keeps the member farthest from its cluster's centroid first (the least
prototypical), ``easy`` the nearest, ``first`` the earliest document. Pairs that fall into
different clusters are not compared: more clusters are faster and miss more of the pairs that
comparing all pairs finds.

The vectors are centred first (``center``, default on: the mean vector of the documents being
deduplicated is subtracted before the cosine): a static encoder's vectors share a large common
direction (two unrelated documents of the DSIR pool are at cosine 0.50 on average), so that at
0.95 two quarterly earnings notices counted as duplicates. Chosen on the pool's first 1,500
documents against MiniLM's own vectors: at 0.95 centred static vectors flag 15 documents, 13 of
them among MiniLM's 17; uncentred, 103 (16 of them MiniLM's).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from salience.core.cluster import spherical_kmeans, unit_rows
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["KEEP_ORDERS", "semantic_duplicate_groups", "check_similarity"]

KEEP_ORDERS = ("hard", "easy", "first")


def check_similarity(similarity: object) -> float:
    if isinstance(similarity, bool) or not isinstance(similarity, (int, float)) or not 0 < similarity <= 1:
        raise InvalidParameterError(f"similarity={similarity!r} must be a cosine similarity in (0, 1]: the least "
                                    "similarity at which two documents count as duplicates (SemDeDup's 1 - epsilon).")
    return float(similarity)


def semantic_duplicate_groups(vectors: Any, *, similarity: float = 0.95, clusters: int | None = None,
                              keep_order: str = "hard", center: bool = True, seed: Any = 0,
                              block: int = 2048) -> np.ndarray:
    """For each row of ``vectors``, the row kept in its place: itself when kept, else the
    earlier row (in keep order) it duplicates, followed to a kept one. ``clusters``: k-means
    clusters searched separately (default about the square root of the rows); ``center``:
    subtract the rows' mean first.

    >>> groups = semantic_duplicate_groups([[1, 0], [0.999, 0.04], [0, 1]], similarity=0.99, clusters=1,
    ...                                    keep_order="first", center=False)
    >>> groups.tolist()
    [0, 0, 2]
    """
    similarity = check_similarity(similarity)
    if keep_order not in KEEP_ORDERS:
        raise InvalidParameterError(f"keep_order={keep_order!r} is not one of {', '.join(KEEP_ORDERS)}.")
    X = np.asarray(vectors, dtype=np.float32 if np.asarray(vectors).dtype == np.float32 else np.float64)
    if X.ndim != 2:
        raise ShapeError(f"vectors must be two-dimensional (documents x dimensions); got shape {X.shape}.")
    n = len(X)
    groups = np.arange(n)
    if n < 2:
        return groups
    if not np.isfinite(X).all():
        raise InvalidParameterError("vectors hold NaN or infinite values.")
    if center:
        X = X - X.mean(axis=0)
    X = unit_rows(X)
    k = clusters if clusters is not None else max(1, round(math.sqrt(n)))
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise InvalidParameterError(f"clusters={clusters!r} must lie between 1 and the {n} documents.")
    centroids, labels = spherical_kmeans(X, int(k), seed=seed)
    by_cluster = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[by_cluster], np.arange(len(centroids) + 1))
    for c in range(len(centroids)):
        members = by_cluster[bounds[c] : bounds[c + 1]]
        if len(members) < 2:
            continue
        if keep_order != "first":
            closeness = X[members] @ centroids[c].astype(X.dtype)
            members = members[np.argsort(closeness if keep_order == "hard" else -closeness, kind="stable")]
        _mark_within(X[members], members, similarity, groups, block)
    while True:  # a duplicate of a duplicate: follow to the kept row
        followed = groups[groups]
        if np.array_equal(followed, groups):
            return groups
        groups = followed


def _mark_within(V: np.ndarray, members: np.ndarray, similarity: float, groups: np.ndarray, block: int) -> None:
    """groups[members[j]] = members[i] for the i < j most similar to j, where that similarity
    reaches ``similarity`` (columns in blocks: memory is rows x block)."""
    m = len(members)
    rows = np.arange(m)[:, None]
    for start in range(1, m, block):
        columns = np.arange(start, min(m, start + block))
        S = V[: columns[-1]] @ V[columns].T  # only rows before the last column can precede
        S[rows[: columns[-1]] >= columns[None, :]] = -np.inf  # i must come before j
        best = S.argmax(axis=0)
        duplicate = S[best, np.arange(len(columns))] >= similarity - 1e-6  # parallel rows in float32: 0.99999994
        groups[members[columns[duplicate]]] = members[best[duplicate]]

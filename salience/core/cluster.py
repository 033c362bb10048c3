"""Clustering of unit vectors: spherical k-means (Lloyd's iterations on cosine similarity,
k-means++ seeding), the coarse partition that semantic deduplication searches within."""

from __future__ import annotations

from typing import Any

import numpy as np

from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["spherical_kmeans", "unit_rows"]


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def _nearest(vectors: np.ndarray, centroids: np.ndarray, block: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Each row's most similar centroid and that similarity, in blocks of rows (memory)."""
    labels = np.empty(len(vectors), dtype=np.int64)
    best = np.empty(len(vectors))
    for start in range(0, len(vectors), block):
        similarity = vectors[start : start + block] @ centroids.T
        labels[start : start + block] = similarity.argmax(axis=1)
        best[start : start + block] = similarity[np.arange(len(similarity)), labels[start : start + block]]
    return labels, best


def spherical_kmeans(vectors: Any, k: int, *, iterations: int = 20, seed: Any = 0,
                     sample: int | None = 100_000) -> tuple[np.ndarray, np.ndarray]:
    """``(centroids, labels)`` of ``k`` clusters of the rows of ``vectors`` (scaled to unit
    length), by cosine similarity: k-means++ seeding (on at most ``sample`` rows), then at most
    ``iterations`` rounds of assigning each row to its most similar centroid and re-centring
    (an emptied cluster takes the row least similar to its centroid).

    >>> centroids, labels = spherical_kmeans([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], 2)
    >>> bool(labels[0] == labels[1] != labels[2] == labels[3])
    True
    """
    X = np.asarray(vectors, dtype=np.float64)
    if X.ndim != 2:
        raise ShapeError(f"vectors must be two-dimensional (rows x dimensions); got shape {X.shape}.")
    if not np.isfinite(X).all():
        raise InvalidParameterError("vectors hold NaN or infinite values.")
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= max(len(X), 1):
        raise InvalidParameterError(f"k={k!r} clusters must lie between 1 and the {len(X)} rows.")
    X = unit_rows(X)
    rng = np.random.default_rng(seed)
    pool = X if sample is None or len(X) <= sample else X[rng.choice(len(X), sample, replace=False)]
    centroids = _plus_plus(pool, int(k), rng)
    labels = np.full(len(X), -1)
    for _ in range(iterations):
        new_labels, similarity = _nearest(X, centroids)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, X)
        counts = np.bincount(labels, minlength=len(centroids))
        for empty in np.flatnonzero(counts == 0):  # re-seed with the worst-served row
            worst = int(similarity.argmin())
            sums[empty], similarity[worst] = X[worst], np.inf
        centroids = unit_rows(sums)
    return centroids, labels


def _plus_plus(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds: each next centre drawn with probability proportional to the squared
    distance (2 - 2 cos on unit rows) to the nearest centre chosen so far."""
    chosen = [int(rng.integers(len(X)))]
    distance = np.maximum(2.0 - 2.0 * (X @ X[chosen[0]]), 0.0)
    for _ in range(1, k):
        total = distance.sum()
        pick = int(rng.choice(len(X), p=distance / total)) if total > 0 else int(rng.integers(len(X)))
        chosen.append(pick)
        distance = np.minimum(distance, np.maximum(2.0 - 2.0 * (X @ X[pick]), 0.0))
    return X[chosen].copy()

"""The graph and phrase statistics behind TextRank and its relatives, TopicRank and
MultipartiteRank, over one analysed text (RAKE's, over a batch: :mod:`salience.keywords.rake`)."""

from __future__ import annotations

import math

import numpy as np

from salience.core.graph import pagerank_scores
from salience.keywords.candidates import Candidate, Document

__all__ = ["word_graph_scores", "topics", "distance_weights", "topic_scores", "TOPIC_MAX_CANDIDATES",
           "TOPIC_MAX_OCCURRENCES"]

# Topic methods build dense candidate x candidate and occurrence x occurrence matrices: in long
# texts they work on the most frequent candidates (ties by first occurrence) only.
TOPIC_MAX_CANDIDATES = 300
TOPIC_MAX_OCCURRENCES = 4000


def word_graph_scores(doc: Document, window: int, position_bias: bool) -> dict[str, float]:
    """PageRank over content-word stems linked when within ``window`` content words."""
    idx = np.flatnonzero(doc.content)
    if len(idx) == 0:
        return {}
    stems = [doc.stems[i] for i in idx]
    vocab = {s: i for i, s in enumerate(dict.fromkeys(stems))}
    ids = np.array([vocab[s] for s in stems])
    n = len(vocab)
    W = np.zeros((n, n))
    for offset in range(1, window):
        a, b = ids[:-offset], ids[offset:]
        if len(a) == 0:
            break
        np.add.at(W, (a, b), 1.0)
    W = W + W.T
    np.fill_diagonal(W, 0.0)
    personalization = None
    if position_bias:
        personalization = np.zeros(n)
        np.add.at(personalization, ids, 1.0 / (idx + 1.0))
    scores = pagerank_scores(W, 0.85, personalization)
    return {s: float(scores[i]) for s, i in vocab.items()}


def topics(cands: list[Candidate], threshold: float = 0.74) -> np.ndarray:
    """Average-linkage clustering of candidates by the Jaccard distance of their stem sets, cut
    at ``threshold`` (Bougouin et al., 2013); returns a topic number per candidate."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    n = len(cands)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    stems = {s: i for i, s in enumerate(dict.fromkeys(s for c in cands for s in c.key))}
    B = np.zeros((n, len(stems)))
    for i, c in enumerate(cands):
        B[i, [stems[s] for s in c.key]] = 1.0
    inter = B @ B.T
    sizes = B.sum(axis=1)
    distance = 1.0 - inter / (sizes[:, None] + sizes[None, :] - inter)
    np.fill_diagonal(distance, 0.0)
    labels = fcluster(linkage(squareform(distance, checks=False), method="average"), t=threshold, criterion="distance")
    return labels - 1


def distance_weights(cands: list[Candidate]) -> np.ndarray:
    """W[i, j] = sum over occurrence pairs of 1 / |position difference| (A^T D A, one-hot A)."""
    positions = np.concatenate([np.asarray(c.positions, dtype=float) for c in cands])
    counts = np.array([len(c.positions) for c in cands])
    D = np.subtract.outer(positions, positions)
    np.abs(D, out=D)
    np.maximum(D, 1.0, out=D)
    np.reciprocal(D, out=D)  # in place: the matrix is occurrences^2, up to 128 MB
    # A is one-hot and the occurrences lie grouped by candidate: A^T D A is D summed over blocks
    # (O(occurrences^2) additions, where the product costs occurrences^2 x candidates)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    W = np.add.reduceat(np.add.reduceat(D, starts, axis=1), starts, axis=0)
    np.fill_diagonal(W, 0.0)
    return W


def topic_scores(cands: list[Candidate], method: str) -> list[float]:
    values = np.full(len(cands), 0.0)
    keep = sorted(range(len(cands)), key=lambda i: (-cands[i].frequency, cands[i].first))[:TOPIC_MAX_CANDIDATES]
    while len(keep) > 2 and sum(cands[i].frequency for i in keep) > TOPIC_MAX_OCCURRENCES:
        keep = keep[: int(len(keep) * 0.8)]
    keep.sort()
    sub = [cands[i] for i in keep]
    t = topics(sub)
    W = distance_weights(sub)
    n_topics = int(t.max()) + 1
    if method == "topicrank":
        one_hot = np.zeros((len(sub), n_topics))
        one_hot[np.arange(len(sub)), t] = 1.0
        T = one_hot.T @ W @ one_hot
        np.fill_diagonal(T, 0.0)
        topic_scores = pagerank_scores(T)
        for a in range(n_topics):
            members = np.flatnonzero(t == a)
            first = min(members, key=lambda m: sub[m].first)
            values[keep[first]] = topic_scores[a]  # the first-occurring candidate represents its topic
        return values.tolist()
    W = np.where(t[:, None] == t[None, :], 0.0, W)  # multipartite: no edges inside a topic
    # boost each topic's first candidate by its siblings' incoming weights (alpha = 1.1)
    boosted = W.copy()
    for a in range(n_topics):
        members = np.flatnonzero(t == a)
        first = min(members, key=lambda m: sub[m].first)
        siblings = members[members != first]
        if len(siblings):
            boosted[:, first] += 1.1 * math.exp(1.0 / (1 + sub[first].first)) * W[:, siblings].sum(axis=1)
    values[keep] = pagerank_scores(boosted)
    return values.tolist()

"""Per-block upper bounds of BM25 contributions, for exact top-k search with dynamic pruning
(:mod:`salience.search.pruning`).

Each term's postings are cut into blocks of :data:`BLOCK_SIZE` (the last one shorter). A block
keeps its last document number, so a search can step over it without decoding it, and a bound
on what any of its postings can add to a document's score.

The bound must stay valid when the scoring changes: deletions, a shard's collection-wide
statistics, another ``k1`` or ``b``. So a saved index stores no scores. Each block stores the
Pareto frontier of its postings' (term frequency, document length) pairs instead, as Lucene's
competitive impacts do. Every BM25 variant's contribution grows with the term frequency and
does not grow with the document length (``b`` >= 0, idf >= 0, weights > 0). The best frontier
point, scored at search time with that search's statistics, therefore bounds the whole block.
A frontier holds a few points per block, usually fewer than five.

An index held in memory precomputes its postings' scores already; its bounds are each
block's largest score (:func:`score_maxima`), recomputed when the scores change.

Files of a packed segment (format 4; an older segment has none and is searched exhaustively):

* ``postings_block_last.npy``: int64, the last document number of every block, term by term;
* ``postings_block_frontier_end.npy``: int64, where each block's frontier ends in the two
  arrays below (it starts where the previous block's ends);
* ``postings_block_frontier_tf.npy`` and ``postings_block_frontier_len.npy``: float32, the
  frontier points, by term frequency descending.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["BLOCK_SIZE", "BlockBounds", "block_bound_files", "block_frontiers", "block_starts", "score_maxima"]

#: postings per block (Lucene and PISA use 128 too: a block decodes in a few hundred nanoseconds)
BLOCK_SIZE = 128


def block_bound_files() -> list[str]:
    """The block-bound files of a packed segment."""
    return ["postings_block_last.npy", "postings_block_frontier_end.npy", "postings_block_frontier_tf.npy",
            "postings_block_frontier_len.npy"]


def block_starts(counts: np.ndarray) -> np.ndarray:
    """Where each term's blocks start in the block arrays (``n_terms + 1`` entries)."""
    blocks = (np.asarray(counts, dtype=np.int64) + BLOCK_SIZE - 1) // BLOCK_SIZE
    out = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(blocks, out=out[1:])
    return out


def _block_of_posting(counts: np.ndarray) -> np.ndarray:
    """Each posting's block number, counted from the first term's first block."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = block_starts(counts)
    first = np.cumsum(counts) - counts
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts)
    return np.repeat(starts[:-1], counts) + within // BLOCK_SIZE


def block_frontiers(counts: np.ndarray, docs: np.ndarray, tf: np.ndarray, doc_len: np.ndarray):
    """The block arrays of consecutive terms' postings (``counts[i]`` postings of term i,
    documents increasing within a term): ``(last document per block, frontier points per block,
    frontier term frequencies, frontier document lengths)``."""
    counts = np.asarray(counts, dtype=np.int64)
    docs = np.asarray(docs, dtype=np.int64)
    n_blocks = int(block_starts(counts)[-1])
    if not len(docs):
        return np.zeros(n_blocks, dtype=np.int64), np.zeros(n_blocks, dtype=np.int64), \
            np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.float32)
    block = _block_of_posting(counts)
    tf = np.asarray(tf, dtype=np.float32)
    lengths = np.asarray(doc_len, dtype=np.float32)[docs]
    ends = np.flatnonzero(np.diff(block, append=n_blocks)) if n_blocks else np.zeros(0, dtype=np.int64)
    last = docs[ends]
    # a block's frontier: by term frequency descending (then length ascending), a point is kept
    # when it is shorter than every point before it in its block
    order = np.lexsort((lengths, -tf, block))
    length_rank = np.unique(lengths, return_inverse=True)[1].astype(np.int64)
    span = int(length_rank.max()) + 1
    # minus block * span: each block's keys lie below every earlier block's, so one running
    # minimum over the whole array restarts at each block
    key = length_rank[order] - block[order] * span
    earlier = np.minimum.accumulate(key)
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = key[1:] < earlier[:-1]
    kept = order[keep]
    per_block = np.bincount(block[kept], minlength=n_blocks)
    return last, per_block, tf[kept], lengths[kept]


class BlockBounds(NamedTuple):
    """A packed segment's block arrays as read (memory-mapped), with each term's first block."""
    starts: np.ndarray  # n_terms + 1
    last: np.ndarray
    frontier_end: np.ndarray
    frontier_tf: np.ndarray
    frontier_len: np.ndarray

    @classmethod
    def read(cls, arrays: dict[str, np.ndarray], counts: np.ndarray, n_docs: int, verify: bool) -> "BlockBounds":
        """The bounds of a segment whose terms hold ``counts`` postings; ``ValueError`` names
        the file that does not fit them (``verify``: every value checked, else the sizes)."""
        names = block_bound_files()
        last, end, tf, length = (np.asarray(arrays[name]) for name in names)
        starts = block_starts(counts)
        if last.ndim != 1 or len(last) != starts[-1]:
            raise ValueError(f"{names[0]} holds {last.shape} block ends for the postings' {starts[-1]} blocks")
        if end.ndim != 1 or len(end) != starts[-1] or (len(end) and end[-1] != len(tf)):
            raise ValueError(f"{names[1]} does not fit the postings' {starts[-1]} blocks and {len(tf)} points")
        if len(length) != len(tf):
            raise ValueError(f"{names[3]} holds {len(length)} lengths for {len(tf)} frontier points")
        if verify and len(last):
            if last.min() < 0 or last.max() >= n_docs:
                raise ValueError(f"{names[0]}: document numbers beyond the segment's {n_docs}")
            if np.any(np.diff(end, prepend=0) < 1):
                raise ValueError(f"{names[1]}: a block without a frontier point")
            if not (np.all(np.isfinite(tf)) and np.all(np.isfinite(length))):
                raise ValueError(f"{names[2]}: a frontier point that is not a finite number")
        return cls(starts, last, end, tf, length)


def score_maxima(indptr: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first block per term, last document per block, largest score per block)`` of a
    terms x documents CSR matrix of per-posting scores (an index held in memory)."""
    counts = np.diff(np.asarray(indptr, dtype=np.int64))
    starts = block_starts(counts)
    n_blocks = int(starts[-1])
    if not n_blocks:
        return starts, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    block = _block_of_posting(counts)
    firsts = np.flatnonzero(np.diff(block, prepend=-1))
    maxima = np.maximum.reduceat(np.asarray(scores, dtype=np.float32), firsts)
    last = np.asarray(indices, dtype=np.int64)[np.append(firsts[1:], len(block)) - 1]
    return starts, last, maxima

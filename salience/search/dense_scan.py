"""Exact top-k search over blocks of unit vectors (the dense index's exact search): blocked
float32 matrix products of the queries against the documents, each block's scores offered to
one bounded heap per query by the compiled kernel, or partially sorted by numpy without numba.
Both give the same documents, order and scores; ties go to the earlier document."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.search.topk import rank_rows

__all__ = ["exact_top_k"]

#: documents per matrix product on the compiled path: 256 queries' scores of this many (8 MB)
#: stay in the cache while the top-k scan reads them (65,536 would send them to memory and back;
#: 2,048 is 4-11% slower at 10^5 documents, the products' threads meeting more often)
_SCAN_TILE = 8192
#: ... and in a collection of fewer than four such tiles, the tile (2 MB for 256 queries) that
#: splits it into enough for two threads to share (as fast there: 2,048 to 8,192 search the
#: shared sets at the same speed)
_SMALL_TILE = 2048


def _row_top_k_kernel():
    """The compiled top-k kernel for score blocks, or None without numba."""
    try:
        from salience.search._numba_kernels import top_k_rows
    except ImportError:
        return None
    return top_k_rows


def exact_top_k(blocks: Sequence, vectors: np.ndarray, k: int, allowed: np.ndarray, block_size: int,
                ordered: bool = True, share=None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``(positions, scores, counts)``: row ``q`` holds query ``q``'s best ``counts[q]`` allowed
    documents (positions across ``blocks``, in order) and their cosine scores (float64), best
    first (``ordered``; otherwise in any order); ``block_size`` documents at most per matrix
    product. ``share``: a :meth:`salience.parallel.threads.SharedChunks.share`, which runs the
    compiled top k of each product's rows in chunks on two threads (the products, and so the
    scores, are the same)."""
    offer = _row_top_k_kernel()
    if offer is not None:
        return _compiled_top_k(blocks, vectors, k, allowed, block_size, offer, ordered=ordered, share=share)
    return _partitioned_top_k(blocks, vectors, k, allowed, block_size)


def _compiled_top_k(blocks, vectors, k, allowed, block_size, offer, ordered=True, share=None):
    """Each block's scores offered to one bounded heap per query as the matrix product leaves
    them, instead of a partition of the whole block (which costs more than the product itself
    at 10^5 documents). With ``share``, two tiles at a time: their products on two threads,
    then their top k by chunks of rows (a tile's product is the same whichever thread computes
    it, and a row's heap is the same whatever order its documents are offered in)."""
    n_rows = len(vectors)
    # the heaps are the rows returned (each in heap order; zeros past its size, as rows are)
    heap_val = np.zeros((n_rows, k), dtype=np.float64)
    heap_idx = np.zeros((n_rows, k), dtype=np.int64)
    sizes = np.zeros(n_rows, dtype=np.int64)
    total = sum(len(block) for block in blocks)
    # the tiles depend on the collection alone, so a hybrid's shared products are the same
    tile = min(block_size, _SCAN_TILE if total >= 4 * _SCAN_TILE else _SMALL_TILE)
    tiles, offset = [], 0
    for block in blocks:
        tiles += [(block, lo, offset + lo) for lo in range(0, len(block), tile)]
        offset += len(block)
    step = 1 if share is None else 2
    for group in (tiles[g : g + step] for g in range(0, len(tiles), step)):
        products: list = [None] * len(group)

        def multiply(lo, hi, group=group, products=products):
            for t in range(lo, hi):
                block, start, _ = group[t]
                products[t] = vectors @ np.asarray(block[start : start + tile]).T

        def take_top(lo, hi, group=group, products=products):
            for (_, _, first), scores in zip(group, products):
                offer(scores[lo:hi], allowed, first, k, heap_val[lo:hi], heap_idx[lo:hi], sizes[lo:hi])

        if share is None:
            multiply(0, len(group))
            take_top(0, n_rows)
        else:
            share(len(group), multiply, chunk=1)
            share(n_rows, take_top)
    if ordered:
        heap_idx, heap_val, sizes = rank_rows(heap_idx, heap_val, sizes)
    return heap_idx, heap_val, sizes.tolist()


def _partitioned_top_k(blocks, vectors, k, allowed, block_size):
    """A running top k kept by numpy's partial sorts, block by block."""
    best_scores = np.full((len(vectors), 0), -np.inf, dtype=np.float32)
    best_index = np.zeros((len(vectors), 0), dtype=np.int64)
    offset = 0
    for block in blocks:
        for lo in range(0, len(block), block_size):
            part = np.asarray(block[lo : lo + block_size])
            scores = vectors @ part.T
            keep = allowed[offset + lo : offset + lo + len(part)]
            if not keep.all():
                scores[:, ~keep] = -np.inf
            take = min(k, scores.shape[1])
            top = np.argpartition(-scores, take - 1, axis=1)[:, :take] if take < scores.shape[1] else \
                np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
            best_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
            best_index = np.concatenate([best_index, top + offset + lo], axis=1)
            if best_scores.shape[1] > k:  # keep the running top k
                order = np.argpartition(-best_scores, k - 1, axis=1)[:, :k]
                best_scores = np.take_along_axis(best_scores, order, axis=1)
                best_index = np.take_along_axis(best_index, order, axis=1)
        offset += len(block)
    out_idx, out_val = np.zeros((len(vectors), k), dtype=np.int64), np.zeros((len(vectors), k), dtype=np.float64)
    counts = []
    for row, (scores, index) in enumerate(zip(best_scores, best_index)):
        finite = np.isfinite(scores)
        scores, index = scores[finite], index[finite]
        order = np.lexsort((index, -scores))  # best first, ties by index order
        out_idx[row, : len(order)], out_val[row, : len(order)] = index[order], scores[order]
        counts.append(len(order))
    return out_idx, out_val, counts

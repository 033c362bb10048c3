"""The compiled kernel of exact top-k search with block-max WAND (Ding and Suel, 2011; Broder
et al.'s WAND with the per-block bounds of a block-max index), document at a time.

Each query term has a cursor on its postings. At every step the cursors are ordered by their
current document; walking them in that order, the *pivot* is the first term at which the
terms' largest possible contributions add up to more than the k-th best score so far: no
document before the pivot's, d, can enter the top k. The cursors before the pivot are moved
up to d without decoding anything (a cursor moved into a block not yet decoded only knows a
lower bound of its document). When the bounds of the blocks holding d cannot beat the k-th
score, every document up to the end of the first of those blocks (or up to the next term's
document) is stepped over at once; otherwise d is bounded by the contributions known and the
other blocks' bounds, and the blocks are decoded one at a time only while d can still enter.

Against block-max MaxScore (:mod:`salience.search._pruning_numba_kernels`) it keeps no
accumulator and no window: its work is per candidate document and per cursor move, so it
suits queries of few terms whose long lists hold few documents able to enter; MaxScore's
windows suit queries of many terms. The top k are exactly the exhaustive kernel's, by the
same arguments as MaxScore's: every contribution by the one formula, a document's score added
in the query's order, ties to the earlier document, a document dropped only when a widened
bound is at most the k-th score.

The cursor moves (and the cursors' insertion sort) are written out in the loop rather than
called: numba counts references to every array an inlined helper takes, twice per call, and
those atomic counts cost more than the move itself.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from salience.search._numba_kernels import _offer, _write_row
from salience.search._pruning_numba_kernels import (_END, _block_values, _cannot_enter, _decode_docs, query_shape,
                                                   query_term_rows)
from salience.search.block_bounds import BLOCK_SIZE


@njit(cache=True, nogil=True)
def top_k_bmw(packed, counts, gap_width, gap_offset, gaps1, gaps2, gaps4, tf_width, tf_offset, tf1, tf2, tf4,
              csr_indptr, csr_indices, csr_scores, first_blocks, block_last, frontier_end, frontier_tf,
              frontier_len, block_max, norms, idf, avg_len, code, k1, b, delta, base, cached_at, cached,
              query_indptr, query_terms, k, mask, out_idx, out_val, out_count, work):
    """Each query's best ``k`` documents with a positive score, in heap order, into row ``q`` of
    the outputs: the arguments and rows of
    :func:`~salience.search._pruning_numba_kernels.top_k_pruned`. ``work`` receives the
    postings decoded and the documents scored."""
    longest, most_blocks = query_shape(query_indptr, query_terms, first_blocks)
    buf_docs = np.empty((longest, BLOCK_SIZE), dtype=np.int64)
    buf_val = np.empty((longest, BLOCK_SIZE), dtype=np.float64)  # the decoded blocks' contributions
    buf_norms = np.empty(BLOCK_SIZE, dtype=np.float64)
    bounds = np.empty(most_blocks, dtype=np.float64)
    terms = np.empty(longest, dtype=np.int64)
    first = np.empty(longest, dtype=np.int64)
    n_blocks = np.empty(longest, dtype=np.int64)
    bound_at = np.empty(longest, dtype=np.int64)
    largest = np.empty(longest, dtype=np.float64)  # each term's largest block bound
    block = np.empty(longest, dtype=np.int64)
    decoded = np.empty(longest, dtype=np.int64)
    length = np.zeros(longest, dtype=np.int64)
    pos = np.zeros(longest, dtype=np.int64)
    cur = np.empty(longest, dtype=np.int64)  # each cursor's document, or a lower bound on it
    exact = np.empty(longest, dtype=np.bool_)
    order = np.empty(longest, dtype=np.int64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    for q in range(len(query_indptr) - 1):
        m = query_term_rows(q, query_indptr, query_terms, first_blocks, terms, first, n_blocks, bound_at, largest,
                            bounds, packed, frontier_end, frontier_tf, frontier_len, block_max, idf, avg_len, code, k1,
                            b, delta, base)
        for i in range(m):
            block[i] = 0
            decoded[i] = -1
            pos[i] = 0
            cur[i] = 0 if n_blocks[i] > 0 else _END
            exact[i] = n_blocks[i] == 0
            order[i] = i
        size = 0
        theta = 0.0  # a document must score above this: 0 until k are held, then the k-th
        while True:
            for r in range(1, m):  # the cursors by their document (nearly sorted already)
                i = order[r]
                s = r
                while s > 0 and cur[order[s - 1]] > cur[i]:
                    order[s] = order[s - 1]
                    s -= 1
                order[s] = i
            # the pivot: the first cursor at which the largest contributions so far could enter
            upper = 0.0
            pivot = -1
            for r in range(m):
                i = order[r]
                if cur[i] == _END:
                    break
                upper += largest[i]
                if not _cannot_enter(upper, theta):
                    pivot = r
                    break
            if pivot < 0:
                break
            d = cur[order[pivot]]
            while pivot + 1 < m and cur[order[pivot + 1]] == d:
                pivot += 1
            if cur[order[0]] < d:
                target = d  # no document before d can enter: the cursors before it move up to it
            else:
                # every cursor up to the pivot on d (or a lower bound at d): the bounds of their blocks
                block_sum = 0.0
                for r in range(pivot + 1):
                    i = order[r]
                    block_sum += bounds[bound_at[i] + block[i]]
                if _cannot_enter(block_sum, theta):
                    # nothing before the end of the first of these blocks (or the next term's document) can enter
                    target = _END
                    for r in range(pivot + 1):
                        i = order[r]
                        target = min(target, block_last[first[i] + block[i]] + 1)
                    if pivot + 1 < m:
                        target = min(target, cur[order[pivot + 1]])
                else:
                    # d bounded by the contributions known and the bounds of the blocks not decoded, which
                    # are decoded one at a time only while d can still enter
                    partial = 0.0
                    for r in range(pivot + 1):
                        i = order[r]
                        partial += buf_val[i, pos[i]] if exact[i] else bounds[bound_at[i] + block[i]]
                    moved = False
                    for r in range(pivot, -1, -1):
                        i = order[r]
                        if exact[i] or _cannot_enter(partial, theta) or not mask[d]:
                            continue
                        c = block[i]
                        length[i] = _decode_docs(i, terms[i], c, packed, counts, gap_width, gap_offset, gaps1, gaps2,
                                                 gaps4, csr_indptr, csr_indices, first[i], block_last, buf_docs)
                        _block_values(i, terms[i], c, length[i], packed, tf_width, tf_offset, tf1, tf2, tf4,
                                      csr_indptr, csr_scores, cached_at, cached, norms, idf, code, k1, delta, base,
                                      buf_docs, buf_norms, buf_val)
                        work[0] += length[i]
                        decoded[i] = c
                        p = 0
                        while buf_docs[i, p] < d:  # the block's last document is >= d
                            p += 1
                        pos[i] = p
                        cur[i] = buf_docs[i, p]
                        exact[i] = True
                        partial -= bounds[bound_at[i] + c]
                        if cur[i] == d:
                            partial += buf_val[i, p]
                        else:
                            moved = True
                    enters = mask[d] and not _cannot_enter(partial, theta)
                    if enters and moved:
                        continue  # d can still enter, without a term that went past it: looked at again
                    if enters:
                        work[1] += 1
                        score = 0.0
                        for i in range(m):  # in the query's order, as the exhaustive accumulator adds
                            if cur[i] == d:
                                score += buf_val[i, pos[i]]
                        if score > 0.0:
                            size = _offer(heap_val, heap_idx, size, k, score, d)
                            if size == k:
                                theta = heap_val[0]
                    target = d + 1
            # the cursors up to the pivot to their first posting at or after target: exact when the
            # block they land in is decoded, else only a lower bound (the block is decoded if needed)
            for r in range(pivot + 1):
                i = order[r]
                if cur[i] >= target:
                    continue
                c = block[i]
                end = n_blocks[i]
                base_block = first[i]
                if block_last[base_block + c] < target:
                    c += 1
                    step = 1
                    while c < end and block_last[base_block + c] < target:  # gallop, then halve
                        c += step
                        step *= 2
                    lo = c - step // 2 if step > 1 else c
                    hi = min(c, end)
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if block_last[base_block + mid] < target:
                            lo = mid + 1
                        else:
                            hi = mid
                    c = lo
                    block[i] = c
                if c == end:
                    cur[i] = _END
                    exact[i] = True
                elif decoded[i] == c:
                    p = pos[i]
                    while buf_docs[i, p] < target:
                        p += 1
                    pos[i] = p
                    cur[i] = buf_docs[i, p]
                    exact[i] = True
                else:
                    cur[i] = max(target, block_last[base_block + c - 1] + 1) if c > 0 else target
                    exact[i] = False
        _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count)

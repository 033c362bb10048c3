"""The compiled kernel of exact top-k search with dynamic pruning: block-max MaxScore,
document at a time (Turtle and Flood's MaxScore; the block bounds of Ding and Suel's block-max
indexes; Lucene and PISA run the same scheme).

A query's terms are ordered by their largest possible contribution. The terms whose bounds add
up to no more than the k-th best score so far are *non-essential*: a document that holds only
those cannot enter the top k. Candidates are therefore drawn from the essential terms' postings
alone, and the non-essential terms are looked up only while the document can still enter. Each
block of 128 postings stores its last document and a bound on its scores (see
:mod:`salience.search.block_bounds`). A run of essential blocks whose bounds cannot beat the
k-th score is stepped over without being decoded, and a candidate is dropped as soon as its
score so far plus the bounds of the blocks still to read cannot beat it.

The top k are exactly the exhaustive kernel's (:mod:`salience.search._numba_kernels`). Every
contribution is computed by the same formula. A document's score adds its terms'
contributions in the query's order, as the exhaustive accumulator does, so its bits are the
same. Ties go to the earlier document in both. A document is dropped only when a bound, widened
against rounding, is at most the k-th score; documents arrive in increasing order, so one that
only equals it would lose the tie anyway.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from salience.search._numba_kernels import _offer, _posting_values, _write_row, length_norm, tf_from_norm
from salience.search.block_bounds import BLOCK_SIZE

_END = np.iinfo(np.int64).max  # the cursor of a term whose postings are exhausted
#: a bound computed from a frontier is widened by this share: the formula is monotone, but its
#: float32 rounding could put a dominated point an ulp above the point that bounds it
_WIDEN = 1e-6


@njit(inline="always")
def _cannot_enter(bound, theta):
    # a sum of bounds taken in another order than the score's: widened by far more than rounding
    return bound * (1.0 + 1e-9) <= theta


@njit(inline="always")
def term_bounds(packed, t, first, n_blocks, bounds, at, frontier_end, frontier_tf, frontier_len, block_max, idf,
                avg_len, code, k1, b, delta, base):
    """The bound of each of term ``t``'s ``n_blocks`` blocks (its first ``first`` in the block
    arrays) into ``bounds[at:]``: packed, the best contribution of the block's frontier
    (widened against rounding); in memory, the block's largest saved score. Returns the
    largest of them."""
    largest = 0.0
    for blk in range(n_blocks):
        g = first + blk
        if packed:
            lo = frontier_end[g - 1] if g > 0 else 0
            best = np.float32(0.0)
            for p in range(lo, frontier_end[g]):
                norm = length_norm(np.float64(frontier_len[p]), avg_len, code, b)
                tfc = tf_from_norm(np.float64(frontier_tf[p]), norm, code, k1, delta)
                best = max(best, np.float32(idf[t] * (tfc - base)))
            bounds[at + blk] = np.float64(best) * (1.0 + _WIDEN)
        else:
            bounds[at + blk] = np.float64(block_max[g])
        largest = max(largest, bounds[at + blk])
    return largest


@njit(inline="always")
def query_term_rows(q, query_indptr, query_terms, first_blocks, terms, first, n_blocks, bound_at, largest, bounds,
                    packed, frontier_end, frontier_tf, frontier_len, block_max, idf, avg_len, code, k1, b, delta,
                    base):
    """Query ``q``'s terms into the per-term rows: the term, its first block, its number of
    blocks, where its blocks' bounds start in ``bounds`` (filled) and its largest bound. Returns
    the number of terms. Once a query: the reference counts of its arrays cost nothing here."""
    m = query_indptr[q + 1] - query_indptr[q]
    at = 0
    for i in range(m):
        t = query_terms[query_indptr[q] + i]
        terms[i] = t
        first[i] = first_blocks[t]
        n_blocks[i] = first_blocks[t + 1] - first_blocks[t]
        bound_at[i] = at
        largest[i] = term_bounds(packed, t, first[i], n_blocks[i], bounds, at, frontier_end, frontier_tf,
                                 frontier_len, block_max, idf, avg_len, code, k1, b, delta, base)
        at += n_blocks[i]
    return m


@njit(inline="always")
def query_shape(query_indptr, query_terms, first_blocks):
    """(the most terms of a query, the most blocks a query's terms hold together)."""
    longest, most_blocks = 1, 1
    for q in range(len(query_indptr) - 1):
        longest = max(longest, query_indptr[q + 1] - query_indptr[q])
        total = 0
        for j in range(query_indptr[q], query_indptr[q + 1]):
            t = query_terms[j]
            total += first_blocks[t + 1] - first_blocks[t]
        most_blocks = max(most_blocks, total)
    return longest, most_blocks


@njit(inline="always")
def _decode_docs(i, t, block, packed, counts, gap_width, gap_offset, gaps1, gaps2, gaps4, csr_indptr, csr_indices,
                 first_block, block_last, buf_docs):
    """The documents of block ``block`` of term ``t`` into row ``i`` of ``buf_docs``; its
    length. A prefix sum of gaps: cheap next to scoring, which waits until a posting is needed."""
    start = block * BLOCK_SIZE
    n = min(BLOCK_SIZE, counts[t] - start)
    if packed:
        doc = block_last[first_block + block - 1] if block > 0 else 0
        at = gap_offset[t] + start
        width = gap_width[t]
        for r in range(n):
            if width == 1:
                doc += gaps1[at + r]
            elif width == 2:
                doc += gaps2[at + r]
            else:
                doc += gaps4[at + r]
            buf_docs[i, r] = doc
    else:
        at = csr_indptr[t] + start
        for r in range(n):
            buf_docs[i, r] = csr_indices[at + r]
    return n


@njit(inline="always")
def _scored_block(tfs, at, n, i, weight, norms, code, k1, delta, base, buf_docs, buf_norms, buf_val):
    for r in range(n):
        buf_norms[r] = norms[buf_docs[i, r]]
    _posting_values(tfs, at, n, buf_norms, weight, code, k1, delta, base, buf_val[i])


@njit(inline="always")
def _block_values(i, t, block, n, packed, tf_width, tf_offset, tf1, tf2, tf4, csr_indptr, csr_scores, cached_at,
                  cached, norms, idf, code, k1, delta, base, buf_docs, buf_norms, buf_val):
    """The contributions of the ``n`` postings of block ``block`` of term ``t`` (its documents
    in row ``i`` of ``buf_docs``) into row ``i`` of ``buf_val``: precomputed (in memory, or a
    packed term in the score cache, ``cached_at[t] >= 0``) or computed."""
    start = block * BLOCK_SIZE
    if not packed or (len(cached_at) and cached_at[t] >= 0):
        at = csr_indptr[t] + start if not packed else cached_at[t] + start
        values = csr_scores if not packed else cached
        for r in range(n):
            buf_val[i, r] = np.float64(values[at + r])
        return
    at = tf_offset[t] + start
    width = tf_width[t]
    if width == 1:
        _scored_block(tf1, at, n, i, idf[t], norms, code, k1, delta, base, buf_docs, buf_norms, buf_val)
    elif width == 2:
        _scored_block(tf2, at, n, i, idf[t], norms, code, k1, delta, base, buf_docs, buf_norms, buf_val)
    else:
        _scored_block(tf4, at, n, i, idf[t], norms, code, k1, delta, base, buf_docs, buf_norms, buf_val)


@njit(cache=True, nogil=True)
def top_k_pruned(packed, counts, gap_width, gap_offset, gaps1, gaps2, gaps4, tf_width, tf_offset, tf1, tf2, tf4,
                 csr_indptr, csr_indices, csr_scores, first_blocks, block_last, frontier_end, frontier_tf,
                 frontier_len, block_max, norms, idf, avg_len, code, k1, b, delta, base, cached_at, cached,
                 query_indptr, query_terms, k, mask, out_idx, out_val, out_count, work):
    """Each query's best ``k`` documents with a positive score, in heap order, into row ``q`` of
    the outputs, as :func:`~salience.search._numba_kernels.top_k_packed` (``packed``) or
    :func:`~salience.search._numba_kernels.top_k_queries` writes them. ``work`` receives the
    postings decoded and the documents scored, for the benchmark's account of the pruning."""
    n_queries = len(query_indptr) - 1
    n_docs = len(mask)
    longest, most_blocks = query_shape(query_indptr, query_terms, first_blocks)
    buf_docs = np.empty((longest, BLOCK_SIZE), dtype=np.int64)
    buf_val = np.empty((longest, BLOCK_SIZE), dtype=np.float64)
    buf_norms = np.empty(BLOCK_SIZE, dtype=np.float64)  # the documents' norms of the block being scored
    bounds = np.empty(most_blocks, dtype=np.float64)  # every block's bound, term after term
    terms = np.empty(longest, dtype=np.int64)
    first = np.empty(longest, dtype=np.int64)  # each term's first block in the block arrays
    n_blocks = np.empty(longest, dtype=np.int64)
    bound_at = np.empty(longest, dtype=np.int64)  # each term's first block in ``bounds``
    largest = np.empty(longest, dtype=np.float64)
    block = np.empty(longest, dtype=np.int64)
    decoded = np.empty(longest, dtype=np.int64)  # the block whose documents are in buf_docs
    valued = np.empty(longest, dtype=np.int64)  # the block whose contributions are in buf_val
    length = np.zeros(longest, dtype=np.int64)
    pos = np.zeros(longest, dtype=np.int64)
    window_bound = np.empty(longest, dtype=np.float64)
    order = np.empty(longest, dtype=np.int64)
    upto = np.empty(longest, dtype=np.float64)
    acc = np.zeros(n_docs, dtype=np.float64)
    seen = np.zeros(n_docs, dtype=np.bool_)
    touched = np.empty(longest * BLOCK_SIZE, dtype=np.int64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    for q in range(n_queries):
        m = query_term_rows(q, query_indptr, query_terms, first_blocks, terms, first, n_blocks, bound_at, largest,
                            bounds, packed, frontier_end, frontier_tf, frontier_len, block_max, idf, avg_len, code, k1,
                            b, delta, base)
        for i in range(m):
            block[i] = 0
            decoded[i] = -1
            valued[i] = -1
        size = 0
        theta = 0.0  # a document must score above this: 0 until k are held, then the k-th
        start = 0
        # windows of documents: each ends where the first of the terms' current blocks ends, so
        # within it every term has one block and one bound
        while True:
            end = _END
            for i in range(m):
                while block[i] < n_blocks[i] and block_last[first[i] + block[i]] < start:
                    block[i] += 1
                if block[i] < n_blocks[i]:
                    end = min(end, block_last[first[i] + block[i]] + 1)
                    window_bound[i] = bounds[bound_at[i] + block[i]]
                else:
                    window_bound[i] = 0.0
            if end == _END:
                break
            for i in range(m):  # the terms by their bound in this window, smallest first
                r = i
                while r > 0 and window_bound[order[r - 1]] > window_bound[i]:
                    order[r] = order[r - 1]
                    r -= 1
                order[r] = i
            # order[:essential]: terms whose bounds together cannot beat theta (non-essential)
            essential = 0
            total = 0.0
            for r in range(m):
                total += window_bound[order[r]]
                if not _cannot_enter(total, theta):
                    break
                upto[r] = total
                essential = r + 1
            if essential == m:  # nothing in this window can enter: not even decoded
                start = end
                continue
            # the essential terms' postings in the window, added into the accumulator
            n_touched = 0
            for r in range(essential, m):
                i = order[r]
                if decoded[i] != block[i]:
                    length[i] = _decode_docs(i, terms[i], block[i], packed, counts, gap_width, gap_offset, gaps1,
                                             gaps2, gaps4, csr_indptr, csr_indices, first[i], block_last, buf_docs)
                    work[0] += length[i]
                    decoded[i] = block[i]
                    pos[i] = 0
                if valued[i] != block[i]:  # an essential block adds every posting: all are scored
                    _block_values(i, terms[i], block[i], length[i], packed, tf_width, tf_offset, tf1, tf2, tf4,
                                  csr_indptr, csr_scores, cached_at, cached, norms, idf, code, k1, delta, base,
                                  buf_docs, buf_norms, buf_val)
                    valued[i] = block[i]
                while pos[i] < length[i] and buf_docs[i, pos[i]] < start:
                    pos[i] += 1
                p = pos[i]
                while p < length[i] and buf_docs[i, p] < end:
                    d = buf_docs[i, p]
                    if not seen[d]:
                        seen[d] = True
                        touched[n_touched] = d
                        n_touched += 1
                    acc[d] += buf_val[i, p]
                    p += 1
            touched[:n_touched].sort()  # in place: a window allocates nothing
            outside = upto[essential - 1] if essential > 0 else 0.0
            for c in range(n_touched):
                d = touched[c]
                seen[d] = False
                essential_sum = acc[d]
                acc[d] = 0.0
                if not mask[d] or _cannot_enter(essential_sum + outside, theta):
                    continue
                partial = essential_sum
                enters = True
                for r in range(essential - 1, -1, -1):  # non-essential terms, largest bound first
                    if _cannot_enter(partial + upto[r], theta):
                        enters = False
                        break
                    i = order[r]
                    if block[i] == n_blocks[i]:
                        continue
                    if decoded[i] != block[i]:
                        length[i] = _decode_docs(i, terms[i], block[i], packed, counts, gap_width, gap_offset, gaps1,
                                                 gaps2, gaps4, csr_indptr, csr_indices, first[i], block_last, buf_docs)
                        work[0] += length[i]
                        decoded[i] = block[i]
                        pos[i] = 0
                    while pos[i] < length[i] and buf_docs[i, pos[i]] < d:
                        pos[i] += 1
                    if pos[i] < length[i] and buf_docs[i, pos[i]] == d:
                        if valued[i] != block[i]:  # a block looked up in: its contributions computed whole, once
                            _block_values(i, terms[i], block[i], length[i], packed, tf_width, tf_offset, tf1, tf2, tf4,
                                          csr_indptr, csr_scores, cached_at, cached, norms, idf, code, k1, delta, base,
                                          buf_docs, buf_norms, buf_val)
                            valued[i] = block[i]
                        partial += buf_val[i, pos[i]]
                if not enters:
                    continue
                # the exact score: every term's contribution added in the query's order, as the
                # exhaustive accumulator adds them
                work[1] += 1
                score = 0.0
                for i in range(m):
                    if block[i] == n_blocks[i] or decoded[i] != block[i]:
                        continue
                    while pos[i] < length[i] and buf_docs[i, pos[i]] < d:
                        pos[i] += 1
                    if pos[i] < length[i] and buf_docs[i, pos[i]] == d:
                        if valued[i] != block[i]:
                            _block_values(i, terms[i], block[i], length[i], packed, tf_width, tf_offset, tf1, tf2, tf4,
                                          csr_indptr, csr_scores, cached_at, cached, norms, idf, code, k1, delta, base,
                                          buf_docs, buf_norms, buf_val)
                            valued[i] = block[i]
                        score += buf_val[i, pos[i]]
                if score > 0.0:
                    size = _offer(heap_val, heap_idx, size, k, score, d)
                    if size == k:
                        theta = heap_val[0]
            start = end
        _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count)

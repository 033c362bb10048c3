"""Optional numba kernels for query scoring and top-k (the ``numba`` backend).

It computes exactly what the numpy backend computes, in the same order of additions, so
results are identical; it only avoids the dense (queries x documents) block by touching
the postings of the query terms and keeping a bounded heap of the best ``k``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from salience.search.scoring import tf_formula as _tf_formula

tf_formula = njit(inline="always")(_tf_formula)


@njit(inline="always")
def _worse(val_a, idx_a, val_b, idx_b):
    # ranking rule: higher score first, ties by lower document position
    return val_a < val_b or (val_a == val_b and idx_a > idx_b)


@njit(inline="always")
def _swap(heap_val, heap_idx, i, j):
    heap_val[i], heap_val[j] = heap_val[j], heap_val[i]
    heap_idx[i], heap_idx[j] = heap_idx[j], heap_idx[i]


@njit(inline="always")
def _sift_down(heap_val, heap_idx, size, i):
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and _worse(heap_val[right], heap_idx[right], heap_val[left], heap_idx[left]):
            child = right
        if _worse(heap_val[child], heap_idx[child], heap_val[i], heap_idx[i]):
            _swap(heap_val, heap_idx, i, child)
            i = child
        else:
            return


@njit(inline="always")
def _select(candidates, n_candidates, n_docs, acc, mask, k, heap_val, heap_idx, all_documents):
    """Push candidate documents into the bounded heap; return its size."""
    size = 0
    threshold = 0.0  # score of the worst kept document once the heap is full
    for j in range(n_candidates):
        d = j if all_documents else candidates[j]
        v = acc[d]
        # Once the heap is full almost every document is rejected here; the branch is
        # predictable, which matters when scanning all documents.
        if v < threshold or v <= 0.0:
            continue
        if not mask[d]:
            continue
        if size < k:
            # insert at the end and sift up (min-heap on "worse")
            i = size
            heap_val[i] = v
            heap_idx[i] = d
            size += 1
            while i > 0:
                parent = (i - 1) // 2
                if _worse(heap_val[i], heap_idx[i], heap_val[parent], heap_idx[parent]):
                    _swap(heap_val, heap_idx, i, parent)
                    i = parent
                else:
                    break
            if size == k:
                threshold = heap_val[0]
        elif _worse(heap_val[0], heap_idx[0], v, d):
            heap_val[0] = v
            heap_idx[0] = d
            _sift_down(heap_val, heap_idx, size, 0)
            threshold = heap_val[0]
    return size


@njit(inline="always")
def _add_postings(docs, values, lo, hi, acc, touched, n_touched, dense):
    """Add postings [lo, hi) to the accumulator; return how many documents are touched."""
    if dense:
        for p in range(lo, hi):
            acc[docs[p]] += values[p]
    else:
        for p in range(lo, hi):
            value = values[p]
            if value <= 0.0:
                continue  # a zero-weight posting neither scores nor makes a document match
            d = docs[p]
            if acc[d] == 0.0:  # first touch: every stored value is >= 0, so sums are too
                touched[n_touched] = d
                n_touched += 1
            acc[d] += value
    return n_touched


@njit(inline="always")
def _finish_query(q, acc, touched, n_touched, n_docs, dense, mask, k, heap_val, heap_idx, out_idx, out_val, out_count):
    """Take the query's best ``k`` into row ``q`` of the outputs and clear the accumulator."""
    if dense:
        size = _select(acc, n_docs, n_docs, acc, mask, k, heap_val, heap_idx, True)
        acc[:] = 0.0
    else:
        size = _select(touched, n_touched, n_docs, acc, mask, k, heap_val, heap_idx, False)
        for j in range(n_touched):
            acc[touched[j]] = 0.0
    out_count[q] = size
    # pop the worst first, filling the row from the back
    while size > 0:
        size -= 1
        out_val[q, size] = heap_val[0]
        out_idx[q, size] = heap_idx[0]
        heap_val[0] = heap_val[size]
        heap_idx[0] = heap_idx[size]
        _sift_down(heap_val, heap_idx, size, 0)


@njit(cache=True, nogil=True)
def top_k_queries(indptr, indices, data, query_indptr, query_terms, n_docs, k, mask, out_idx, out_val, out_count):
    """Score each query (terms ``query_terms[query_indptr[q]:query_indptr[q+1]]``) and write its
    best ``k`` documents with a positive score, best first, into row ``q`` of the outputs."""
    acc = np.zeros(n_docs, dtype=np.float64)
    touched = np.empty(n_docs, dtype=np.int64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    for q in range(len(query_indptr) - 1):
        n_postings = 0
        for j in range(query_indptr[q], query_indptr[q + 1]):
            t = query_terms[j]
            n_postings += indptr[t + 1] - indptr[t]
        # Many postings: accumulate branch-free, then scan every document.
        # Few postings: remember the touched documents and visit only those.
        dense = 4 * n_postings >= n_docs
        n_touched = 0
        for j in range(query_indptr[q], query_indptr[q + 1]):
            t = query_terms[j]
            n_touched = _add_postings(indices, data, indptr[t], indptr[t + 1], acc, touched, n_touched, dense)
        _finish_query(q, acc, touched, n_touched, n_docs, dense, mask, k, heap_val, heap_idx, out_idx, out_val, out_count)


@njit(inline="always")
def _copy(values, start, count, out, running):
    """``count`` values from ``start`` into ``out``: as they are, or (``running``) their running sum."""
    total = 0
    for i in range(count):
        if running:
            total += values[start + i]
            out[i] = total
        else:
            out[i] = values[start + i]


@njit(inline="always")
def _read_term(width, part1, part2, part4, start, count, out, running):
    """A term's values from the array of its width (:mod:`salience.search.packed`)."""
    if width == 1:
        _copy(part1, start, count, out, running)
    elif width == 2:
        _copy(part2, start, count, out, running)
    else:
        _copy(part4, start, count, out, running)


@njit(cache=True, nogil=True)
def top_k_packed(counts, gap_width, gap_offset, gaps1, gaps2, gaps4, tf_width, tf_offset, tf1, tf2, tf4,
                 doc_len, idf, avg_len, code, k1, b, delta, base, query_indptr, query_terms, n_docs, k, mask,
                 out_idx, out_val, out_count):
    """:func:`top_k_queries` over packed postings (:mod:`salience.search.packed`): each query
    term's postings decoded and scored (``scoring.tf_formula``, the vectorised path's formula)
    as they are added, so nothing but the query's postings is read."""
    acc = np.zeros(n_docs, dtype=np.float64)
    touched = np.empty(n_docs, dtype=np.int64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    longest = 1
    for j in range(len(query_terms)):
        longest = max(longest, counts[query_terms[j]])
    docs = np.empty(longest, dtype=np.int64)
    tf = np.empty(longest, dtype=np.float64)
    values = np.empty(longest, dtype=np.float32)
    for q in range(len(query_indptr) - 1):
        n_postings = 0
        for j in range(query_indptr[q], query_indptr[q + 1]):
            n_postings += counts[query_terms[j]]
        dense = 4 * n_postings >= n_docs
        n_touched = 0
        for j in range(query_indptr[q], query_indptr[q + 1]):
            t = query_terms[j]
            n = counts[t]
            _read_term(gap_width[t], gaps1, gaps2, gaps4, gap_offset[t], n, docs, True)  # gaps to documents
            _read_term(tf_width[t], tf1, tf2, tf4, tf_offset[t], n, tf, False)
            weight = idf[t]
            for i in range(n):
                tfc = tf_formula(tf[i], np.float64(doc_len[docs[i]]), avg_len, code, k1, b, delta)
                values[i] = np.float32(weight * (tfc - base))
            n_touched = _add_postings(docs, values, 0, n, acc, touched, n_touched, dense)
        _finish_query(q, acc, touched, n_touched, n_docs, dense, mask, k, heap_val, heap_idx, out_idx, out_val, out_count)

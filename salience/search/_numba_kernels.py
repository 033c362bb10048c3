"""Optional numba kernels for query scoring and top-k (the ``numba`` backend).

It computes exactly what the numpy backend computes, in the same order of additions, so
results are identical; it only avoids the dense (queries x documents) block: a query's
postings are added to one accumulator without a branch, then read a second time to offer
their documents to a bounded heap of the best ``k`` (each document's score cleared as it is
offered, so it is offered once and the accumulator is left empty) — or, when they cover a
good part of the collection, every document is scanned instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from salience.core import bm25_formulas

tf_from_norm = njit(inline="always")(bm25_formulas.tf_from_norm)
length_norm = njit(inline="always")(bm25_formulas.length_norm)


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
def _offer(heap_val, heap_idx, size, k, v, d):
    """Offer document ``d`` scoring ``v`` to the bounded heap holding ``size`` of the best
    ``k`` (a min-heap on the ranking rule: its root is the worst kept); return its new size."""
    if size < k:  # insert at the end and sift up
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
    elif _worse(heap_val[0], heap_idx[0], v, d):  # better than the worst kept: it takes its place
        heap_val[0] = v
        heap_idx[0] = d
        _sift_down(heap_val, heap_idx, size, 0)
    return size


@njit(inline="always")
def _push(docs, lo, hi, acc, mask, k, heap_val, heap_idx, size, clear, floor=0.0):
    """Offer documents ``docs[lo:hi]`` (``docs`` None: every document from ``lo`` to ``hi``)
    with their accumulated scores to the bounded heap holding ``size`` of the best ``k``;
    return its new size. ``clear``: zero each offered document's score, so a document met
    again (in another query term's postings) is offered once. ``floor``: a score the k-th best
    is known to reach, so documents below it are not offered."""
    threshold = heap_val[0] if size == k else floor  # score of the worst kept document once full
    for j in range(lo, hi):
        d = j if docs is None else docs[j]
        v = acc[d]
        if clear:
            acc[d] = 0.0
        # Once the heap is full almost every document is rejected here; the branch is
        # predictable, which matters when scanning all documents.
        if v < threshold or v <= 0.0:
            continue
        if not mask[d]:
            continue
        size = _offer(heap_val, heap_idx, size, k, v, d)
        if size == k:
            threshold = heap_val[0]
    return size


@njit(inline="always")
def _add_postings(docs, values, lo, hi, acc):
    """Add postings [lo, hi) to the accumulator: no branch, the documents are found again
    from the same postings when the top k is taken."""
    for p in range(lo, hi):
        acc[docs[p]] += values[p]


@njit(inline="always")
def _finish_scan(q, acc, n_docs, mask, k, heap_val, heap_idx, out_idx, out_val, out_count, sample, lo, hi):
    """Row ``q`` of the outputs from a scan of every document (a query with postings for a
    good part of the collection: a sequential pass is cheaper than revisiting them), each
    score cleared as it is read. The k-th best score of the documents ``sample[lo:hi]`` (one
    term's postings) is a floor the k-th best of all reaches, so the scan offers only the few
    documents above it to the heap instead of every improvement in document order."""
    floor = _floor(sample, lo, hi, acc, mask, k, heap_val, heap_idx)
    size = _push(None, 0, n_docs, acc, mask, k, heap_val, heap_idx, 0, True, floor)
    _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count)


@njit(inline="always")
def _floor(sample, lo, hi, acc, mask, k, heap_val, heap_idx):
    """The k-th best accumulated score among documents ``sample[lo:hi]`` (0 when they are fewer
    than k): any k documents' k-th best is one the k-th best of all reaches. The heap is only
    borrowed."""
    if hi - lo < k:
        return 0.0
    size = _push(sample, lo, hi, acc, mask, k, heap_val, heap_idx, 0, False)
    return heap_val[0] if size == k else 0.0


@njit(inline="always")
def _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count):
    """The heap's ``size`` documents into row ``q`` of the outputs, in heap order: the best
    ``size`` as a set (:func:`order_ties` after numpy's sort ranks them, when asked)."""
    out_count[q] = size
    for i in range(size):
        out_val[q, i] = heap_val[i]
        out_idx[q, i] = heap_idx[i]


@njit(cache=True, nogil=True)
def sort_rows(positions, values, counts):
    """The first ``counts[q]`` of each row put best first by the ranking rule (a heap built in
    place, then taken apart from the back): for narrow rows, where numpy's sort costs more in
    its calls than in its work."""
    for q in range(len(counts)):
        size = counts[q]
        row_val = values[q]
        row_idx = positions[q]
        for i in range(size // 2 - 1, -1, -1):
            _sift_down(row_val, row_idx, size, i)
        while size > 1:  # the worst kept goes to the back
            size -= 1
            _swap(row_val, row_idx, 0, size)
            _sift_down(row_val, row_idx, size, 0)


@njit(cache=True, nogil=True)
def order_ties(positions, values, counts):
    """Each run of equal values in the first ``counts[q]`` of row ``q`` (rows sorted by value,
    best first) put in ascending position order: the ranking rule's ties."""
    for q in range(len(counts)):
        n = counts[q]
        i = 0
        while i < n:
            j = i + 1
            while j < n and values[q, j] == values[q, i]:
                j += 1
            if j - i > 1:
                positions[q, i:j] = np.sort(positions[q, i:j])
            i = j


@njit(cache=True, nogil=True)
def top_k_queries(indptr, indices, data, query_indptr, query_terms, n_docs, k, mask, out_idx, out_val, out_count):
    """Score each query (terms ``query_terms[query_indptr[q]:query_indptr[q+1]]``) and write its
    best ``k`` documents with a positive score (in heap order) into row ``q`` of the outputs."""
    acc = np.zeros(n_docs, dtype=np.float64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    for q in range(len(query_indptr) - 1):
        lo, hi = query_indptr[q], query_indptr[q + 1]
        n_postings = 0
        sample = -1  # the query's shortest posting list of at least k documents
        for j in range(lo, hi):
            t = query_terms[j]
            n_postings += indptr[t + 1] - indptr[t]
            _add_postings(indices, data, indptr[t], indptr[t + 1], acc)
            if indptr[t + 1] - indptr[t] >= k and (sample < 0 or indptr[t + 1] - indptr[t] < indptr[sample + 1] - indptr[sample]):
                sample = t
        if 4 * n_postings >= n_docs:
            s_lo, s_hi = (indptr[sample], indptr[sample + 1]) if sample >= 0 else (0, 0)
            _finish_scan(q, acc, n_docs, mask, k, heap_val, heap_idx, out_idx, out_val, out_count, indices, s_lo, s_hi)
            continue
        floor = _floor(indices, indptr[sample], indptr[sample + 1], acc, mask, k, heap_val, heap_idx) if sample >= 0 else 0.0
        size = 0
        for j in range(lo, hi):  # the top k of the documents in the query's postings, each cleared as met
            t = query_terms[j]
            size = _push(indices, indptr[t], indptr[t + 1], acc, mask, k, heap_val, heap_idx, size, True, floor)
        _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count)


#: postings a term decodes at a time before scoring them: the buffers stay in the L1 cache
POSTING_BATCH = 1024


@njit(inline="always")
def _decode_range(gaps, gap_at, p, n, doc, limit, norms, first, docs, doc_norms, touched, n_touched, cap):
    """Up to :data:`POSTING_BATCH` of a term's packed postings from its ``p``-th (the previous
    document ``doc``) below document ``limit``: each document (less ``first``) into ``docs``
    and its length norm into ``doc_norms``, and into ``touched`` while it has room (``cap``).
    The gaps are a running sum, so this pass is serial; the scores are computed apart, in a
    loop the compiler vectorises. Returns ``(count, doc, n_touched)``."""
    count = 0
    stop = min(n, p + POSTING_BATCH)
    while p + count < stop:
        following = doc + np.int64(gaps[gap_at + p + count])
        if following >= limit:
            break
        doc = following
        docs[count] = doc - first
        doc_norms[count] = norms[doc]
        if cap > 0:  # loop-invariant: compiled as two loops, the second without the bookkeeping
            touched[min(n_touched, cap)] = doc  # past the room: overwritten, the chunk is scanned anyway
            n_touched += 1
        count += 1
    return count, doc, n_touched


@njit(nogil=True, cache=True, error_model="numpy")
def _posting_values(tfs, tf_at, count, doc_norms, weight, code, k1, delta, base, values):
    """The contributions of ``count`` postings (term frequencies from ``tfs[tf_at]``, their
    documents' norms in ``doc_norms``) into ``values``: ``bm25_formulas.tf_from_norm`` cast to
    float32 as a saved score is, so each is bit for bit the vectorised path's. Its own function,
    with numpy's division semantics (no zero check: every denominator is positive), so that
    the compiler vectorises the division, the loop's cost."""
    for r in range(count):
        tfc = tf_from_norm(np.float64(tfs[tf_at + r]), doc_norms[r], code, k1, delta)
        values[r] = np.float64(np.float32(weight * (tfc - base)))


@njit(inline="always")
def _score_range(gaps, gap_at, tf_width, tf1, tf2, tf4, tf_at, p, n, doc, limit, norms, weight, code, k1, delta,
                 base, acc, first, touched, n_touched, cap, docs, doc_norms, values):
    """A term's packed postings from its ``p``-th (the previous document ``doc``) up to document
    ``limit``, decoded, scored and added to ``acc`` (indexed from document ``first``), a batch
    at a time; the documents go to ``touched`` while it has room (``cap``). Returns
    ``(p, doc, n_touched)`` where the term stopped."""
    while True:
        count, doc, n_touched = _decode_range(gaps, gap_at, p, n, doc, limit, norms, first, docs, doc_norms, touched,
                                              n_touched, cap)
        # one compiled loop per width: the width is not tested per posting
        if tf_width == 1:
            _posting_values(tf1, tf_at + p, count, doc_norms, weight, code, k1, delta, base, values)
        elif tf_width == 2:
            _posting_values(tf2, tf_at + p, count, doc_norms, weight, code, k1, delta, base, values)
        else:
            _posting_values(tf4, tf_at + p, count, doc_norms, weight, code, k1, delta, base, values)
        for r in range(count):
            acc[docs[r]] += values[r]
        p += count
        if count < POSTING_BATCH or p == n:
            return p, doc, n_touched


@njit(inline="always")
def _add_cached(gaps, gap_at, cached, cached_at, p, n, doc, limit, acc, first, touched, n_touched, cap):
    """:func:`_score_range` for a term whose contributions are precomputed
    (:mod:`salience.search.score_cache`: ``cached[cached_at + p]`` is its ``p``-th posting's,
    the value :func:`_posting_values` computes): one loop decodes each document and adds its
    contribution, no length norm read and no division. Returns ``(p, doc, n_touched)``."""
    while p < n:
        following = doc + np.int64(gaps[gap_at + p])
        if following >= limit:
            break
        doc = following
        acc[doc - first] += np.float64(cached[cached_at + p])
        if cap > 0:  # loop-invariant, as in _decode_range
            touched[min(n_touched, cap)] = doc
            n_touched += 1
        p += 1
    return p, doc, n_touched


@njit(inline="always")
def _offer_chunk(docs, count, first, acc, mask, k, heap_val, heap_idx, size):
    """Offer a chunk's documents with their accumulated scores to the bounded heap, each score
    cleared as it is read: those of ``docs[:count]`` (``docs`` None: the ``count`` documents
    from ``first``). Returns the heap's new size."""
    threshold = heap_val[0] if size == k else 0.0
    for j in range(count):
        d = first + j if docs is None else docs[j]
        v = acc[d - first]
        acc[d - first] = 0.0
        # once the heap is full almost every document is rejected here: a predictable branch
        if v < threshold or v <= 0.0 or not mask[d]:
            continue
        size = _offer(heap_val, heap_idx, size, k, v, d)
        if size == k:
            threshold = heap_val[0]
    return size


@njit(cache=True, nogil=True)
def top_k_packed(counts, gap_width, gap_offset, gaps1, gaps2, gaps4, tf_width, tf_offset, tf1, tf2, tf4,
                 norms, idf, code, k1, delta, base, cached_at, cached, query_indptr, query_terms, n_docs, k, mask,
                 out_idx, out_val, out_count, chunk):
    """:func:`top_k_queries` over packed postings (:mod:`salience.search.packed`), scored as
    they are read (``norms``: each document's ``bm25_formulas.length_norm``), so nothing but the
    query's postings is read. A term's postings go :data:`POSTING_BATCH` at a time through three
    loops: decoding (a serial running sum of gaps), scoring (vectorised: the division is most
    of a posting's arithmetic) and adding to the accumulator.

    A query is scored ``chunk`` documents at a time: every term's postings in the chunk, in the
    query's order, then the chunk's top candidates offered to the heap. The accumulator and the
    norms a chunk touches stay in the core's cache, where a whole-collection accumulator would
    miss it on every posting; a document's terms are still added in the query's order, so its
    score is the same to the bit. A chunk's touched documents are listed so that a sparse chunk
    offers only those; a query whose postings would overflow every chunk's list skips the
    listing and offers each chunk whole: for a long query the listing is pure overhead.

    A term with ``cached_at[t] >= 0`` (``cached_at`` may be empty: none) has its contributions
    precomputed in ``cached`` from there (:mod:`salience.search.score_cache`), read instead of
    computed: the same values, so the same scores."""
    acc = np.zeros(chunk, dtype=np.float64)
    heap_val = np.empty(k, dtype=np.float64)
    heap_idx = np.empty(k, dtype=np.int64)
    longest = 1
    for q in range(len(query_indptr) - 1):
        longest = max(longest, query_indptr[q + 1] - query_indptr[q])
    position = np.zeros(longest, dtype=np.int64)  # each term's next posting
    previous = np.zeros(longest, dtype=np.int64)  # ... and the document before it
    cap = chunk // 4  # a chunk with more postings than this is scanned whole
    touched = np.empty(cap + 1, dtype=np.int64)
    docs = np.empty(POSTING_BATCH, dtype=np.int64)
    doc_norms = np.empty(POSTING_BATCH, dtype=np.float64)
    values = np.empty(POSTING_BATCH, dtype=np.float64)
    for q in range(len(query_indptr) - 1):
        lo = query_indptr[q]
        m = query_indptr[q + 1] - lo
        total = 0
        for j in range(m):
            position[j] = 0
            previous[j] = 0
            total += counts[query_terms[lo + j]]
        # postings enough to fill every chunk past the room: each chunk is scanned whole, so the
        # documents touched are not listed (the same offers, in document order)
        room = 0 if total > (n_docs // 4 + chunk) else cap
        size = 0
        for first in range(0, n_docs, chunk):
            limit = min(n_docs, first + chunk)
            n_touched = 0
            for j in range(m):
                t = query_terms[lo + j]
                if position[j] == counts[t]:
                    continue
                width = gap_width[t]
                at = cached_at[t] if len(cached_at) else -1
                if at >= 0:  # precomputed contributions: one loop per gap width, as below
                    if width == 1:
                        position[j], previous[j], n_touched = _add_cached(
                            gaps1, gap_offset[t], cached, at, position[j], counts[t], previous[j], limit, acc, first,
                            touched, n_touched, room)
                    elif width == 2:
                        position[j], previous[j], n_touched = _add_cached(
                            gaps2, gap_offset[t], cached, at, position[j], counts[t], previous[j], limit, acc, first,
                            touched, n_touched, room)
                    else:
                        position[j], previous[j], n_touched = _add_cached(
                            gaps4, gap_offset[t], cached, at, position[j], counts[t], previous[j], limit, acc, first,
                            touched, n_touched, room)
                elif width == 1:
                    position[j], previous[j], n_touched = _score_range(
                        gaps1, gap_offset[t], tf_width[t], tf1, tf2, tf4, tf_offset[t], position[j], counts[t],
                        previous[j], limit, norms, idf[t], code, k1, delta, base, acc, first, touched, n_touched, room,
                        docs, doc_norms, values)
                elif width == 2:
                    position[j], previous[j], n_touched = _score_range(
                        gaps2, gap_offset[t], tf_width[t], tf1, tf2, tf4, tf_offset[t], position[j], counts[t],
                        previous[j], limit, norms, idf[t], code, k1, delta, base, acc, first, touched, n_touched, room,
                        docs, doc_norms, values)
                else:
                    position[j], previous[j], n_touched = _score_range(
                        gaps4, gap_offset[t], tf_width[t], tf1, tf2, tf4, tf_offset[t], position[j], counts[t],
                        previous[j], limit, norms, idf[t], code, k1, delta, base, acc, first, touched, n_touched, room,
                        docs, doc_norms, values)
            if room == 0 or n_touched > room:
                size = _offer_chunk(None, limit - first, first, acc, mask, k, heap_val, heap_idx, size)
            elif n_touched:
                size = _offer_chunk(touched, n_touched, first, acc, mask, k, heap_val, heap_idx, size)
        _write_row(q, size, heap_val, heap_idx, out_idx, out_val, out_count)


@njit(cache=True, nogil=True)
def top_k_rows(scores, allowed, offset, k, heap_val, heap_idx, sizes):
    """Offer every allowed column of each row of ``scores`` (a block of a queries x documents
    matrix whose first column is document ``offset``; ``allowed`` indexed by document) to that
    row's bounded heap of the best ``k`` (``heap_val``, ``heap_idx``: (queries, k); ``sizes``:
    how many each holds), by the ranking rule (higher score first, ties by lower position).
    Any score competes, negative ones too (cosine similarities)."""
    n_rows, n = scores.shape
    for r in range(n_rows):
        hv = heap_val[r]
        hi = heap_idx[r]
        size = sizes[r]
        threshold = hv[0] if size == k else -np.inf
        for j in range(n):
            v = scores[r, j]
            # once the heap is full almost every score is rejected here, a predictable branch
            if v < threshold:
                continue
            d = offset + j
            if not allowed[d]:
                continue
            size = _offer(hv, hi, size, k, v, d)
            if size == k:
                threshold = hv[0]
        sizes[r] = size

"""Approximate nearest-neighbour search over a :class:`~salience.search.Dense` index's
vectors (faiss, ``pip install 'salience[ann]'``): an HNSW graph (``hnsw_m`` links per node,
``ef_search`` candidates per query) or an IVF-PQ index (``ivf_lists`` cells, ``pq_bytes``
bytes a vector, ``nprobe`` cells searched, the best ``refine`` x k candidates re-scored
exactly against the stored vectors). Both use inner product on unit vectors, skip deleted and
filtered-out documents through faiss's selector, and are saved beside the vectors
(``hnsw.faiss`` / ``ivfpq.faiss``) by a whole save or merge."""

from __future__ import annotations

import numpy as np

from salience.core.scores import Scores
from salience.exceptions import CorruptIndexError, InvalidParameterError

__all__ = ["approximate_structure", "search_approximate"]


def approximate_structure(index):
    """The structure ``index.approximate`` names over every stored vector: read from the file a
    save wrote (its CRC checked on load), or built."""
    from salience.extras import require

    faiss = require("faiss", "ann", f"approximate={index.approximate!r}")
    saved = getattr(index, "_graph_file", None)
    if saved is not None:
        try:
            structure = faiss.read_index(str(saved))
        except RuntimeError as err:
            raise CorruptIndexError(f"{saved}: not a readable faiss index ({err}).") from None
        if structure.ntotal != len(index._ids) or structure.d != index._dimension:
            raise CorruptIndexError(f"{saved}: a graph of {structure.ntotal} vectors of dimension {structure.d}, the "
                                    f"index holds {len(index._ids)} of dimension {index._dimension}.")
        return structure
    if index.approximate == "ivfpq":
        return _train_ivfpq(index, faiss)
    graph = faiss.IndexHNSWFlat(index._dimension, index.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = max(40, 2 * index.hnsw_m)
    for block in index._blocks:
        graph.add(np.ascontiguousarray(block, dtype=np.float32))
    return graph


def _train_ivfpq(index, faiss):
    """An IVF-PQ index trained on (a sample of) the stored vectors, then holding them all."""
    n, dimension = len(index._ids), index._dimension
    pq_bytes = index.pq_bytes or max(1, dimension // 8)
    if dimension % pq_bytes:
        raise InvalidParameterError(f"pq_bytes={pq_bytes} must divide the dimension {dimension} (each byte codes "
                                    f"{dimension}/{pq_bytes} dimensions).")
    lists = index.ivf_lists or max(1, min(int(4 * np.sqrt(n)), n // 39))
    if lists > n:
        raise InvalidParameterError(f"ivf_lists={lists} is more than the {n} vectors to cluster.")
    quantizer = faiss.IndexFlatIP(dimension)
    bits = min(8, max(1, int(np.log2(max(n, 2)))))  # 256 centroids per sub-vector, fewer for tiny collections
    structure = faiss.IndexIVFPQ(quantizer, dimension, lists, pq_bytes, bits, faiss.METRIC_INNER_PRODUCT)
    sample_size = min(n, max(lists * 39, 256 * 39, 50_000))
    rows = np.sort(np.random.default_rng(0).choice(n, sample_size, replace=False))
    structure.train(index._rows(rows))
    for block in index._blocks:
        structure.add(np.ascontiguousarray(block, dtype=np.float32))
    return structure


def search_approximate(index, vectors: np.ndarray, k: int, allowed: np.ndarray) -> list[Scores]:
    """The ``k`` best of the ``allowed`` documents for each query vector, best first."""
    import faiss

    structure = index._hnsw()
    bits = np.packbits(allowed, bitorder="little")  # kept alive here: the selector points into it
    selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if index.approximate == "ivfpq":
        params = faiss.SearchParametersIVF(sel=selector, nprobe=index.nprobe)
        _, found = structure.search(vectors, k * index.refine, params=params)
    else:
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(index.ef_search, k))
        scores, found = structure.search(vectors, k, params=params)
    out = []
    for row, row_index in enumerate(found):
        row_index = row_index[row_index >= 0]
        if index.approximate == "ivfpq":  # the candidates re-scored exactly: scores are true cosines
            row_scores = index._rows(row_index) @ vectors[row]
        else:
            row_scores = scores[row][: len(row_index)]
        order = np.lexsort((row_index, -row_scores))[:k]
        out.append(Scores(row_scores[order].astype(np.float64), ids=[index._ids[i] for i in row_index[order]]))
    return out

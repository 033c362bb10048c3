"""A BM25 index split into shards, searched by scatter-gather with global statistics.

Documents are routed to ``n_shards`` shards by a hash of their id (CRC-32, stable across
machines and Python versions). Each shard is an ordinary :class:`~salience.search.BM25`
index; the sharded index sums the shards' collection statistics (document frequencies, live
documents, total length) and gives every shard the sums, so each scores exactly as one index
over all documents would (to float32 rounding), and the top ``k`` of the shards' top ``k``
lists is the single index's top ``k``. BM25L / BM25+'s per-query credit for absent terms is
added once, from the global vocabulary.

Shards are built in parallel by the project's executors (local processes or Ray tasks) and
searched in this process, or held by Ray actors on the nodes of a cluster
(``ShardedIndex.load(path, executor="ray")``): a query is sent to every actor at once and the
answers gathered. A shard that does not answer makes the search fail with
:class:`~salience.exceptions.ShardUnavailableError` naming it, or, with
``allow_partial=True``, return the other shards' results in a :class:`PartialResults` that
says which shards are missing.

On disk (format ``salience.shards``)::

    INDEX/
      shards.json        format, version, number of shards, routing, BM25 parameters
      shard-000/ ...     one BM25 index folder per shard (salience.search.store)

``shards.json`` is written last: the commit point of a build.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from salience.core.base import register
from salience.core.checks import check_k
from salience.core.params import Check, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import CorruptIndexError, InvalidParameterError, NotFittedError, ShardUnavailableError
from salience.io.files import atomic_directory, check_output_path
from salience.parallel import EXECUTORS, map_shards, progress_bar
from salience.core import bm25_formulas as scoring
from salience.search.index import Index
from salience.search.store import is_own_output, owns_index_file
from salience.search.shard_io import (FORMAT, MANIFEST, LocalShard, RayShard, ShardServer, build_shard,
                                      check_shards_alike, is_sharded_folder, is_unavailable, merge_top_k,
                                      read_manifest, route_documents, shard_of, write_manifest)

__all__ = ["ShardedIndex", "PartialResults", "shard_of", "is_sharded_folder", "ShardUnavailableError", "FORMAT",
           "MANIFEST"]


class PartialResults(list):
    """Results of a search that some shards did not answer: a list of
    :class:`~salience.Scores` like any other, with ``missing_shards`` (their numbers) and
    ``partial`` (True)."""

    def __init__(self, results: Iterable[Scores], missing_shards: Sequence[int]):
        super().__init__(results)
        self.missing_shards = sorted(missing_shards)
        self.partial = bool(self.missing_shards)


# ---- the sharded index ------------------------------------------------------------------
def _is_bm25(value) -> bool:
    from salience.search.bm25 import BM25

    return isinstance(value, BM25)


def _is_executor(value) -> bool:
    return all(callable(getattr(value, name, None)) for name in ("map", "close"))


class ShardedIndex(Index):
    """BM25 over ``n_shards`` shards (see the module docstring): ``ShardedIndex(shard=BM25(k1=1.2),
    n_shards=4, executor="ray").fit(documents)`` builds them (``n_jobs`` at a time on the
    project's executors), :meth:`load` opens a saved folder holding its shards in this process
    or in Ray actors, :meth:`build` and :meth:`write` build straight into a folder.

    >>> from salience.search import BM25
    >>> texts = ["red apples", "green apples", "blue sky", "apple pie", "grey sky", "apples and pears"]
    >>> docs = [{"_id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    >>> sharded = ShardedIndex.build(docs, n_shards=2)
    >>> sharded.search("apples", k=3).ids == BM25().fit(docs).search("apples", k=3).ids
    True
    """

    label = "sharded index"
    # what the command line and the service may ask of it (the capabilities of salience.search.Index)
    manifest_name = MANIFEST
    answers_partially = True
    holds_shards = True
    writable_in_place = False
    scores_by_id = False

    _parameter_constraints = {"shard": [None, Check(_is_bm25, "a BM25 (the parameters each shard is built with)")],
                              "n_shards": [Interval("int", 1)],
                              "executor": [Options(EXECUTORS), Check(_is_executor, "an executor (submit, map, close)")],
                              "address": [None, str], "n_jobs": [Interval("int", 1)],
                              "timeout": [None, Interval("real", 0, closed="neither")]}

    def __init__(self, *, shard=None, n_shards: int = 2, executor="local", address: str | None = None, n_jobs: int = 1,
                 timeout: float | None = 60.0):
        self.shard, self.n_shards, self.executor, self.address = shard, n_shards, executor, address
        self.n_jobs, self.timeout = n_jobs, timeout
        self._validate_params()
        self._shards: list | None = None
        self._params: dict | None = None
        self._path: Path | None = None
        self._n_docs = 0

    @property
    def params(self) -> dict:
        """The BM25 parameters every shard is built with (as saved in the manifest)."""
        if self._params is not None:
            return self._params
        from salience.search.bm25 import BM25

        return (self.shard if self.shard is not None else BM25()).resolved_params()

    def _attach(self, shards: list, params: dict, path: Path | None = None) -> "ShardedIndex":
        """Hold ``shards`` (built or loaded with ``params``) and share their statistics. The
        shards held in this process share one score-cache budget (``score_cache_mb``): each
        takes its part; a shard in a Ray actor keeps the whole budget in its own process."""
        self._shards, self._params, self._path = shards, dict(params), path
        self.n_shards = len(shards)
        local = [shard for shard in shards if isinstance(shard, LocalShard)]
        for shard in local:
            shard.index.score_cache_share = 1.0 / len(local)
        self._share_statistics()
        return self

    def _has_data(self) -> bool:
        return self._shards is not None

    def _require_shards(self) -> None:
        if self._shards is None:
            raise NotFittedError("this ShardedIndex has no shards yet: fit it on documents, or load a saved one.")

    def fit(self, documents: Any, *, show_progress: bool = False, on_error: str = "raise",
            memory_mb: float = 1024) -> "ShardedIndex":
        """Route ``documents`` (records, a jsonl(.gz) file or a BEIR folder) to ``n_shards``
        shards by id hash and index each in memory as ``shard`` does (a BM25), ``n_jobs``
        shards at a time on ``executor``."""
        docs, params = _documents_and_params(documents, self.n_shards, self.params, on_error, memory_mb, stream=False)
        if not docs:
            raise InvalidParameterError("cannot index an empty corpus: no documents were given.")
        parts: list = [[] for _ in range(self.n_shards)]
        route_documents(docs, self.n_shards, parts, show_progress)
        jobs = [(part, None, params) for part in parts]
        shards = []
        with progress_bar(self.n_shards, "indexing shards", show_progress, unit="shard") as bar:
            for index in map_shards(build_shard, jobs, self.n_jobs, self.executor):
                shards.append(LocalShard(index))
                bar.update(1)
        empty = [s for s, shard in enumerate(shards) if not shard.index._has_data()]
        if empty:
            raise InvalidParameterError(f"shards {empty} got no documents ({self.n_shards} shards): use fewer shards.")
        return self._attach(shards, params)

    # ---- construction
    @classmethod
    def build(cls, documents: Any, *, n_shards: int, out: str | os.PathLike | None = None,
              executor: Any = "local", n_jobs: int = 1, show_progress: bool = False, on_error: str = "raise",
              memory_mb: float = 1024, **params: Any) -> "ShardedIndex":
        """Route ``documents`` (records, a jsonl(.gz) file or a BEIR folder) to ``n_shards``
        shards by id hash and index each as ``BM25(**params)``, ``n_jobs`` shards at a time
        on ``executor`` (``"local"`` processes or ``"ray"``, or an executor object). With
        ``out`` the folder is written as :meth:`write` writes it and then opened; without, the
        shards are built in memory and returned."""
        if out is not None:
            cls.write(documents, out, n_shards=n_shards, executor=executor, n_jobs=n_jobs,
                      show_progress=show_progress, on_error=on_error, memory_mb=memory_mb, **params)
            return cls.load(out)
        from salience.search.bm25 import BM25

        return cls(shard=BM25(**params), n_shards=n_shards, executor=executor, n_jobs=n_jobs).fit(
            documents, show_progress=show_progress, on_error=on_error, memory_mb=memory_mb)

    @staticmethod
    def write(documents: Any, out: str | os.PathLike, *, n_shards: int, executor: Any = "local", n_jobs: int = 1,
              show_progress: bool = False, on_error: str = "raise", memory_mb: float = 1024,
              **params: Any) -> list[int]:
        """Write a sharded index folder to ``out`` without opening it; return each shard's
        document count. The routed documents go to files and every job writes its shard folder
        (a Ray cluster's nodes need ``out`` on a shared filesystem), so the coordinator holds one
        document at a time and each job builds its shard within ``memory_mb / n_jobs`` megabytes
        (:meth:`BM25.build`). ``out`` must be new, empty or an earlier index: the user's files
        there stay."""
        from salience.core.checks import check_n_jobs

        docs, params = _documents_and_params(documents, n_shards, params, on_error, memory_mb, stream=True)
        out = check_output_path(out, [documents] if isinstance(documents, (str, os.PathLike)) else [],
                                what="index", option="out", is_own=is_own_output)
        with atomic_directory(out, owned=owns_index_file) as tmp:
            files = [open(tmp / f".part-{s:03d}.pickle", "wb") for s in range(n_shards)]
            try:
                counts = route_documents(docs, n_shards, files, show_progress)
            finally:
                for fh in files:
                    fh.close()
            empty = [s for s, c in enumerate(counts) if c == 0]
            if empty:
                raise InvalidParameterError(f"shards {empty} got no documents ({n_shards} shards): use fewer shards.")
            share = memory_mb / min(check_n_jobs(n_jobs), n_shards)
            jobs = [(str(tmp / f".part-{s:03d}.pickle"), str(tmp / f"shard-{s:03d}"), params, share)
                    for s in range(n_shards)]
            with progress_bar(n_shards, "indexing shards", show_progress, unit="shard") as bar:
                for _ in map_shards(build_shard, jobs, n_jobs, executor):
                    bar.update(1)
            for s in range(n_shards):
                os.remove(tmp / f".part-{s:03d}.pickle")
            write_manifest(tmp, n_shards, params, counts)
        return counts

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True, executor: str = "local",
             address: str | None = None, timeout: float | None = 60.0) -> "ShardedIndex":
        """A saved sharded index: shards memory-mapped in this process (``"local"``), or each
        in a Ray actor (``"ray"``; ``address`` of a running cluster, else a local one), its
        answers awaited at most ``timeout`` seconds; ``verify`` checks each shard's files
        against its manifest."""
        path = Path(path)
        manifest = read_manifest(path)
        folders = [path / name for name in manifest["shards"]]
        for folder in folders:
            if not folder.is_dir():
                raise CorruptIndexError(f"{path}: shard folder {folder.name} is missing.")
        from salience.search.bm25 import BM25

        index = cls(shard=BM25(**manifest["params"]), n_shards=len(folders), executor=executor, address=address,
                    timeout=timeout)
        if executor == "local":
            shards = [LocalShard(BM25.load(folder, verify=verify)) for folder in folders]
        elif executor == "ray":
            from salience.parallel import ray_session

            actor = ray_session(address, what="Shards in Ray actors").remote(ShardServer)
            shards = [RayShard(actor.remote(str(folder.resolve()), verify), timeout) for folder in folders]
        else:
            raise InvalidParameterError(f"executor {executor!r}: a loaded index holds its shards in this process "
                                        "('local') or in Ray actors ('ray').")
        check_shards_alike(path, manifest, [shard.call("resolved_params") for shard in shards])
        return index._attach(shards, manifest["params"], path)

    # ---- global statistics
    def _share_statistics(self) -> None:
        """Sum the shards' statistics and give each shard the sums over its own vocabulary."""
        stats = self._gather("collection_statistics", (), {}, allow_partial=False)
        vocabularies = [terms for terms, _, _, _ in stats]
        all_df = np.concatenate([df for _, df, _, _ in stats]).astype(np.int64)
        self._n_docs = int(sum(n for _, _, n, _ in stats))
        self.total_length = float(sum(length for _, _, _, length in stats))
        # numbered through a dict: a fixed-width string array would be as wide as the longest
        # term for every term (gigabytes for one long token in a large vocabulary)
        self._terms: dict[str, int] = {}
        inverse = np.fromiter((self._terms.setdefault(t, len(self._terms)) for terms in vocabularies for t in terms),
                              dtype=np.int64, count=len(all_df))
        global_df = np.bincount(inverse, weights=all_df, minlength=len(self._terms)).astype(np.int64)
        variant = self.params.get("variant", "lucene")
        k1, delta = float(self.params.get("k1", 1.5)), float(self.params.get("delta", 0.5))
        self._nonocc = scoring.idf(global_df, self.n_docs, variant) * scoring.nonoccurrence_component(variant, k1, delta)
        bounds = np.cumsum([0] + [len(terms) for terms in vocabularies])
        pending = [shard.submit("use_collection_statistics", global_df[inverse[lo:hi]], self.n_docs, self.total_length,
                                nonoccurrence=False)
                   for shard, lo, hi in zip(self._shards, bounds[:-1], bounds[1:])]
        for shard, p in zip(self._shards, pending):
            shard.result(p)  # a holder returns its index: only the wait matters
        self._tokenizer = None

    def _query_constant(self, query: str) -> float:
        """BM25L / BM25+'s credit for the query's terms absent from a document (0 otherwise)."""
        if not self._nonocc.any():
            return 0.0
        if self._tokenizer is None:
            from salience.text.tokenize import Tokenizer

            self._tokenizer = self.params.get("tokenizer") or Tokenizer()
        ids = [self._terms.get(t) for t in self._tokenizer.tokenize(query)]
        return float(sum(self._nonocc[i] for i in ids if i is not None))

    # ---- scatter-gather
    def _gather(self, method: str, args: tuple, kwargs: dict, allow_partial: bool) -> list:
        """Every shard's answer (None for a shard that did not answer, when allowed)."""
        pending = []
        for s, shard in enumerate(self._shards):
            try:
                pending.append(shard.submit(method, *args, **kwargs))
            except Exception as err:  # noqa: BLE001 - sorted out below
                pending.append(err)
        answers = []
        for s, (shard, p) in enumerate(zip(self._shards, pending)):
            try:
                if isinstance(p, BaseException):
                    raise p
                answers.append(shard.result(p))
            except Exception as err:  # noqa: BLE001 - a dead holder, or a real error re-raised
                if not is_unavailable(err):
                    raise
                if not allow_partial:
                    raise ShardUnavailableError(f"shard {s} of {self.n_shards} did not answer ({type(err).__name__}): "
                                                "search with allow_partial=True for the other shards' results.") from None
                answers.append(None)
        return answers

    def unreachable_shards(self) -> str | None:
        """None when every shard answers; else a sentence naming those that do not (a health check)."""
        answers = self._gather("get_params", (), {}, allow_partial=True)
        missing = [s for s, answer in enumerate(answers) if answer is None]
        if not missing:
            return None
        return (f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {self.n_shards} "
                "did not answer: searches fail unless allow_partial is set.")

    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                     allow_partial: bool = False, n_jobs: int = 1) -> list[Scores]:
        """The ``k`` best documents of each query over all shards (see the module docstring);
        the shards answer side by side whatever ``n_jobs`` (taken as every index's batch search
        takes it)."""
        self._require_shards()
        k = check_k(k)
        if isinstance(queries, str):
            raise InvalidParameterError("search_batch takes a list of queries; for one query use search(query).")
        queries = list(queries)
        answers = self._gather("search_batch", (queries,), {"k": k, "where": where}, allow_partial)
        missing = [s for s, a in enumerate(answers) if a is None]
        results = merge_top_k([a for a in answers if a is not None], len(queries), k)
        if self._nonocc.any():
            results = [Scores.unchecked(r.values + self._query_constant(q), r.ids) for r, q in zip(results, queries)]
        return PartialResults(results, missing) if allow_partial else results

    def search(self, query: str, *, k: int = 10, where: Mapping | None = None, allow_partial: bool = False) -> Scores:
        """The ``k`` best documents for ``query`` over all shards."""
        results = self.search_batch([query], k=k, where=where, allow_partial=allow_partial)
        return results[0]

    def retrieve(self, queries: Any, *, k: int = 1000, where: Mapping | None = None, name: str | None = None):
        """Search every query of ``{id: text}``, a queries.jsonl file or a BEIR folder; a :class:`~salience.Run`."""
        from salience.core.run import Run
        from salience.io.documents import read_queries

        query_map = read_queries(queries)
        results = self.search_batch(list(query_map.values()), k=k, where=where)
        return Run(dict(zip(query_map.keys(), results)), name=name or f"bm25-{self.n_shards}-shards")

    def document(self, doc_id: str) -> dict:
        """Stored fields and metadata of a document, from the shard its id routes to."""
        return self._shards[shard_of(doc_id, self.n_shards)].call("document", doc_id)

    @property
    def fields_(self) -> tuple:
        """The fields every shard indexes."""
        return tuple(self.params.get("fields", ("title", "text")))

    @property
    def store_documents(self) -> bool:
        return bool(self.params.get("store_documents", True))

    @property
    def n_docs(self) -> int:
        """Number of live documents over all shards."""
        return self._n_docs

    def __repr__(self) -> str:
        if self._shards is None:
            return f"ShardedIndex(n_shards={self.n_shards}, not indexed)"
        return f"ShardedIndex({self.n_shards} shards, {self.n_docs} documents)"

    # ---- changes (shards held in this process)
    def _local_indexes(self, verb: str) -> list:
        if not all(isinstance(s, LocalShard) for s in self._shards):
            raise InvalidParameterError(f"{verb} changes shards held in this process: load the index with "
                                        "executor='local' to change it.")
        return [s.index for s in self._shards]

    def add(self, documents: Any, *, on_error: str = "raise", show_progress: bool = False, n_jobs: int = 1,
            executor: Any = "local") -> "ShardedIndex":
        """Add documents, each to the shard its id routes to (a new segment there, tokenized
        with ``n_jobs`` on ``executor``); the global statistics follow. :meth:`commit` writes them."""
        from salience.io.documents import read_documents

        indexes = self._local_indexes("add")
        docs = read_documents(documents, tuple(self.params.get("fields", ("title", "text"))), on_error)
        parts: list = [[] for _ in indexes]
        route_documents(docs, self.n_shards, parts, show_progress)
        taken = next((d.id for s, part in enumerate(parts) for d in part if d.id in indexes[s]), None)
        if taken is not None:  # refused before any shard changes
            from salience.exceptions import DuplicateIdError

            raise DuplicateIdError(f"document id {taken!r} is already in the index; nothing was added.")
        for index, part in zip(indexes, parts):
            if part:
                index.add(part, n_jobs=n_jobs, executor=executor)
        self._share_statistics()
        return self

    def delete(self, ids: Iterable[str] | str) -> "ShardedIndex":
        """Delete documents by id from their shards; an unknown id is refused by name and
        nothing is deleted then."""
        from salience.exceptions import IdMismatchError

        indexes = self._local_indexes("delete")
        ids = [ids] if isinstance(ids, str) else [str(i) for i in ids]
        by_shard: dict[int, list[str]] = {}
        for doc_id in ids:
            s = shard_of(doc_id, self.n_shards)
            if doc_id not in indexes[s]:
                raise IdMismatchError(f"cannot delete unknown document id {doc_id!r}.")
            by_shard.setdefault(s, []).append(doc_id)
        for s, shard_ids in by_shard.items():
            indexes[s].delete(shard_ids)
        self._share_statistics()
        return self

    def commit(self) -> "ShardedIndex":
        """Write each shard's changes to its folder (each shard's commit is atomic; a crash
        between two shards leaves the earlier ones committed: commit again)."""
        if self.path is None:
            from salience.exceptions import NotFittedError

            raise NotFittedError("this sharded index has no folder yet; call save(path) first.")
        indexes = self._local_indexes("commit")
        for index in indexes:
            index.commit()
        # the manifest's per-shard counts follow the change (read by whoever lists the folder)
        write_manifest(self.path, self.n_shards, self.params, [index.n_docs for index in indexes])
        return self

    def merge(self) -> "ShardedIndex":
        """Merge every shard's segments into one and drop deleted documents."""
        indexes = self._local_indexes("merge")
        for index in indexes:
            index.merge()
        if self.path is not None:
            write_manifest(self.path, self.n_shards, self.params, [index.n_docs for index in indexes])
        self._share_statistics()
        return self

    @property
    def n_segments(self) -> int:
        return sum(index.n_segments for index in self._local_indexes("n_segments"))

    def save(self, path: str | os.PathLike) -> "ShardedIndex":
        """Write every shard and the manifest to ``path`` (shards held in this process only)."""
        if not all(isinstance(s, LocalShard) for s in self._shards):
            raise InvalidParameterError("shards held by Ray actors are saved where they were loaded from.")
        path = check_output_path(path, what="index", option="path", is_own=is_own_output)
        with atomic_directory(path, owned=owns_index_file) as tmp:
            counts = []
            for s, shard in enumerate(self._shards):
                shard.index.save(tmp / f"shard-{s:03d}")
                counts.append(shard.index.n_docs)
            write_manifest(tmp, self.n_shards, self.params, counts)
        # each shard was written into the temporary folder: hold the shards where they now lie,
        # so a later commit writes there
        from salience.search.bm25 import BM25

        return self._attach([LocalShard(BM25.load(path / f"shard-{s:03d}", verify=False))
                             for s in range(self.n_shards)], self.params, path)


def _documents_and_params(documents: Any, n_shards: int, params: dict, on_error: str, memory_mb: float,
                          stream: bool) -> tuple[Any, dict]:
    """The documents as records (read one at a time when ``stream`` or from a file) and the
    shards' BM25 parameters, every option checked before a document is read."""
    from salience.search.bm25 import BM25
    from salience.search.bulk import check_memory_mb
    from salience.io.documents import iter_documents, read_documents

    check_k(n_shards, "n_shards")
    params = BM25(**params).resolved_params()
    check_memory_mb(memory_mb)
    fields = tuple(params.get("fields", ("title", "text")))
    if isinstance(documents, (str, os.PathLike)) or (stream and not isinstance(documents, (list, tuple))):
        return iter_documents(documents, fields, on_error=on_error), params  # one at a time
    return read_documents(documents, fields, on_error=on_error), params


register("search", "sharded", ShardedIndex, "BM25 over shards routed by id hash, scored with the whole collection's "
                                            "statistics (the same ranking as one index), built and held locally or "
                                            "on Ray")

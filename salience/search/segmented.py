"""The segment-backed part of an index held in this process: the document store (ids,
positions, live documents, metadata, stored fields), segments, and the skeleton of
persistence (save, load, commit, merge, copy, sweep). :class:`~salience.search.BM25` and
:class:`~salience.search.Dense` are subclasses: each keeps its own data per document
(postings, vectors) and writes its own format; the service writes to either the same way.

A subclass provides:

* ``_has_data()``: whether anything was indexed;
* ``_add_data(docs, show_progress, n_jobs, executor)``: index a new segment's documents (the
  store's rows are added by the base afterwards);
* ``_after_change()``: what follows a change of the live documents (statistics, caches);
* ``_compact_data(keep)``: keep only the given positions' data (one segment);
* ``_copy_data(clone)``: give a copy its own mutable data;
* ``_save_to(path)``, ``_commit_to()`` and the class method ``_load_from(path, verify, **options)``:
  its on-disk format.
"""

from __future__ import annotations

import abc
import copy as _copy
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from salience.core.checks import check_n_jobs
from salience.exceptions import DuplicateIdError, IdMismatchError, InvalidParameterError, NotFittedError
from salience.search.filters import MetadataColumns
from salience.search.index import Index, check_prune_fraction
from salience.io.documents import Document, read_documents

__all__ = ["SegmentedIndex"]


class SegmentedIndex(Index):
    """Base of the indexes whose documents live in segments in this process (see the module
    docstring); :class:`~salience.search.Index` is the interface it implements."""

    def _reset_store(self) -> None:
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._live = np.zeros(0, dtype=bool)
        self._metadata: list[dict] = []
        self._stored: list[dict] | None = [] if self.store_documents else None
        # segments: [{"name": str | None (not yet on disk), "n_docs": int, "files": ...}]
        self._segments: list[dict] = []
        self._path: Path | None = None
        self._columns: MetadataColumns | None = None

    # ---- the subclass's part
    @abc.abstractmethod
    def _has_data(self) -> bool:
        """The subclass's part (see the class docstring)."""

    @abc.abstractmethod
    def _add_data(self, docs: list[Document], show_progress: bool, n_jobs: int, executor) -> None:
        """The subclass's part (see the class docstring)."""

    def _after_change(self) -> None:
        """Called after documents are added or deleted."""

    @abc.abstractmethod
    def _compact_data(self, keep: np.ndarray) -> None:
        """The subclass's part (see the class docstring)."""

    @abc.abstractmethod
    def _copy_data(self, clone: "SegmentedIndex") -> None:
        """The subclass's part (see the class docstring)."""

    @abc.abstractmethod
    def _save_to(self, path: Path) -> None:
        """The subclass's part (see the class docstring)."""

    @abc.abstractmethod
    def _commit_to(self) -> None:
        """The subclass's part (see the class docstring)."""

    # ---- the store
    @property
    def n_docs(self) -> int:
        """Number of live (not deleted) documents."""
        return int(self._live.sum())

    @property
    def ids(self) -> list[str]:
        """Ids of live documents in index order."""
        return [i for i, alive in zip(self._ids, self._live) if alive]

    @property
    def n_segments(self) -> int:
        """Number of segments (each :meth:`add` makes one until :meth:`merge`)."""
        return len(self._segments)

    def _require_index(self) -> None:
        if not self._has_data():
            raise NotFittedError(f"this {self.label} has no documents yet; call index(documents) or "
                                 f"{type(self).__name__}.load(path) first.")

    def __contains__(self, doc_id: object) -> bool:
        """Whether a live document has the id ``doc_id``."""
        return isinstance(doc_id, str) and doc_id in self._pos

    def _positions(self, doc_ids: Sequence[str]) -> list[int]:
        """Where each of ``doc_ids`` is; an unknown id is an error naming it."""
        if isinstance(doc_ids, str):
            raise InvalidParameterError("doc_ids must be a list of document ids.")
        positions = []
        for doc_id in doc_ids:
            pos = self._pos.get(str(doc_id))
            if pos is None:
                raise IdMismatchError(f"unknown document id {doc_id!r}.")
            positions.append(pos)
        return positions

    def position_count(self) -> int:
        """How many positions :meth:`position_codes` numbers from (0 to this, deleted ones too)."""
        return len(self._ids)

    def position_codes(self, doc_ids: Sequence[str]) -> np.ndarray | None:
        """Each of ``doc_ids``' position in this index as integers (what fusing the rankings of
        two indexes over the same documents keys on instead of the id strings), or ``None``
        when one of them is not a live document here."""
        try:
            return np.fromiter(map(self._pos.__getitem__, doc_ids), dtype=np.int64, count=len(doc_ids))
        except KeyError:
            return None

    def document(self, doc_id: str) -> dict:
        """Stored fields and metadata of a document."""
        self._require_index()
        [pos] = self._positions([doc_id])
        out = {"id": self._ids[pos]}
        if self._stored is not None:
            out.update(self._stored[pos])
        out.update(self._metadata[pos])
        return out

    def _filter_mask(self, where: Mapping | None) -> np.ndarray | None:
        if where is None:
            return None
        if self._columns is None:
            self._columns = MetadataColumns(self._metadata)
        return self._columns.mask(where)

    # ---- changing the documents
    def fit(self, documents: Any, *, show_progress: bool = False, on_error: str = "raise", n_jobs: int = 1,
            executor="local") -> "SegmentedIndex":
        """Index ``documents`` from scratch (an iterable, a jsonl / jsonl.gz file or a BEIR
        folder). ``on_error``: ``"raise"`` stops at invalid UTF-8 or JSON naming file and line;
        ``"replace"`` decodes invalid UTF-8 with U+FFFD; ``"skip"`` drops such records.
        ``n_jobs`` > 1 spreads the work over that many worker processes (``executor="local"``)
        or Ray tasks (``executor="ray"``, ``pip install 'salience[ray]'``; a running cluster
        when ``RAY_ADDRESS`` is set), or an executor object (``executor=RayExecutor(address=
        "auto")``, left open); the index is the same as with one process."""
        docs = read_documents(documents, self.fields_, on_error)
        if not docs:
            raise InvalidParameterError("cannot index an empty corpus: no documents were given.")
        self._reset()
        self._append_segment(docs, show_progress, n_jobs, executor)
        return self

    def add(self, documents: Any, *, show_progress: bool = False, on_error: str = "raise", n_jobs: int = 1,
            executor="local") -> "SegmentedIndex":
        """Add documents as a new segment without re-indexing the existing ones (options as for
        :meth:`fit`). On an index that was saved or loaded, :meth:`commit` writes it."""
        if not self._has_data():
            return self.fit(documents, show_progress=show_progress, on_error=on_error, n_jobs=n_jobs, executor=executor)
        docs = read_documents(documents, self.fields_, on_error)
        if docs:
            self._append_segment(docs, show_progress, n_jobs, executor)
        return self

    def _append_segment(self, docs: list[Document], show_progress: bool, n_jobs: int = 1, executor="local") -> None:
        n_jobs = check_n_jobs(n_jobs)
        seen: set[str] = set()
        for doc in docs:
            if doc.id in seen or doc.id in self._pos:
                raise DuplicateIdError(f"{doc.origin or 'a document'}: document id {doc.id!r} is "
                                       + ("already in the index" if doc.id in self._pos else "given twice")
                                       + "; every document needs a unique id.")
            seen.add(doc.id)
        self._add_data(docs, show_progress, n_jobs, executor)
        start = len(self._ids)
        for offset, doc in enumerate(docs):
            self._pos[doc.id] = start + offset
        self._ids.extend(d.id for d in docs)
        self._live = np.concatenate([self._live, np.ones(len(docs), dtype=bool)])
        self._metadata.extend(d.metadata for d in docs)
        if self._stored is not None:
            self._stored.extend(d.fields for d in docs)
        self._segments.append({"name": None, "n_docs": len(docs)})
        self._columns = None
        self._after_change()

    def delete(self, ids: Iterable[str] | str) -> "SegmentedIndex":
        """Delete documents by id; they stop counting at once. An unknown id is refused by name
        (nothing is deleted then)."""
        self._require_index()
        ids = [ids] if isinstance(ids, str) else [str(i) for i in ids]
        positions = []
        for doc_id in ids:
            pos = self._pos.get(str(doc_id))
            if pos is None or not self._live[pos]:
                raise IdMismatchError(f"cannot delete unknown document id {doc_id!r}.")
            positions.append(pos)
        for doc_id, pos in zip(ids, positions):
            self._live[pos] = False
            self._pos.pop(doc_id, None)  # an id listed twice is deleted once
        self._after_change()
        return self

    def prune(self, scores, *, fraction: float) -> list[str]:
        """Static pruning: delete the lowest-scored ``fraction`` (0 <= fraction < 1) of the live
        documents, by ``scores`` (:class:`~salience.Scores` over every live document's id: a
        query-agnostic quality score, e.g. a data-domain statistic); returns the ids deleted.
        The core's ``select_fraction`` keeps the rest (ties: the earlier document stays)."""
        from salience.core.scores import Scores
        from salience.core.select import select_fraction

        self._require_index()
        check_prune_fraction(fraction, "documents")
        if not isinstance(scores, Scores):
            raise InvalidParameterError(f"scores must be Scores over the documents' ids; got {type(scores).__name__}.")
        live = [doc_id for doc_id, alive in zip(self._ids, self._live) if alive]
        given = set(map(str, scores.ids))
        unknown = next((i for i in scores.ids if str(i) not in self._pos), None)
        if unknown is not None:
            raise IdMismatchError(f"scores name document {unknown!r}, which is not in the index.")
        missing = next((i for i in live if i not in given), None)
        if missing is not None:
            raise IdMismatchError(f"scores have no value for document {missing!r}: give one per live document.")
        if fraction == 0:
            return []
        kept = set(map(str, select_fraction(scores, fraction=1.0 - fraction).ids))
        pruned = [doc_id for doc_id in live if doc_id not in kept]
        self.delete(pruned)
        return pruned

    def copy(self) -> "SegmentedIndex":
        """An independent copy, for changing an index while this one keeps answering (a
        service's writer): what ``add``, ``delete``, ``commit`` and ``merge`` change in place
        is copied; the stored documents and metadata rows, which they never change, are shared."""
        clone = _copy.copy(self)
        clone._live = self._live.copy()
        clone._ids, clone._pos, clone._metadata = list(self._ids), dict(self._pos), list(self._metadata)
        clone._stored = None if self._stored is None else list(self._stored)
        clone._segments = [dict(segment) for segment in self._segments]
        self._copy_data(clone)
        return clone

    def _compact(self) -> None:
        """One segment of the live documents."""
        if self._live.all() and len(self._segments) == 1:
            return
        keep = np.flatnonzero(self._live)
        self._compact_data(keep)
        self._ids = [self._ids[i] for i in keep]
        self._pos = {doc_id: i for i, doc_id in enumerate(self._ids)}
        self._live = np.ones(len(keep), dtype=bool)
        self._metadata = [self._metadata[i] for i in keep]
        if self._stored is not None:
            self._stored = [self._stored[i] for i in keep]
        self._segments = [{"name": None, "n_docs": len(keep)}]
        self._columns = None
        self._after_change()

    # ---- persistence
    def save(self, path: str | os.PathLike) -> "SegmentedIndex":
        """Write the index (live documents, one segment) to ``path`` atomically; files a user
        put in an index folder are kept."""
        self._require_index()
        self._compact()
        self._save_to(Path(path))
        return self

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True, **options) -> "SegmentedIndex":
        """Open a saved index; ``verify`` checks each file's size and CRC32 against the manifest."""
        return cls._load_from(Path(path), verify, **options)

    @classmethod
    @abc.abstractmethod
    def _load_from(cls, path: Path, verify: bool, **options) -> "SegmentedIndex":
        """The subclass's part (see the class docstring)."""

    def commit(self) -> "SegmentedIndex":
        """Write segments added and documents deleted since the last save/commit to :attr:`path`."""
        if self._path is None:
            raise NotFittedError("this index has no folder yet; call save(path) first.")
        self._commit_to()
        return self

    def reopen(self, *, verify: bool = False) -> "SegmentedIndex":
        """The committed state of this index's folder, as another process may have left it,
        as a new index (this one unchanged): BM25 reads only the segments and deletions
        committed since this index was loaded or committed, when nothing else changed."""
        if self._path is None:
            raise NotFittedError("this index has no folder yet; call save(path) first.")
        return self._reopen(verify)

    def _reopen(self, verify: bool) -> "SegmentedIndex":
        return type(self).load(self._path, verify=verify)

    def merge(self) -> "SegmentedIndex":
        """Merge all segments into one and drop deleted documents (rewrites the folder if saved)."""
        self._require_index()
        self._compact()
        if self._path is not None:
            self._save_to(self._path)
        return self

    def sweep_leftovers(self) -> None:
        """Remove what killed writers left in this index's folder: temporaries, and segment
        folders that a commit renamed into place but no manifest lists (nothing for an index
        never saved)."""
        from salience.search.store import sweep_leftovers

        if self._path is not None:
            sweep_leftovers(self._path, [segment["name"] for segment in self._segments if segment.get("name")])

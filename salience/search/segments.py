"""Reading a BM25 index folder (the format :mod:`salience.search.store` writes): loading it
whole, or reopening it after another process's commits by reading only what they added.
Packed segments stay memory-mapped when one segment without deletions makes the index."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse as sp

from salience.exceptions import CorruptIndexError
from salience.search.block_bounds import BlockBounds, block_bound_files
from salience.search.packed import PackedPostings, packed_files
from salience.search.store import (FORMAT, FORMAT_VERSION, MANIFEST, _load_array, _manifest_digest, _read_json,
                                   _read_jsonl, read_manifest, verify_files)
from salience.text.tokenize import TermEncoder, Tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from salience.search.bm25 import BM25

__all__ = ["load_index", "reopen_index"]


def _checked_manifest(path: Path) -> dict:
    """The BM25 manifest of ``path``, its format, version and checksum checked."""
    manifest_path, manifest = read_manifest(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptIndexError(f"{manifest_path}: not a salience BM25 manifest.")
    version = manifest.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CorruptIndexError(
            f"{manifest_path}: format version {version!r} is newer than this salience reads ({FORMAT_VERSION}); upgrade salience."
        )
    if version not in (1, 2, 3, 4) or isinstance(version, bool):
        raise CorruptIndexError(f"{manifest_path}: unknown format version {version!r}; the manifest is damaged.")
    if version >= 2:
        body = {key: value for key, value in manifest.items() if key != "checksum"}
        if manifest.get("checksum") != _manifest_digest(body):
            raise CorruptIndexError(f"{manifest_path}: checksum mismatch; the manifest is damaged.")
    return manifest


@contextmanager
def _inconsistent_manifest_named(path: Path):
    """A version-1 manifest has no checksum: damage shows up as inconsistent content."""
    try:
        yield
    except CorruptIndexError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as err:
        raise CorruptIndexError(f"{path / MANIFEST}: inconsistent manifest ({type(err).__name__}: {err}); "
                                "the index is damaged.") from None


def load_index(cls, path: Path, verify: bool = True) -> "BM25":
    manifest = _checked_manifest(path)
    with _inconsistent_manifest_named(path):
        return _load_checked(cls, path, manifest, verify)


class _Segment(NamedTuple):
    """One segment folder as read: its postings in the index's vocabulary and its documents."""
    term_rows: np.ndarray  # the index's term id of each row of the segment's postings
    indptr: np.ndarray
    docs: np.ndarray | None  # None when packed
    tf: np.ndarray | None
    packed: PackedPostings | None
    lengths: np.ndarray
    ids: list
    metadata: list
    stored: list | None
    live: np.ndarray
    record: dict  # the segment as the index lists it

    def tf_columns(self, n_terms: int) -> sp.csr_matrix:
        """The segment's postings as (all terms x its documents) term counts."""
        rows = np.repeat(self.term_rows, np.diff(self.indptr))
        docs, tf = self.packed.unpack() if self.packed is not None else (self.docs, self.tf)
        return sp.coo_matrix((np.asarray(tf, dtype=np.float32), (rows, np.asarray(docs, dtype=np.int64))),
                             shape=(n_terms, len(self.ids))).tocsr()


def _read_segment(path: Path, segment: dict, deleted: dict, encoder: TermEncoder, verify: bool,
                  stored: bool) -> _Segment:
    """Read and check one segment listed in the manifest; its new terms join ``encoder``."""
    folder = path / segment["name"]
    n_docs = int(segment["n_docs"])
    if verify:
        verify_files(folder, segment["files"])
    terms = _read_json(folder / "terms.json")
    ids = _read_json(folder / "ids.json")
    indptr = _load_array(folder / "postings_indptr.npy")
    lengths = _load_array(folder / "doc_lengths.npy")
    where = folder / "postings_indptr.npy"
    if indptr.ndim != 1 or len(indptr) != len(terms) + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise CorruptIndexError(f"{where}: postings do not match terms.json; the index is damaged.")
    if len(ids) != n_docs or len(lengths) != n_docs:
        raise CorruptIndexError(f"{folder / 'ids.json'}: {len(ids)} ids and {len(lengths)} lengths for the "
                                f"manifest's {n_docs} documents; the index is damaged.")
    packed = docs = tf = None
    if "postings_docs_width.npy" in segment.get("files", {}) or (folder / "postings_docs_width.npy").is_file():
        arrays = {name: _load_array(folder / name) for name in packed_files()}
        try:
            packed = (PackedPostings.check(indptr, arrays, n_docs) if verify else PackedPostings(indptr, arrays))
        except ValueError as err:
            raise CorruptIndexError(f"{folder}: {err}; the index is damaged.") from None
        listed = segment.get("files")
        if all(name in listed if listed else (folder / name).is_file() for name in block_bound_files()):
            bounds = {name: _load_array(folder / name) for name in block_bound_files()}
            try:
                packed.bounds = BlockBounds.read(bounds, packed.counts, n_docs, verify)
            except ValueError as err:
                raise CorruptIndexError(f"{folder}: {err}; the index is damaged.") from None
    else:  # formats 1 and 2
        docs = _load_array(folder / "postings_docs.npy")
        tf = _load_array(folder / "postings_tf.npy")
        if indptr[-1] != len(docs) or len(tf) != len(docs):
            raise CorruptIndexError(f"{where}: postings do not match terms.json; the index is damaged.")
        if verify and len(docs) and (docs.min() < 0 or docs.max() >= n_docs):
            raise CorruptIndexError(f"{folder / 'postings_docs.npy'}: document numbers do not match the manifest.")
    term_rows = np.fromiter(map(encoder.add_term, terms), dtype=np.int64, count=len(terms))
    live = np.ones(n_docs, dtype=bool)
    dead = deleted.get(segment["name"], [])
    if dead:
        live[np.asarray(dead, dtype=np.int64)] = False
    return _Segment(term_rows, indptr, docs, tf, packed, lengths, ids, _read_jsonl(folder / "metadata.jsonl", n_docs),
                    _read_jsonl(folder / "documents.jsonl", n_docs) if stored else None, live,
                    {key: segment[key] for key in ("name", "n_docs", "files", "scored_with") if key in segment})


def _append_rows(index: "BM25", segment: _Segment) -> None:
    """The store's rows of a segment read from disk: ids, metadata, stored fields, live flags."""
    start = len(index._ids)
    index._ids.extend(segment.ids)
    index._metadata.extend(segment.metadata)
    if index._stored is not None:
        index._stored.extend(segment.stored)
    index._live = np.concatenate([index._live, segment.live])
    index._segments.append(segment.record)
    for offset in np.flatnonzero(segment.live).tolist():
        index._pos[segment.ids[offset]] = start + offset


def _check_unique_ids(index: "BM25") -> None:
    """Every live document's id names one document (the store's positions were filled by id)."""
    if len(index._pos) != int(index._live.sum()):
        raise CorruptIndexError(f"{index._path / MANIFEST}: two live documents share an id; the index is damaged.")


def _load_checked(cls, path: Path, manifest: dict, verify: bool) -> "BM25":
    manifest_path = path / MANIFEST
    try:
        params = dict(manifest["params"])
        tokenizer = Tokenizer.from_config(manifest["tokenizer"])
        segments = list(manifest["segments"])
        deleted = dict(manifest.get("deleted", {}))
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptIndexError(f"{manifest_path}: incomplete manifest ({err}).") from None
    index = cls(tokenizer=tokenizer, **params)
    encoder = TermEncoder(tokenizer)
    read = [_read_segment(path, segment, deleted, encoder, verify, index._stored is not None) for segment in segments]
    for segment in read:
        _append_rows(index, segment)
    index._doc_len = np.concatenate([index._doc_len] + [np.asarray(s.lengths, dtype=np.float32) for s in read])
    index._encoder = encoder
    index._path = path
    _check_unique_ids(index)
    n_terms = len(encoder.terms)
    only = read[0] if len(read) == 1 else None
    if only is not None and only.packed is not None and not deleted and np.array_equal(only.term_rows, np.arange(n_terms)):
        index._use_packed(only.packed)  # one packed segment is searched as it is, memory-mapped
        return index
    if only is not None and only.packed is None:  # one segment is used as it is, memory-mapped
        index._tf = sp.csr_matrix((np.asarray(only.tf, dtype=np.float32), np.asarray(only.docs), np.asarray(only.indptr)),
                                  shape=(n_terms, len(index._ids)), copy=False)
    else:
        index._tf = sp.hstack([s.tf_columns(n_terms) for s in read], format="csr") if read else \
            sp.csr_matrix((n_terms, 0), dtype=np.float32)
        index._tf.sort_indices()
    stored = _stored_scores(index, path, segments, deleted)
    if stored is not None:
        index._adopt_stored_scores(stored)
    else:
        index._refresh()
    return index


def reopen_index(index: "BM25", verify: bool = False) -> "BM25":
    """The folder's committed state as a new index, reading only what changed since ``index``
    was loaded or committed when another process's commits only added segments and deleted
    documents; a merge or different parameters reload the folder whole. ``index`` is unchanged."""
    path = index._path
    manifest = _checked_manifest(path)
    with _inconsistent_manifest_named(path):
        listed, deleted = list(manifest["segments"]), dict(manifest.get("deleted", {}))
        known = [segment.get("name") for segment in index._segments]
        if (index._shared_stats is not None or None in known or len(listed) < len(known)
                or [segment["name"] for segment in listed[:len(known)]] != known
                or manifest["params"] != {k: v for k, v in index.resolved_params().items() if k != "tokenizer"}
                or manifest["tokenizer"] != index.tokenizer_.get_config()):
            return _load_checked(type(index), path, manifest, verify)
        new = index.copy()
        for record in listed[len(known):]:
            segment = _read_segment(path, record, deleted, new._encoder, verify, new._stored is not None)
            new._append_columns(segment.tf_columns(len(new._encoder.terms)), np.asarray(segment.lengths, dtype=np.float32))
            _append_rows(new, segment)
        start = 0
        for record in listed[:len(known)]:  # deletions committed since (a document never comes back)
            for offset in deleted.get(record["name"], []):
                position = start + int(offset)
                if new._live[position]:
                    new._live[position] = False
                    new._pos.pop(new._ids[position], None)
            start += int(record["n_docs"])
        _check_unique_ids(new)
        new._columns = None
        new._refresh()
        return new


def scoring_record(index: "BM25") -> dict:
    """The parameters per-posting scores depend on, as a segment's ``scored_with`` records them."""
    return {"variant": index.variant, "k1": index.k1, "b": index.b, "delta": index.delta}


def _stored_scores(index: "BM25", path: Path, segments: list[dict], deleted: dict) -> np.ndarray | None:
    """The saved per-posting scores (``postings_scores.npy``, written by a bulk build), when
    they hold for the index as loaded: one segment, nothing deleted, scored with its
    parameters."""
    if len(segments) != 1 or deleted or segments[0].get("scored_with") != scoring_record(index):
        return None
    folder = path / segments[0]["name"]
    if "postings_scores.npy" not in segments[0]["files"]:
        return None
    values = _load_array(folder / "postings_scores.npy")
    if values.shape != index._tf.data.shape or values.dtype != np.float32:
        raise CorruptIndexError(f"{folder / 'postings_scores.npy'}: {values.shape} {values.dtype} scores for "
                                f"{index._tf.data.shape[0]} postings; the index is damaged.")
    return values

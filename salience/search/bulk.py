"""Building a BM25 index of any size in bounded memory, as Lucene and Tantivy do: documents
are tokenized a batch at a time, their postings gathered until a memory budget fills, then
flushed to disk as a *run* (terms x documents, sorted by term); at the end the runs are merged
on disk a block of terms at a time (k-way, streaming) into one segment of the usual format,
its postings packed (:mod:`salience.search.packed`), which search reads memory-mapped a query
term at a time.

Work happens in ``OUT.building/`` beside the output: ``state.json`` records the runs flushed,
the documents they hold and the vocabulary, replaced atomically after each run, so a build
that is interrupted resumes from its last run when started again over the same source file.
The finished segment is moved into ``OUT`` as a save is (the manifest is the commit point)
and the work folder removed.

Memory: a batch's tokens (about 16 bytes each, while tokenizing), the run being gathered (8
bytes per posting, twice while it is flushed), the vocabulary, and per document a float32
length and a 64-bit id hash (for duplicate ids); the merge reads and writes a block of about
``memory_mb / 64`` postings at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from salience.exceptions import DuplicateIdError, InputFormatError, InvalidParameterError, SalienceError
from salience.io.files import atomic_write_text, check_output_path, fsync_dir
from salience.parallel import progress_bar
from salience.search import store
from salience.search.packed import PackedWriter
from salience.io.documents import EmptyDocuments, iter_documents, resolve_corpus_path

__all__ = ["build", "check_memory_mb", "DEFAULT_MEMORY_MB", "BUILD_STATE"]

DEFAULT_MEMORY_MB = 1024
BUILD_STATE = "salience.bm25-build"
#: bytes a token occupies while its batch is tokenized and counted
_BYTES_PER_TOKEN = 40
#: bytes a posting of the run being gathered occupies (docs int32, tf float32, twice when flushed)
_BYTES_PER_POSTING = 24
#: bytes a posting occupies in the merge (keys, order, gathered copies, the packing's gaps and masks)
_MERGE_BYTES_PER_POSTING = 80
#: characters per token, to size a batch before it is tokenized (English averages about 6)
_CHARS_PER_TOKEN = 4


def _work_folder(out: Path) -> Path:
    return out.with_name(out.name + ".building")


def _source_fingerprint(documents: Any) -> dict | None:
    """What identifies a source file for resuming (None: an iterable cannot be resumed)."""
    if not isinstance(documents, (str, os.PathLike)):
        return None
    path = resolve_corpus_path(documents).resolve()
    stat = path.stat()
    return {"path": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


class _Runs:
    """The work folder: runs flushed so far and the state that lists them."""

    def __init__(self, folder: Path, header: dict):
        self.folder, self.header = folder, header
        self.runs: list[dict] = []
        self.terms: list[str] = []

    @classmethod
    def open(cls, folder: Path, header: dict, resume: bool) -> "_Runs":
        """The work folder, resumed when its state matches ``header`` (same source file and
        parameters), else started afresh; a folder of that name that is not a build's is refused."""
        state_path = folder / "state.json"
        if folder.exists():
            try:
                state = json.loads(state_path.read_text(encoding="utf-8"))
                ours = state.get("format") == BUILD_STATE
            except (OSError, ValueError, AttributeError):
                state, ours = None, False
            if not ours and any(folder.iterdir()):
                raise InvalidParameterError(f"{folder}: exists and is not a salience build's work folder; move it away.")
            runs = cls(folder, header)
            if ours and resume and header["source"] is not None and all(state.get(k) == v for k, v in header.items()):
                runs.runs, runs.terms = state["runs"], state["terms"]
                return runs
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        runs = cls(folder, header)
        runs._save_state()
        return runs

    @property
    def n_docs(self) -> int:
        return sum(run["n_docs"] for run in self.runs)

    def _save_state(self) -> None:
        atomic_write_text(self.folder / "state.json",
                          json.dumps({**self.header, "runs": self.runs, "terms": self.terms}, ensure_ascii=False))

    def flush(self, pieces: list[sp.csr_matrix], lengths: list[np.ndarray], hashes: list[np.ndarray],
              rows: dict[str, list[str]], terms: list[str]) -> None:
        """Write the gathered batches as the next run (a folder renamed into place), then the state."""
        n_terms = len(terms)
        for piece in pieces:
            piece.resize((n_terms, piece.shape[1]))
        counts = sp.hstack(pieces, format="csr") if len(pieces) > 1 else pieces[0]
        counts.sort_indices()
        name = f"run-{len(self.runs):06d}"
        tmp = self.folder / (name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        first_doc = self.n_docs
        counts.indptr.astype(np.int64).tofile(tmp / "indptr.bin")
        (counts.indices.astype(np.int64) + first_doc).astype(np.int32).tofile(tmp / "docs.bin")
        counts.data.astype(np.float32).tofile(tmp / "tf.bin")
        np.concatenate(lengths).astype(np.float32).tofile(tmp / "lengths.bin")
        np.concatenate(hashes).astype(np.int64).tofile(tmp / "hashes.bin")
        for file_name, lines in rows.items():
            with open(tmp / file_name, "w", encoding="utf-8") as fh:
                fh.writelines(lines)
        for path in tmp.iterdir():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, self.folder / name)
        fsync_dir(self.folder)
        self.runs.append({"name": name, "n_docs": counts.shape[1], "n_terms": n_terms, "nnz": int(counts.nnz)})
        self.terms = list(terms)
        self._save_state()

    def array(self, run: dict, file_name: str, dtype, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Items ``start:stop`` of a run's binary file, read (not mapped: a merge touches each once)."""
        dtype = np.dtype(dtype)
        path = self.folder / run["name"] / file_name
        count = -1 if stop is None else stop - start
        return np.fromfile(path, dtype=dtype, count=count, offset=start * dtype.itemsize)


class _DuplicateIds:
    """Duplicate ids across a build, by 64-bit hash (the flushed ids stay on disk): sorted
    hashes per flushed run and per batch of the run being gathered; a hash seen twice is
    confirmed on the ids themselves and named."""

    def __init__(self, runs: _Runs):
        self.runs = runs
        self.flushed = [np.sort(runs.array(run, "hashes.bin", np.int64)) for run in runs.runs]
        self.pending: list[np.ndarray] = []

    def check(self, hashes: np.ndarray, docs: list, gathered_ids: list[str]) -> None:
        order = np.argsort(hashes, kind="stable")
        ranked = hashes[order]
        for i in np.flatnonzero(ranked[1:] == ranked[:-1]):
            if docs[order[i]].id == docs[order[i + 1]].id:
                self._refuse(docs[order[i + 1]])
        for part, flushed in [(part, True) for part in self.flushed] + [(part, False) for part in self.pending]:
            where = np.minimum(np.searchsorted(part, hashes), len(part) - 1)
            for i in np.flatnonzero(part[where] == hashes) if len(part) else ():
                doc = docs[i]
                if doc.id in (self._flushed_ids() if flushed else set(gathered_ids)):
                    self._refuse(doc)
        self.pending.append(ranked)

    def flushed_run(self) -> None:
        """The pending batches became a run."""
        if self.pending:
            self.flushed.append(np.sort(np.concatenate(self.pending)))
        self.pending = []

    @staticmethod
    def _refuse(doc) -> None:
        raise DuplicateIdError(f"{doc.origin or 'a document'}: document id {doc.id!r} is given twice; every "
                               "document needs a unique id.")

    def _flushed_ids(self) -> set[str]:
        ids: set[str] = set()
        for run in self.runs.runs:  # a hash seen in a flushed run (a duplicate, or a rare collision)
            with open(self.runs.folder / run["name"] / "ids.jsonl", encoding="utf-8") as fh:
                ids.update(json.loads(line) for line in fh)
        return ids


def build(index, documents: Any, out, *, memory_mb: float = DEFAULT_MEMORY_MB, on_error: str = "raise",
          n_jobs: int = 1, executor="local", show_progress: bool = False, resume: bool = True) -> Path:
    """Index ``documents`` into the folder ``out`` with ``index``'s parameters (a
    :class:`~salience.search.BM25` with no documents), holding at most about ``memory_mb``
    megabytes of postings at a time; return the folder. See the module docstring."""
    from salience.core.checks import check_n_jobs

    check_memory_mb(memory_mb)
    n_jobs = check_n_jobs(n_jobs)
    index.tokenizer_.get_config()  # fail before any work if the tokenizer cannot be saved
    inputs = [documents] if isinstance(documents, (str, os.PathLike)) else []
    out = check_output_path(out, inputs, what="index", option="out", is_own=store.is_own_output)
    budget = memory_mb * 2**20
    header = {"format": BUILD_STATE, "source": _source_fingerprint(documents), "params": store.manifest_text(
        index.resolved_params(), index.tokenizer_.get_config(), 0, [], {})}
    runs = _Runs.open(_work_folder(out), header, resume)
    try:
        _index_runs(index, runs, documents, budget, memory_mb, on_error, n_jobs, executor, show_progress)
    except SalienceError:
        # bad input (a duplicate id, a document over the budget, no text): the source must change,
        # so nothing is worth resuming; an interruption or a crash keeps the runs
        shutil.rmtree(runs.folder, ignore_errors=True)
        raise
    _merge(index, runs, out, budget, show_progress)
    shutil.rmtree(runs.folder, ignore_errors=True)
    return out


def _index_runs(index, runs: _Runs, documents, budget: float, memory_mb: float, on_error: str, n_jobs: int,
                executor, show_progress: bool) -> None:
    """Tokenize the documents a batch at a time and flush their postings as runs."""
    encoder = index._encoder
    for term in runs.terms:
        encoder.add_term(term)
    duplicates = _DuplicateIds(runs)
    stream = iter_documents(documents, index.fields_, on_error)
    empty = EmptyDocuments(index.fields_)
    skip = runs.n_docs
    gathered = _Gathered()
    batch_chars = max(1, int(budget / 4 / _BYTES_PER_TOKEN * _CHARS_PER_TOKEN))
    runner = None
    if n_jobs > 1 or executor != "local":
        from salience.parallel import make_executor

        runner = make_executor(executor, n_jobs)
    try:
        with progress_bar(None, "indexing", show_progress, unit="doc") as bar:
            bar.update(skip)
            for batches in _batches(stream, skip, batch_chars, max(1, n_jobs)):
                for docs, encoded in zip(batches, _encode(index, batches, runner)):
                    for doc in docs:
                        empty.see(doc)
                    _check_budget(docs, encoded, budget, memory_mb)
                    counts, lengths = index.term_counts(encoded, len(docs))
                    hashes = np.array([_id_hash(d.id) for d in docs], dtype=np.int64)
                    duplicates.check(hashes, docs, gathered.ids)
                    gathered.add(docs, counts, lengths, hashes, index.store_documents)
                    bar.update(len(docs))
                    if gathered.postings * _BYTES_PER_POSTING >= budget / 2:
                        runs.flush(*gathered.flushable(), encoder.terms)
                        duplicates.flushed_run()
                        gathered = _Gathered()
            if gathered.docs:
                runs.flush(*gathered.flushable(), encoder.terms)
    finally:
        if runner is not None:
            runner.close()
    if not runs.runs:
        raise InvalidParameterError("cannot index an empty corpus: no documents were given.")
    empty.check(stacklevel=4)


def check_memory_mb(memory_mb) -> float:
    """A memory budget in megabytes: a finite number > 0."""
    from salience.core.params import Interval, check_params

    check_params("the build", {"memory_mb": memory_mb}, {"memory_mb": [Interval("real", 0, closed="neither")]})
    return float(memory_mb)


class _Gathered:
    """The batches of the run being gathered."""

    def __init__(self):
        self.pieces, self.lengths, self.hashes = [], [], []
        self.ids: list[str] = []
        self.rows: dict[str, list[str]] = {"ids.jsonl": [], "metadata.jsonl": [], "documents.jsonl": []}
        self.postings = self.docs = 0

    def add(self, docs, counts, lengths, hashes, store_documents: bool) -> None:
        self.pieces.append(counts)
        self.lengths.append(lengths)
        self.hashes.append(hashes)
        self.ids.extend(d.id for d in docs)
        self.rows["ids.jsonl"].extend(json.dumps(d.id, ensure_ascii=False) + "\n" for d in docs)
        self.rows["metadata.jsonl"].extend(json.dumps(d.metadata, ensure_ascii=False, default=str) + "\n" for d in docs)
        if store_documents:
            self.rows["documents.jsonl"].extend(json.dumps(d.fields, ensure_ascii=False) + "\n" for d in docs)
        self.postings += counts.nnz
        self.docs += len(docs)

    def flushable(self):
        return self.pieces, self.lengths, self.hashes, self.rows


def _batches(stream, skip: int, batch_chars: int, group: int):
    """Lists of ``group`` batches of documents of about ``batch_chars`` characters each, after
    the first ``skip`` documents (flushed by an earlier, interrupted build)."""
    for _ in range(skip):
        if next(stream, None) is None:
            raise InputFormatError(f"the source holds fewer documents than the {skip} an interrupted build indexed; "
                                   "it changed: build again with resume=False.")
    batches, batch, chars = [], [], 0
    for doc in stream:
        batch.append(doc)
        chars += sum(len(v) for v in doc.fields.values()) + 1
        if chars >= batch_chars:
            batches.append(batch)
            batch, chars = [], 0
            if len(batches) == group:
                yield batches
                batches = []
    if batch:
        batches.append(batch)
    if batches:
        yield batches


def _encode(index, batches, runner) -> list:
    """Each batch's fields as (term ids, document positions) in the index's vocabulary,
    tokenized here or by the executor's workers (each with a vocabulary of its own, mapped
    onto the index's in batch order, as a parallel in-memory build does)."""
    encoder = index._encoder
    if runner is None:
        return [[encoder.encode_batch((d.fields[name] for d in docs), grow=True) for name in index.fields_]
                for docs in batches]
    from salience.search.postings import encode_shard, in_vocabulary

    results = runner.map(encode_shard, [(index.tokenizer_, [[d.fields[name] for d in docs] for name in index.fields_])
                                        for docs in batches])
    return [in_vocabulary(encoder, terms, fields) for terms, fields in results]


def _check_budget(docs, encoded, budget: float, memory_mb: float) -> None:
    """A document whose postings alone exceed the budget cannot be indexed within it."""
    tokens = np.zeros(len(docs), dtype=np.int64)
    for _, doc_index in encoded:
        tokens += np.bincount(doc_index, minlength=len(docs))
    largest = int(tokens.argmax()) if len(tokens) else 0
    if len(tokens) and tokens[largest] * _BYTES_PER_TOKEN > budget:
        need = tokens[largest] * _BYTES_PER_TOKEN / 2**20
        raise InvalidParameterError(
            f"memory_mb={memory_mb:g} is too small for document {docs[largest].id!r} ({int(tokens[largest]):,} "
            f"terms): give at least {need:.3g} MB (--memory-mb {max(need, 1):.0f}).")


def _merge(index, runs: _Runs, out: Path, budget: float, show_progress: bool) -> None:
    """The runs merged a block of terms at a time into one segment, each posting scored."""
    n_terms = len(runs.terms)
    counts = np.zeros(n_terms, dtype=np.int64)
    run_indptr = []
    for run in runs.runs:
        indptr = runs.array(run, "indptr.bin", np.int64)
        counts[: len(indptr) - 1] += np.diff(indptr)
        run_indptr.append(np.concatenate([indptr, np.full(n_terms - run["n_terms"], indptr[-1])]))
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    lengths = np.concatenate([runs.array(run, "lengths.bin", np.float32) for run in runs.runs])
    n_docs = len(lengths)
    index_dtype = np.int32 if nnz < 2**31 - 1 else np.int64
    segment = runs.folder / "segment"
    shutil.rmtree(segment, ignore_errors=True)
    segment.mkdir()
    np.save(segment / "postings_indptr.npy", indptr.astype(index_dtype))
    np.save(segment / "doc_lengths.npy", lengths)
    (segment / "terms.json").write_text(json.dumps(runs.terms, ensure_ascii=False), encoding="utf-8")
    block = max(1, int(budget / _MERGE_BYTES_PER_POSTING))
    writer = PackedWriter(segment, lengths)
    try:
        with progress_bar(nnz, "merging", show_progress, unit="posting") as bar:
            first = 0
            while first < n_terms:
                # terms [first, last) hold about ``block`` postings (at least one term)
                last = max(first + 1, int(np.searchsorted(indptr, indptr[first] + block, side="right")) - 1)
                last = min(last, n_terms)
                keys, docs, tf = [np.zeros(0, dtype=np.int32)], [np.zeros(0, dtype=np.int32)], [np.zeros(0, dtype=np.float32)]
                for run, starts in zip(runs.runs, run_indptr):
                    lo, hi = int(starts[first]), int(starts[last])
                    if hi > lo:
                        keys.append(np.repeat(np.arange(first, last, dtype=np.int32), np.diff(starts[first:last + 1])))
                        docs.append(runs.array(run, "docs.bin", np.int32, lo, hi))
                        tf.append(runs.array(run, "tf.bin", np.float32, lo, hi))
                # runs hold increasing document numbers: a stable sort by term keeps each term's
                # postings in document order
                order = np.argsort(np.concatenate(keys), kind="stable")
                writer.write(counts[first:last], np.concatenate(docs)[order], np.concatenate(tf)[order])
                bar.update(len(order))
                first = last
    except BaseException:
        writer.abandon()
        raise
    writer.close()
    _join_rows(runs, segment, index.store_documents)
    files = store.file_table(segment)

    def move_segment(folder: Path) -> dict:
        folder.mkdir(parents=True, exist_ok=True)
        for path in segment.iterdir():
            os.replace(path, folder / path.name)
        return files

    def manifest(segments: list[dict]) -> str:
        return store.manifest_text(index.resolved_params(), index.tokenizer_.get_config(), n_docs, segments, {})

    store.save_whole(out, n_docs, move_segment, manifest, store.is_own_output)


def _join_rows(runs: _Runs, segment: Path, store_documents: bool) -> None:
    """The runs' ids (as one JSON list), metadata and stored documents, concatenated in order."""
    with open(segment / "ids.json", "w", encoding="utf-8") as out:
        out.write("[")
        first = True
        for run in runs.runs:
            with open(runs.folder / run["name"] / "ids.jsonl", encoding="utf-8") as fh:
                for line in fh:
                    out.write(("" if first else ",") + line.rstrip("\n"))
                    first = False
        out.write("]")
    names = ["metadata.jsonl"] + (["documents.jsonl"] if store_documents else [])
    for name in names:
        with open(segment / name, "wb") as out:
            for run in runs.runs:
                with open(runs.folder / run["name"] / name, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 20)

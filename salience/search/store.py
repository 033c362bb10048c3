"""On-disk format of a BM25 index (format version 4).

::

    INDEX/
      manifest.json           format, version, parameters, tokenizer, segments, deletions,
                              and the size and CRC32 of every file
      seg-000000/
        terms.json            the segment's terms (row i of the postings)
        postings_indptr.npy   row pointers (CSR, terms x documents)
        postings_docs_width.npy, postings_docs_{1,2,4}.npy
                              document numbers within the segment, as gaps, packed per term
                              (:mod:`salience.search.packed`)
        postings_tf_width.npy, postings_tf_{1,2,4}.npy
                              field-weighted term frequencies, packed per term
        postings_block_*.npy  each block of 128 postings' last document and the frontier
                              that bounds its scores (:mod:`salience.search.block_bounds`)
        doc_lengths.npy       field-weighted document length (float32)
        ids.json              document ids
        metadata.jsonl        one JSON object per document
        documents.jsonl       stored fields (when store_documents)

Versions 1 and 2 stored ``postings_docs.npy`` (int32) and ``postings_tf.npy`` (float32)
unpacked, and a bulk build of version 2 also ``postings_scores.npy``: they still load. A
segment of version 3 has no block bounds: it loads and is searched without pruning.
Arrays are ``.npy`` files opened memory-mapped. A full save builds the folder under a temporary
name and renames it into place; a commit writes each new segment the same way and then replaces
``manifest.json`` atomically, which is the single commit point: a crash leaves the previous
manifest and so the previous index.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from salience.exceptions import CorruptIndexError
from salience.io.files import atomic_directory, atomic_write_text, fsync_dir, owned_files
from salience.search.formats import BM25_FORMAT, MANIFEST, is_bm25_folder, is_dense_folder, is_sharded_folder
from salience.search.packed import write_packed

if TYPE_CHECKING:  # pragma: no cover
    from salience.search.bm25 import BM25

FORMAT = BM25_FORMAT
# 2: the manifest carries a SHA-256 of its own content ("checksum"); version 1 manifests
# (without one) still load. 3: postings packed (salience.search.packed). 4: block bounds for
# dynamic pruning (salience.search.block_bounds).
FORMAT_VERSION = 4
#: the names of the folders an index owns inside its folder; anything else there is the user's
SEGMENT_NAME = re.compile(r"seg-\d{6}")


def _manifest_digest(body: dict) -> str:
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


#: the files an index folder of any kind (BM25, dense, sharded) owns; anything else there is the
#: user's and stays when the folder is written over (:func:`salience.io.files.owned_files`)
INDEX_FILES = ("manifest.json", "shards.json", ".part-*", "seg-[0-9]*/*", "shard-[0-9]*/", "shard-[0-9]*/manifest.json",
               "shard-[0-9]*/seg-[0-9]*/*")
owns_index_file = owned_files(INDEX_FILES)


def is_own_output(path: Path) -> bool:
    """Whether a save may replace ``path``: an index folder of any kind, or an empty folder."""
    return path.is_dir() and (is_bm25_folder(path) or is_dense_folder(path) or is_sharded_folder(path)
                              or not any(path.iterdir()))


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            crc = zlib.crc32(chunk, crc)
    return crc


def _write_segment(index: "BM25", folder: Path, start: int, stop: int) -> dict:
    """Write documents [start, stop) of ``index`` (all live) into ``folder``; return its file table."""
    folder.mkdir(parents=True, exist_ok=True)
    tf = index._tf[:, start:stop].tocsr()
    used = np.flatnonzero(np.diff(tf.indptr) > 0)
    tf = tf[used].tocsr()
    tf.sort_indices()
    index_dtype = np.int32 if tf.nnz < 2**31 - 1 else np.int64
    np.save(folder / "postings_indptr.npy", tf.indptr.astype(index_dtype))
    lengths = index._doc_len[start:stop].astype(np.float32)
    write_packed(folder, np.diff(tf.indptr), tf.indices, tf.data, lengths)
    np.save(folder / "doc_lengths.npy", lengths)
    terms = index._encoder.terms
    (folder / "terms.json").write_text(json.dumps([terms[t] for t in used], ensure_ascii=False), encoding="utf-8")
    write_document_rows(index, folder, start, stop)
    return file_table(folder)


def write_document_rows(index, folder: Path, start: int, stop: int) -> None:
    """A segment's rows of the document store (every index kind's): ids, metadata and the
    stored fields of documents ``start`` to ``stop`` (read back by :func:`read_back_rows`
    before the segment is committed)."""
    (folder / "ids.json").write_text(json.dumps(index._ids[start:stop], ensure_ascii=False), encoding="utf-8")
    with open(folder / "metadata.jsonl", "w", encoding="utf-8") as fh:
        for row in index._metadata[start:stop]:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    if index._stored is not None:
        with open(folder / "documents.jsonl", "w", encoding="utf-8") as fh:
            for row in index._stored[start:stop]:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def file_table(folder: Path) -> dict:
    """Every file of a segment folder, synced to disk, with its size and CRC32 (the
    manifest's record that :func:`verify_files` checks on load)."""
    files = {}
    for path in sorted(folder.iterdir()):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        files[path.name] = {"bytes": path.stat().st_size, "crc32": _crc32(path)}
    return files


def read_back_rows(folder: Path, n_docs: int) -> None:
    """Read a just-written segment's document rows with the loader's own readers (ids,
    metadata, stored fields): a segment that would not load is never committed."""
    try:
        ids = _read_json(folder / "ids.json")
        if len(ids) != n_docs:
            raise CorruptIndexError(f"{folder / 'ids.json'}: {len(ids)} ids for {n_docs} documents.")
        del ids
        for name in ("metadata.jsonl", "documents.jsonl"):
            if name == "metadata.jsonl" or (folder / name).is_file():
                _check_jsonl(folder / name, n_docs)
    except CorruptIndexError as err:
        raise CorruptIndexError(f"the segment just written did not read back, so nothing was committed: {err}") from None


def verify_files(folder: Path, files: dict) -> None:
    """Each file the manifest lists is there, of its size and CRC32."""
    for name, expected in files.items():
        file_path = folder / name
        if not file_path.is_file():
            raise CorruptIndexError(f"{file_path}: file is missing from the index.")
        size = file_path.stat().st_size
        if size != expected["bytes"]:
            raise CorruptIndexError(
                f"{file_path}: {size} bytes, the manifest says {expected['bytes']} (partial write or damage)."
            )
        if _crc32(file_path) != expected["crc32"]:
            raise CorruptIndexError(f"{file_path}: checksum mismatch; the file is damaged.")


def sweep_leftovers(path: Path, names: list[str]) -> None:
    """Remove what killed writers left in an index folder whose manifest lists the segments
    ``names``: their temporaries (of segments and of the manifest) and any segment folder a
    commit renamed into place but never got into a manifest."""
    from salience.io.files import sweep_stale_temporaries

    numbers = [int(name.split("-")[1]) for name in names]
    later = max(numbers, default=-1) + 1
    sweep_stale_temporaries(path, names + [f"seg-{n:06d}" for n in range(later, later + 64)] + [MANIFEST])
    for entry in path.glob("seg-*"):
        if entry.is_dir() and SEGMENT_NAME.fullmatch(entry.name) and entry.name not in names:
            shutil.rmtree(entry, ignore_errors=True)


def listed_segments(path: Path) -> list[str]:
    """The segment folders the manifest in ``path`` lists (none without a readable manifest)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        return [str(s["name"]) for s in manifest["segments"] if SEGMENT_NAME.fullmatch(str(s["name"]))]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def commit_segments(path: Path, segments: list[dict], live: np.ndarray, write,
                    on_disk: list[str] | None = None) -> dict[str, list[int]]:
    """Write each segment not yet on disk (``name`` None) under a temporary name and rename it
    into place (``write(folder, start, stop)`` fills the folder and returns its file table);
    return the deleted documents per segment, for the manifest that the caller then replaces
    atomically (the commit point). Leftovers of killed writers are swept first; ``on_disk``
    names the segments the current manifest lists (default: the named ones of ``segments``)."""
    from salience.io.files import temporary_prefix, usual_mode

    if on_disk is None:
        on_disk = [s["name"] for s in segments if s.get("name")]
    sweep_leftovers(path, on_disk)
    existing = {int(name.split("-")[1]) for name in on_disk}
    next_number = max(existing, default=-1) + 1
    start = 0
    for segment in segments:
        stop = start + segment["n_docs"]
        if segment.get("name") is None:
            name = f"seg-{next_number:06d}"
            next_number += 1
            tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(name), suffix=".tmp", dir=path))
            try:
                os.chmod(tmp, usual_mode(tmp, directory=True))
                files = write(tmp, start, stop)
                read_back_rows(tmp, stop - start)
                fsync_dir(tmp)
                os.replace(tmp, path / name)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            segment["name"], segment["files"] = name, files
        start = stop
    fsync_dir(path)
    deleted: dict[str, list[int]] = {}
    start = 0
    for segment in segments:
        stop = start + segment["n_docs"]
        dead = np.flatnonzero(~live[start:stop])
        if len(dead):
            deleted[segment["name"]] = dead.tolist()
        start = stop
    return deleted


def _manifest(index: "BM25", segments: list[dict], deleted: dict[str, list[int]]) -> str:
    return manifest_text(index.resolved_params(), index.tokenizer_.get_config(), index.n_docs, segments, deleted)


def manifest_text(params: dict, tokenizer_config: dict, n_docs: int, segments: list[dict],
                  deleted: dict[str, list[int]]) -> str:
    """The manifest of a BM25 index folder (``params`` as ``resolved_params()`` gives them)."""
    body = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "params": {k: v for k, v in params.items() if k != "tokenizer"},
        "tokenizer": tokenizer_config,
        "n_docs": n_docs,
        "segments": segments,
        "deleted": deleted,
    }
    return json.dumps({**body, "checksum": _manifest_digest(body)}, indent=1, ensure_ascii=False)


def save_whole(path: Path, n_docs: int, write, manifest, is_own) -> tuple[Path, list[dict]]:
    """Write an index of one segment to ``path``; return the path resolved and the segments.

    ``write(folder)`` fills a segment folder and returns its file table; ``manifest(segments)``
    gives the manifest's text. ``path`` must be new, an empty folder, or an earlier index
    (``is_own``): anything else is refused untouched. A new folder is built under a temporary
    name and renamed into place. An index folder is the user's folder too, so only the files
    the index owns change there: the new segment goes in beside the old ones, the manifest is
    replaced atomically (the commit point: a crash before it leaves the old index), then the
    old segments go; files the user put in the folder stay.
    """
    from salience.io.files import check_output_path, sweep_stale_temporaries

    path = check_output_path(path, what="index", option="path", is_own=is_own)
    if path.is_dir() and any(path.iterdir()):
        sweep_stale_temporaries(path.parent, path.name)  # of earlier whole saves, killed
        previous = listed_segments(path)
        segments = [{"name": None, "n_docs": n_docs}]
        commit_segments(path, segments, np.ones(n_docs, dtype=bool), lambda folder, start, stop: write(folder),
                        on_disk=previous)
        atomic_write_text(path / MANIFEST, manifest(segments))
        for name in previous:
            shutil.rmtree(path / name, ignore_errors=True)
        _remove_sharded_files(path)
        fsync_dir(path)
        return path, segments
    with atomic_directory(path) as tmp:
        segments = [{"name": "seg-000000", "n_docs": n_docs, "files": write(tmp / "seg-000000")}]
        read_back_rows(tmp / "seg-000000", n_docs)
        (tmp / MANIFEST).write_text(manifest(segments), encoding="utf-8")
    return path, segments


def _remove_sharded_files(path: Path) -> None:
    """What a sharded index owned in ``path`` (its manifest first: from then on the folder reads as
    the single index just committed), keeping the user's files, in shard folders too."""
    if (path / "shards.json").is_file():
        os.remove(path / "shards.json")
        fsync_dir(path)
    for shard in path.glob("shard-[0-9]*"):
        if shard.is_dir() and not shard.is_symlink():
            (shard / MANIFEST).unlink(missing_ok=True)
            for segment in shard.glob("seg-[0-9]*"):
                shutil.rmtree(segment, ignore_errors=True)
            if not any(shard.iterdir()):
                shard.rmdir()


def save_index(index: "BM25", path: Path) -> None:
    """Full save of a compacted index (one segment, no deletions) to ``path`` (:func:`save_whole`)."""
    index.tokenizer_.get_config()  # fail before writing anything if the tokenizer cannot be saved
    n_docs = len(index._ids)
    index._path, index._segments = save_whole(
        path, n_docs, lambda folder: _write_segment(index, folder, 0, n_docs),
        lambda segments: _manifest(index, segments, {}), is_own_output)


def commit_index(index: "BM25") -> None:
    """Write new segments, then atomically replace the manifest (segments + deletions)."""
    path = index._path
    deleted = commit_segments(path, index._segments, index._live,
                              lambda folder, start, stop: _write_segment(index, folder, start, stop))
    atomic_write_text(path / MANIFEST, _manifest(index, index._segments, deleted))


# -------------------------------------------------------------------------------------------
# loading
def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: file is missing from the index.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptIndexError(f"{path}: cannot be read as JSON ({err}); the index is damaged.") from None


def _read_jsonl(path: Path, n: int) -> list[dict]:
    try:
        # split on "\n" alone: JSON written with ensure_ascii=False keeps U+0085, U+2028 and
        # U+2029 unescaped inside strings, where str.splitlines() would cut a row in two
        lines = path.read_text(encoding="utf-8").split("\n")
        rows = [json.loads(line) for line in (lines[:-1] if lines[-1] == "" else lines)]
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: file is missing from the index.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptIndexError(f"{path}: cannot be read ({err}); the index is damaged.") from None
    if len(rows) != n:
        raise CorruptIndexError(f"{path}: holds {len(rows)} rows, the manifest says {n}.")
    return rows


def _check_jsonl(path: Path, n: int) -> None:
    """:func:`_read_jsonl`'s checks a row at a time, keeping none (a bulk build's stored
    documents may be larger than its memory budget)."""
    rows = 0
    try:
        with open(path, "rb") as fh:
            for rows, line in enumerate(fh, start=1):  # binary lines end at b"\n" alone
                json.loads(line)
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: file is missing from the index.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptIndexError(f"{path}: row {rows} cannot be read ({err}); the index is damaged.") from None
    if rows != n:
        raise CorruptIndexError(f"{path}: holds {rows} rows, the manifest says {n}.")


def _load_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: file is missing from the index.") from None
    except (ValueError, OSError, EOFError) as err:
        raise CorruptIndexError(f"{path}: not a valid .npy array ({err}); the index is damaged.") from None


def read_manifest(path: Path):
    """(manifest path, its parsed JSON) of the index folder ``path`` (any index kind's), or an
    error naming what is missing."""
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise CorruptIndexError(f"{path}: no such index folder.")
    if not manifest_path.is_file():
        raise CorruptIndexError(f"{manifest_path}: missing; {path} is not a salience index or its save did not finish.")
    return manifest_path, _read_json(manifest_path)

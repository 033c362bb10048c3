"""The dense index's folder: one segment per save or commit (embeddings.npy, ids, metadata,
stored documents, the HNSW graph of a whole-index segment), a checksummed manifest, commits of
new segments and deletions (the BM25 format's helpers in :mod:`salience.search.store`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.search.formats import DENSE_FORMAT, MANIFEST, is_dense_folder

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "is_dense_folder", "save_dense", "commit_dense", "load_dense"]

FORMAT = DENSE_FORMAT
FORMAT_VERSION = 1


def _write_segment(index, folder: Path, start: int, stop: int) -> dict:
    from salience.search.store import file_table, write_document_rows

    folder.mkdir(parents=True, exist_ok=True)
    vectors = np.concatenate([np.asarray(b) for b in index._blocks])[start:stop] if len(index._blocks) > 1 else \
        np.asarray(index._blocks[0])[start:stop]
    np.save(folder / "embeddings.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    if index.approximate is not None and start == 0 and stop == len(index._ids):
        import faiss  # a whole-index segment (a save or merge): its graph is kept with it

        faiss.write_index(index._hnsw(), str(folder / f"{index.approximate}.faiss"))
    write_document_rows(index, folder, start, stop)
    return file_table(folder)


def _manifest(index, deleted: dict) -> str:
    from salience.search.store import _manifest_digest

    # where the encoder ran (device, dtype) is not the index's: it loads on a machine without a GPU too
    params = {k: v for k, v in index.resolved_params().items() if k not in ("encoder", "device", "dtype")}
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "encoder": index.encoder_name_,
            "encoder_model": index.encoder if isinstance(index.encoder, str) else None, "dimension": index._dimension,
            "params": params, "n_docs": index.n_docs, "segments": index._segments, "deleted": deleted}
    return json.dumps({**body, "checksum": _manifest_digest(body)}, indent=1, ensure_ascii=False)


def save_dense(index, path: Path) -> None:
    from salience.search.store import save_whole

    def manifest(segments: list[dict]) -> str:
        index._segments = segments
        return _manifest(index, {})

    n_docs = len(index._ids)
    index._path, index._segments = save_whole(
        path, n_docs, lambda folder: _write_segment(index, folder, 0, n_docs), manifest,
        lambda p: p.is_dir() and (is_dense_folder(p) or not any(p.iterdir())))


def commit_dense(index) -> None:
    from salience.io.files import atomic_write_text
    from salience.search.store import commit_segments

    deleted = commit_segments(index._path, index._segments, index._live,
                              lambda folder, start, stop: _write_segment(index, folder, start, stop))
    atomic_write_text(index._path / MANIFEST, _manifest(index, deleted))


def load_dense(cls, path: Path, encoder, verify: bool):
    from salience.search.store import _load_array, _manifest_digest, _read_json, _read_jsonl, read_manifest, verify_files

    manifest_path, manifest = read_manifest(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        other = manifest.get("format") if isinstance(manifest, dict) else None
        raise CorruptIndexError(f"{manifest_path}: not a dense index (format {other!r}); "
                                + ("load it with BM25.load." if other == "salience.bm25" else "the manifest is damaged."))
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CorruptIndexError(f"{manifest_path}: dense format version {version!r}; this salience reads {FORMAT_VERSION}.")
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    if manifest.get("checksum") != _manifest_digest(body):
        raise CorruptIndexError(f"{manifest_path}: checksum mismatch; the manifest is damaged.")
    try:
        params = dict(manifest["params"])
        recorded, dimension = str(manifest["encoder"]), int(manifest["dimension"])
        segments, deleted = list(manifest["segments"]), dict(manifest.get("deleted", {}))
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptIndexError(f"{manifest_path}: incomplete manifest ({err}).") from None
    if encoder is None:
        encoder = manifest.get("encoder_model")
        if encoder is None:
            raise InvalidParameterError(f"{path} was built with the encoder {recorded!r} (a callable): pass it as "
                                        "encoder= to load the index.")
    index = cls(encoder=encoder, **{k: v for k, v in params.items() if k != "encoder_name"},
                encoder_name=None if isinstance(encoder, str) else (getattr(encoder, "name", None) or recorded))
    if index.encoder_name_ != recorded:
        raise InvalidParameterError(f"{path} was built with the encoder {recorded!r}, not {index.encoder_name_!r}: "
                                    "query it with the encoder that built it (vectors of different encoders do not "
                                    "compare).")
    for segment in segments:
        folder = path / segment["name"]
        n_docs = int(segment["n_docs"])
        if verify:
            verify_files(folder, segment["files"])
        vectors = _load_array(folder / "embeddings.npy")
        if vectors.ndim != 2 or vectors.shape[0] != n_docs or vectors.shape[1] != dimension:
            raise CorruptIndexError(f"{folder / 'embeddings.npy'}: shape {vectors.shape}, the manifest says {n_docs} "
                                    f"documents of dimension {dimension}.")
        ids = _read_json(folder / "ids.json")
        if len(ids) != n_docs:
            raise CorruptIndexError(f"{folder / 'ids.json'}: {len(ids)} ids, the manifest says {n_docs}.")
        index._blocks.append(vectors)
        index._ids.extend(ids)
        index._metadata.extend(_read_jsonl(folder / "metadata.jsonl", n_docs))
        if index._stored is not None:
            index._stored.extend(_read_jsonl(folder / "documents.jsonl", n_docs))
        live = np.ones(n_docs, dtype=bool)
        live[np.asarray(deleted.get(segment["name"], []), dtype=np.int64)] = False
        index._live = np.concatenate([index._live, live])
        index._segments.append({"name": segment["name"], "n_docs": n_docs, "files": segment["files"]})
    index._pos = {doc_id: i for i, doc_id in enumerate(index._ids) if index._live[i]}
    index._dimension = dimension
    index._path = path
    saved = f"{index.approximate}.faiss"
    if index.approximate is not None and len(segments) == 1 and saved in segments[0]["files"]:
        index._graph_file = path / segments[0]["name"] / saved
    return index

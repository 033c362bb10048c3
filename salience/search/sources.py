"""Document and query sources: Python iterables, jsonl / jsonl.gz files, BEIR folders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from salience.exceptions import InputFormatError, InvalidParameterError
from salience.io.files import iter_jsonl

__all__ = ["Document", "iter_documents", "read_queries", "resolve_corpus_path"]

_ID_KEYS = ("_id", "id", "doc_id", "docid")
_RESERVED = set(_ID_KEYS) | {"metadata"}


@dataclass
class Document:
    id: str
    fields: dict[str, str]
    metadata: dict[str, Any] = field(default_factory=dict)


def resolve_corpus_path(source: str | os.PathLike) -> Path:
    """A jsonl(.gz) file, or a BEIR folder holding ``corpus.jsonl`` / ``corpus.jsonl.gz``."""
    path = Path(source)
    if path.is_dir():
        for name in ("corpus.jsonl", "corpus.jsonl.gz"):
            if (path / name).is_file():
                return path / name
        raise InputFormatError(f"{path}: folder has no corpus.jsonl or corpus.jsonl.gz (BEIR layout expected).")
    if not path.exists():
        raise InputFormatError(f"{path}: no such file or folder.")
    return path


def _record_to_document(record: Mapping, fields: tuple[str, ...], where: str, position: int) -> Document:
    doc_id = next((record[k] for k in _ID_KEYS if k in record), None)
    if doc_id is None:
        doc_id = str(position)
    elif not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
        raise InputFormatError(f"{where}: document id must be a string or integer; got {type(doc_id).__name__}.")
    doc_id = str(doc_id)
    values: dict[str, str] = {}
    for name in fields:
        value = record.get(name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise InputFormatError(
                f"{where}: field {name!r} of document {doc_id!r} must be text (str); got {type(value).__name__}."
            )
        values[name] = value
    metadata = {k: v for k, v in record.items() if k not in _RESERVED and k not in fields}
    nested = record.get("metadata")
    if nested and isinstance(nested, Mapping):
        metadata.update(nested)
    return Document(doc_id, values, metadata)


def iter_documents(
    source: Any,
    fields: tuple[str, ...] = ("title", "text"),
    on_error: str = "raise",
) -> Iterator[Document]:
    """Yield :class:`Document` from a path (jsonl, jsonl.gz, BEIR folder) or an iterable of
    strings, ``(id, text)`` pairs, or mappings with an id key (``_id``/``id``) and text fields.

    A plain string becomes the ``text`` field (or the only field) and its position the id.
    """
    if isinstance(source, (str, os.PathLike)) and not (isinstance(source, str) and "\n" in source):
        path = resolve_corpus_path(source)
        for position, (lineno, record) in enumerate(iter_jsonl(path, on_error)):
            yield _record_to_document(record, fields, f"{path}:{lineno}", position)
        return
    if isinstance(source, Mapping):
        raise InvalidParameterError(
            "pass documents as an iterable (list of dicts or strings), not a mapping; "
            "for {id: text} use list(mapping.items())."
        )
    if not isinstance(source, Iterable):
        raise InvalidParameterError(f"documents must be an iterable or a path; got {type(source).__name__}.")
    text_field = "text" if "text" in fields else fields[-1]
    for position, item in enumerate(source):
        where = f"document at position {position}"
        if isinstance(item, str):
            yield Document(str(position), {f: (item if f == text_field else "") for f in fields})
        elif isinstance(item, dict) or isinstance(item, Mapping):
            yield _record_to_document(item, fields, where, position)
        elif isinstance(item, tuple) and len(item) == 2:
            doc_id, text = item
            yield _record_to_document({"_id": doc_id, text_field: text}, fields, where, position)
        else:
            raise InputFormatError(
                f"{where}: expected a str, a mapping or an (id, text) pair; got {type(item).__name__}."
            )


def read_queries(source: Any, on_error: str = "raise") -> dict[str, str]:
    """Queries as ``{id: text}`` from a jsonl file / BEIR folder (``queries.jsonl``), a mapping,
    or a list of strings (ids are positions)."""
    if isinstance(source, Mapping):
        return {str(k): v for k, v in source.items()}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "queries.jsonl"
        out: dict[str, str] = {}
        for lineno, record in iter_jsonl(path, on_error):
            doc = _record_to_document(record, ("text",), f"{path}:{lineno}", len(out))
            out[doc.id] = doc.fields["text"]
        return out
    return {str(i): q for i, q in enumerate(source)}

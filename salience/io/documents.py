"""Document and query sources: Python iterables, jsonl / jsonl.gz files, BEIR folders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from salience.exceptions import InputFormatError, InvalidParameterError
from salience.io.files import iter_jsonl

__all__ = ["Document", "iter_documents", "read_documents", "read_queries", "resolve_corpus_path",
           "EmptyDocuments", "EmptyDocumentsWarning"]

_ID_KEYS = ("_id", "id", "doc_id", "docid")
_RESERVED = set(_ID_KEYS) | {"metadata"}


class EmptyDocumentsWarning(UserWarning):
    """Some documents have no text in the indexed fields: they are indexed but can never match."""


@dataclass
class Document:
    id: str
    fields: dict[str, str]
    metadata: dict[str, Any] = field(default_factory=dict)
    origin: str | None = field(default=None, compare=False)  # "file:line", or the position given, for errors


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


def _record_to_document(record: Mapping, fields: tuple[str, ...], where: str, position: int | None) -> Document:
    """``position``: the id of a record without one (None: such a record is an error)."""
    doc_id = next((record[k] for k in _ID_KEYS if k in record), None)
    if doc_id is None:
        if position is None:
            raise InputFormatError(f"{where}: the record has no id ({', '.join(_ID_KEYS)}); its fields are "
                                   f"{', '.join(sorted(map(str, record))) or 'none'}. Give every document an id.")
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
    return Document(doc_id, values, metadata, where)


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
        for lineno, record in iter_jsonl(path, on_error):
            yield _record_to_document(record, fields, f"{path}:{lineno}", None)
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
        if isinstance(item, Document):
            yield item
        elif isinstance(item, str):
            yield Document(str(position), {f: (item if f == text_field else "") for f in fields})
        elif isinstance(item, dict) or isinstance(item, Mapping):
            yield _record_to_document(item, fields, where, None)
        elif isinstance(item, tuple) and len(item) == 2:
            doc_id, text = item
            yield _record_to_document({"_id": doc_id, text_field: text}, fields, where, position)
        else:
            raise InputFormatError(
                f"{where}: expected a str, a mapping or an (id, text) pair; got {type(item).__name__}."
            )


class EmptyDocuments:
    """A tally of documents without text in the indexed fields, seen one at a time: an error
    when none has any (a field name that no document uses, say), else a warning naming them."""

    def __init__(self, fields: tuple[str, ...]):
        self.fields, self.n_docs, self.n_empty = fields, 0, 0
        self.examples: list[str] = []
        self.other_fields: set[str] = set()

    def see(self, doc: Document) -> None:
        if self.n_docs < 100:
            self.other_fields.update(str(k) for k in doc.metadata)
        self.n_docs += 1
        if not any(v.strip() for v in doc.fields.values()):
            self.n_empty += 1
            if len(self.examples) < 5:
                self.examples.append(doc.id)

    def check(self, stacklevel: int = 3) -> None:
        import warnings

        fields = self.fields
        if self.n_docs and self.n_empty == self.n_docs:
            seen = sorted(self.other_fields)
            raise InputFormatError(
                f"none of the {self.n_docs} documents has text in the field{'s' if len(fields) > 1 else ''} "
                f"{', '.join(fields)}" + (f" (their other fields: {', '.join(seen[:10])})" if seen else "")
                + "; name the text fields with fields= (CLI: --fields).")
        if self.n_empty:
            warnings.warn(f"{self.n_empty} of {self.n_docs} documents have no text in {', '.join(fields)} (ids "
                          f"{', '.join(map(repr, self.examples))}{', ...' if self.n_empty > 5 else ''}): they are "
                          "indexed but no query can find them.", EmptyDocumentsWarning, stacklevel=stacklevel + 1)


def read_documents(source: Any, fields: tuple[str, ...] = ("title", "text"), on_error: str = "raise") -> list[Document]:
    """:func:`iter_documents` as a list, checked: documents without text in any of ``fields``
    are named in an :class:`EmptyDocumentsWarning`, and an error when none has any (a field
    name that no document uses, say)."""
    docs = list(iter_documents(source, fields, on_error))
    tally = EmptyDocuments(fields)
    for doc in docs:
        tally.see(doc)
    tally.check(stacklevel=3)
    return docs


def read_queries(source: Any, on_error: str = "raise") -> dict[str, str]:
    """Queries as ``{id: text}`` from a jsonl file / BEIR folder (``queries.jsonl``), a mapping,
    or a list of strings (ids are positions). In a file every query needs an id of its own and a
    text: a record without one, or an id given twice, is refused naming its line (``on_error=
    "skip"`` drops a record without text or id instead)."""
    if isinstance(source, Mapping):
        return {str(k): v for k, v in source.items()}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "queries.jsonl"
        out: dict[str, str] = {}
        lines: dict[str, int] = {}
        for lineno, record in iter_jsonl(path, on_error):
            where = f"{path}:{lineno}"
            try:
                doc = _record_to_document(record, ("text",), where, None)
                if not doc.fields["text"].strip():
                    raise InputFormatError(f"{where}: query {doc.id!r} has no text (a 'text' field); a query without "
                                           "one would be left out of every run.")
            except InputFormatError:
                if on_error == "skip":
                    continue
                raise
            if doc.id in lines:
                raise InputFormatError(f"{where}: query id {doc.id!r} is given twice (first on line {lines[doc.id]}); "
                                       "every query needs an id of its own.")
            lines[doc.id] = lineno
            out[doc.id] = doc.fields["text"]
        return out
    return {str(i): q for i, q in enumerate(source)}


def document_text(index, doc_id: str) -> str:
    """A stored document's indexed fields as one text (what a reader or a judge is shown)."""
    document = index.document(doc_id)
    return " ".join(str(document.get(f) or "") for f in index.fields_).strip()

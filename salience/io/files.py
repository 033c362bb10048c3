"""Atomic writes and line-exact reading of (possibly gzipped) text files."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Iterator

from salience.exceptions import InputFormatError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_directory",
    "fsync_dir",
    "iter_text_lines",
    "iter_jsonl",
    "read_records",
]

_ENCODING_ERRORS = ("strict", "replace", "ignore")


def fsync_dir(path: str | Path) -> None:
    """Flush a directory entry to disk (no-op where the OS does not allow it)."""
    with contextlib.suppress(OSError):
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place only on success.

    An existing directory at ``path`` is replaced as a whole; an exception (or Ctrl-C)
    leaves the old one untouched and removes the temporary one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                with open(child, "rb") as fh:
                    os.fsync(fh.fileno())
        fsync_dir(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / "index")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _open_binary(path: Path):
    try:
        if path.suffix == ".gz":
            return gzip.open(path, "rb")
        return open(path, "rb")
    except FileNotFoundError:
        raise InputFormatError(f"{path}: file not found.") from None
    except IsADirectoryError:
        raise InputFormatError(f"{path}: is a folder, expected a file.") from None


def iter_text_lines(path: str | Path, encoding_errors: str = "strict") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of a text or ``.gz`` file.

    Invalid UTF-8 raises :class:`InputFormatError` naming the file and line, unless
    ``encoding_errors`` is ``"replace"`` or ``"ignore"``. A corrupt gzip stream raises
    the same error naming the file and the last good line.
    """
    if encoding_errors not in _ENCODING_ERRORS:
        from salience.exceptions import unknown_choice

        raise unknown_choice("encoding_errors", encoding_errors, _ENCODING_ERRORS)
    path = Path(path)
    lineno = 0
    with _open_binary(path) as fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    yield lineno, raw.decode("utf-8", errors=encoding_errors)
                except UnicodeDecodeError as err:
                    raise InputFormatError(
                        f"{path}:{lineno}: invalid UTF-8 at byte {err.start} of the line. "
                        "Fix the file, or pass encoding_errors='replace' (CLI: --encoding-errors replace)."
                    ) from None
        except (EOFError, OSError, zlib.error) as err:
            raise InputFormatError(f"{path}: corrupt or truncated compressed data after line {lineno}: {err}") from None


def iter_jsonl(path: str | Path, encoding_errors: str = "strict") -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for each non-blank line of a jsonl / jsonl.gz file."""
    path = Path(path)
    for lineno, line in iter_text_lines(path, encoding_errors):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFormatError(f"{path}:{lineno}: invalid JSON ({err.msg} at column {err.colno}).") from None
        if not isinstance(record, dict):
            raise InputFormatError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}.")
        yield lineno, record



def read_records(path: str | Path, required: dict, encoding_errors: str = "strict") -> list[dict]:
    """All records of a jsonl file, each checked to hold the ``required`` fields.

    ``required`` maps a field name to ``(check, what)``: ``check(value)`` says whether the value
    is acceptable and ``what`` describes it for the error, which names the file and line.
    """
    records = []
    for lineno, record in iter_jsonl(path, encoding_errors):
        for name, (check, what) in required.items():
            if not check(record.get(name)):
                raise InputFormatError(f"{path}:{lineno}: record has no {what}.")
        records.append(record)
    if not records:
        raise InputFormatError(f"{path}: no records.")
    return records

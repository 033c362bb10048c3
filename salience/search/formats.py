"""What a saved index folder holds, read from its manifest: the format names of the three kinds
(BM25, dense, sharded) in one place, so the writers, the loaders and :func:`index_kind` agree
without importing one another."""

from __future__ import annotations

import os
from pathlib import Path

from salience.io.files import folder_format

__all__ = ["INDEX_KINDS", "index_kind", "is_bm25_folder", "is_dense_folder", "is_sharded_folder"]

#: what a saved index folder may hold
INDEX_KINDS = ("bm25", "dense", "sharded")
BM25_FORMAT, DENSE_FORMAT, SHARDED_FORMAT = "salience.bm25", "salience.dense", "salience.shards"
#: a BM25 or dense folder's manifest, and a sharded folder's
MANIFEST, SHARDS_MANIFEST = "manifest.json", "shards.json"


def is_bm25_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a salience BM25 index (its manifest names the format)."""
    return folder_format(Path(path), MANIFEST) == BM25_FORMAT


def is_dense_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a salience dense index (its manifest names the format)."""
    return folder_format(Path(path), MANIFEST) == DENSE_FORMAT


def is_sharded_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a sharded index (its ``shards.json`` names the format)."""
    return folder_format(Path(path), SHARDS_MANIFEST) == SHARDED_FORMAT


def index_kind(path: str | os.PathLike) -> str:
    """``"sharded"``, ``"dense"`` or ``"bm25"``: what the folder at ``path`` holds, by its
    manifest (a folder holding none is read as BM25, whose loader names what is missing)."""
    if is_sharded_folder(path):
        return "sharded"
    return "dense" if is_dense_folder(path) else "bm25"

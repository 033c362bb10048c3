"""One way to open a saved index: :func:`open_index` reads what a folder holds (a BM25 index,
a dense one, or a sharded one) from its manifest, so the command line, the service and a user
never probe a folder themselves."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["INDEX_KINDS", "index_kind", "open_index"]

#: what a saved index folder may hold
INDEX_KINDS = ("bm25", "dense", "sharded")


def index_kind(path: str | os.PathLike) -> str:
    """``"sharded"``, ``"dense"`` or ``"bm25"``: what the folder at ``path`` holds, by its
    manifest (a folder holding none is read as BM25, whose loader names what is missing)."""
    from salience.search.dense_store import is_dense_folder
    from salience.search.shards import is_sharded_folder

    if is_sharded_folder(path):
        return "sharded"
    return "dense" if is_dense_folder(Path(path)) else "bm25"


def open_index(path: str | os.PathLike, *, verify: bool = True, executor: str = "local", address: str | None = None):
    """The index saved at ``path``, of whatever kind it is (:func:`index_kind`): a
    :class:`~salience.search.BM25` or :class:`~salience.search.Dense` (``verify``: each file's
    size and CRC32 checked against the manifest), or a :class:`~salience.search.ShardedIndex`
    whose shards are held in this process or in Ray actors (``executor``, ``address``).

    >>> from salience.search import BM25
    >>> import tempfile
    >>> folder = tempfile.mkdtemp() + "/pets"
    >>> _ = BM25().index(["cats sleep", "dogs bark"]).save(folder)
    >>> type(open_index(folder)).__name__, open_index(folder).search("cats", k=1).ids
    ('BM25', ['0'])
    """
    from salience.search import BM25, Dense
    from salience.search.shards import ShardedIndex

    kind = index_kind(path)
    if kind == "sharded":
        return ShardedIndex.load(path, executor=executor, address=address)
    return (Dense if kind == "dense" else BM25).load(path, verify=verify)

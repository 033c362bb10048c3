"""One way to open a saved index: :func:`open_index` reads what a folder holds (a BM25 index,
a dense one, or a sharded one) from its manifest, so the command line, the service and a user
never probe a folder themselves."""

from __future__ import annotations

import os

from salience.search.formats import INDEX_KINDS, index_kind

__all__ = ["INDEX_KINDS", "index_kind", "index_class", "open_index"]


def index_class(path: str | os.PathLike) -> type:
    """The class of the index saved at ``path`` (:func:`index_kind`), read from its manifest
    without loading it: what it can do is read from the class's capabilities."""
    from salience.search.bm25 import BM25
    from salience.search.dense import Dense
    from salience.search.shards import ShardedIndex

    return {"sharded": ShardedIndex, "dense": Dense, "bm25": BM25}[index_kind(path)]

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
    cls = index_class(path)
    if cls.holds_shards:
        return cls.load(path, verify=verify, executor=executor, address=address)
    return cls.load(path, verify=verify)

"""What every searchable index offers, whatever holds its documents: search, documents by
id, adding, deleting, committing, merging, saving and loading, and the capabilities the
command line and the service read instead of asking for a kind by name.

:class:`~salience.search.segmented.SegmentedIndex` implements it for the indexes held in
this process (:class:`~salience.search.BM25`, :class:`~salience.search.Dense`);
:class:`~salience.search.ShardedIndex` implements it over shards that may live in other
processes.
"""

from __future__ import annotations

import abc
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from salience.core.base import Scorer
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError

__all__ = ["Index"]


def check_prune_fraction(fraction, unit: str) -> float:
    """A share to prune, in [0, 1) (``unit``: what is pruned, for the error)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise InvalidParameterError(f"fraction={fraction!r} must lie in [0, 1): the share of {unit} pruned.")
    return float(fraction)


def field_names(fields) -> tuple[str, ...]:
    """The indexed fields as a tuple: a sequence of names or one comma-separated string; an
    empty list, a name that is not a non-empty string or anything else is refused by name."""
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    try:
        fields = tuple(fields)
    except TypeError:
        raise InvalidParameterError(f"fields must be a list of field names; got {type(fields).__name__}.") from None
    if not fields or not all(isinstance(f, str) and f for f in fields):
        raise InvalidParameterError(f"fields must be a non-empty list of field names; got {fields!r}.")
    return fields


class Index(Scorer, abc.ABC):
    """What every searchable index offers (see the module docstring). An implementation
    provides the abstract methods and states its capabilities; ``search``, ``index`` and
    ``len()`` follow from them."""

    #: how the index names itself in messages ("this BM25 has no documents yet")
    label = "index"

    # What the command line and the service may ask of an index, read from these (never from its
    # kind's name): a new kind states its own.
    #: the file whose commit marks a new generation of the saved folder
    manifest_name = "manifest.json"
    #: its role in a hybrid search: "lexical", "dense", or None (not fused)
    hybrid_role: str | None = None
    #: whether it explains a document's score by its query terms' contributions, and scores posted texts
    explains_terms = False
    #: whether a query is encoded by a model first (the service answers it off its event loop)
    encodes_queries = False
    #: whether a search may answer from the part of the index that answers, flagged as partial
    answers_partially = False
    #: whether the index is split over shards that may live in other processes
    holds_shards = False
    #: whether the service may add and delete documents in place (and watch the folder for commits)
    writable_in_place = True
    #: whether it scores any of its documents by id (rerank by ids)
    scores_by_id = True

    _path: Path | None = None

    # ---- searching and reading
    @abc.abstractmethod
    def search_batch(self, queries: Sequence[str], *, k: int = 10, where: Mapping | None = None,
                     n_jobs: int = 1) -> list[Scores]:
        """The ``k`` best live documents of each query, best first (``where``: a metadata filter)."""

    def search(self, query: str, *, k: int = 10, where: Mapping | None = None) -> Scores:
        """The ``k`` best live documents for ``query`` as :class:`~salience.Scores` in rank order."""
        return self.search_batch([query], k=k, where=where)[0]

    @abc.abstractmethod
    def document(self, doc_id: str) -> dict:
        """Stored fields and metadata of a document; an unknown id is refused by name."""

    @property
    @abc.abstractmethod
    def n_docs(self) -> int:
        """Number of live (not deleted) documents."""

    def __len__(self) -> int:
        return self.n_docs

    @property
    def path(self) -> Path | None:
        """Folder this index is saved to (``None`` until saved or loaded)."""
        return self._path

    # ---- changing the documents
    @abc.abstractmethod
    def fit(self, documents: Any, **options) -> "Index":
        """Index ``documents`` from scratch (records, a jsonl(.gz) file or a BEIR folder)."""

    def index(self, documents: Any, **options) -> "Index":
        """Same as :meth:`fit` (the indexing verb of search engines)."""
        return self.fit(documents, **options)

    @abc.abstractmethod
    def add(self, documents: Any, **options) -> "Index":
        """Add documents without re-indexing the others; :meth:`commit` writes them."""

    @abc.abstractmethod
    def delete(self, ids: Iterable[str] | str) -> "Index":
        """Delete documents by id; an unknown id is refused by name and nothing is deleted."""

    # ---- persistence
    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> "Index":
        """Write the index to ``path`` atomically."""

    @classmethod
    @abc.abstractmethod
    def load(cls, path: str | os.PathLike, **options) -> "Index":
        """Open a saved index."""

    @abc.abstractmethod
    def commit(self) -> "Index":
        """Write the changes since the last save or commit to :attr:`path`."""

    @abc.abstractmethod
    def merge(self) -> "Index":
        """Merge the segments and drop deleted documents."""

"""Static passage pruning: delete the passages no query is likely to need before indexing them.

Chang et al. (2024, "Neural passage quality estimation for static pruning") prune a corpus's
lowest-quality passages, scored without any query, and keep retrieval statistically as effective
with a quarter of the passages gone. Here a document's body (``passage_field``) is cut into
passages (its sentences, or sentences packed up to ``max_words``), ``score`` rates every passage
from its text alone (the data domain's statistics are wired in by the CLI: ``salience search
prune``), the lowest-rated ``fraction`` of all passages is deleted and each document keeps the rest
of its body; its other fields (a title) belong to every passage, as a title heads each of DPR's
Wikipedia passages, and stay while any passage is left: a document left with none leaves the corpus. The search domain stays ignorant of where the
score comes from: it takes a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from salience.core.scores import Scores
from salience.core.select import select_fraction
from salience.exceptions import InvalidParameterError, ShapeError
from salience.search.index import check_prune_fraction
from salience.io.documents import Document, read_documents

__all__ = ["PassagePruning", "prune_passages", "prune_index_passages"]


@dataclass
class PassagePruning:
    """What :func:`prune_passages` did: ``documents`` (those with a passage left, the pruned ones'
    fields rebuilt from their kept passages, the rest untouched), how many ``passages`` there were
    and how many were ``pruned``, the ids of the documents ``changed`` (a passage gone, some left)
    and ``removed`` (none left), and the highest score pruned (``threshold``)."""

    documents: list[Document]
    passages: int
    pruned: int
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    threshold: float | None = None

    def report(self) -> dict[str, Any]:
        return {"passages": self.passages, "pruned": self.pruned, "documents_changed": len(self.changed),
                "documents_removed": len(self.removed), "documents_kept": len(self.documents),
                "threshold": self.threshold}


def _passage_scores(score: Callable[[list[str]], Any], passages: list[str]) -> np.ndarray:
    values = np.asarray(score(passages), dtype=np.float64)
    if values.shape != (len(passages),):
        raise ShapeError(f"the passage score gave shape {values.shape} for {len(passages)} passages: one value a passage.")
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise InvalidParameterError(f"the passage score is {values[bad[0]]} (not finite) for passage {passages[bad[0]]!r}.")
    return values


def prune_passages(documents: Any, score: Callable[[Sequence[str]], Any], *, fraction: float,
                   fields: tuple[str, ...] = ("title", "text"), passage_field: str = "text", max_words: int = 0,
                   on_error: str = "raise") -> PassagePruning:
    """Delete the lowest-``score``d ``fraction`` (0 <= fraction < 1) of the passages of
    ``documents`` (anything :meth:`Index.fit` reads; ``passage_field``, one of ``fields``, is the
    one cut into passages); ``score`` maps a list of passage texts to one finite number each
    (higher: keep). Ties go earliest-kept, as :meth:`Index.prune`.

    >>> words = lambda passages: [len(p.split()) for p in passages]
    >>> pruned = prune_passages([{"id": "a", "title": "Mitosis", "text": "Cells divide fast. Yes."},
    ...                          {"id": "b", "title": "Other", "text": "No."}], words, fraction=0.7)
    >>> [(d.id, d.fields) for d in pruned.documents], pruned.changed, pruned.removed
    ([('a', {'title': 'Mitosis', 'text': 'Cells divide fast.'})], ['a'], ['b'])
    """
    from salience.text.sentences import split_passages

    fraction = check_prune_fraction(fraction, "passages")
    if passage_field not in fields:
        raise InvalidParameterError(f"passage_field={passage_field!r} is not one of the fields {', '.join(fields)}.")
    docs = read_documents(documents, fields, on_error)
    if not docs:
        raise InvalidParameterError("cannot prune an empty corpus: no documents were given.")
    texts, owners = [], []  # the document of each passage
    for position, doc in enumerate(docs):
        for passage in split_passages(doc.fields.get(passage_field) or "", max_words=max_words):
            texts.append(passage)
            owners.append(position)
    if fraction == 0 or not texts:
        return PassagePruning(list(docs), len(texts), 0)
    values = _passage_scores(score, texts)
    # the core's selector keeps the best share (ties: the earlier passage stays), as Index.prune
    gone = np.ones(len(texts), dtype=bool)
    gone[select_fraction(Scores(values), fraction=1.0 - fraction).ids] = False
    n_pruned = int(gone.sum())
    if n_pruned == 0:
        return PassagePruning(list(docs), len(texts), 0)
    kept: dict[int, list[str]] = {}
    touched = set()
    for passage, owner, pruned in zip(texts, owners, gone):
        if pruned:
            touched.add(owner)
        else:
            kept.setdefault(owner, []).append(passage)
    out, changed, removed = [], [], []
    for position, doc in enumerate(docs):
        if position not in touched:
            out.append(doc)
        elif position not in kept:
            removed.append(doc.id)
        else:
            changed.append(doc.id)
            out.append(Document(doc.id, {**doc.fields, passage_field: " ".join(kept[position])}, dict(doc.metadata),
                                doc.origin))
    return PassagePruning(out, len(texts), n_pruned, changed, removed, float(values[gone].max()))


def prune_index_passages(index, score: Callable[[Sequence[str]], Any], *, fraction: float,
                         passage_field: str = "text", max_words: int = 0) -> PassagePruning:
    """:func:`prune_passages` on an index that stores its documents: the documents that lost a
    passage are replaced by their pruned text (their metadata kept), those left empty deleted.
    The caller commits."""
    if not getattr(index, "store_documents", False):
        raise InvalidParameterError("the index keeps no document text to cut into passages (a sharded index, or one "
                                    "built without stored documents): prune the corpus before indexing it.")
    records = []
    for doc_id in index.ids:
        stored = index.document(doc_id)
        record = {name: stored.get(name) or "" for name in index.fields_}
        record["id"] = doc_id
        record["metadata"] = {k: v for k, v in stored.items() if k != "id" and k not in index.fields_}
        records.append(record)
    result = prune_passages(records, score, fraction=fraction, fields=tuple(index.fields_),
                            passage_field=passage_field, max_words=max_words)
    if result.changed or result.removed:
        index.delete(result.changed + result.removed)
        replaced = set(result.changed)
        if replaced:
            index.add([{"id": d.id, **d.fields, "metadata": d.metadata} for d in result.documents if d.id in replaced])
    return result

"""Why a document scored what it did under BM25: each query term's contribution, its term
frequency in the document and its IDF; the contributions sum to the score. And what a text
that is not in the index would score, the collection's statistics held fixed (the scorer
that token attribution masks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.core import bm25_formulas as scoring

__all__ = ["TermContribution", "Explanation", "explain_score", "score_unindexed"]


@dataclass(frozen=True)
class TermContribution:
    term: str
    query_weight: float
    tf: float
    idf: float
    contribution: float


@dataclass(frozen=True)
class Explanation:
    """Per-term contributions to one document's score; ``contributions`` sum to ``score``."""

    doc_id: str
    score: float
    terms: tuple[TermContribution, ...]
    doc_length: float
    avg_doc_length: float

    def to_dict(self) -> dict:
        return {
            "doc_id": self.doc_id,
            "score": self.score,
            "doc_length": self.doc_length,
            "avg_doc_length": self.avg_doc_length,
            "terms": [t.__dict__ for t in self.terms],
        }

    def __str__(self) -> str:
        lines = [f"doc {self.doc_id}: score {self.score:.4f} (length {self.doc_length:g}, average {self.avg_doc_length:.1f})"]
        for t in self.terms:
            lines.append(f"  {t.term:<20} qtf={t.query_weight:g} tf={t.tf:g} idf={t.idf:.3f} -> {t.contribution:.4f}")
        return "\n".join(lines)


def explain_scores(index, query: str, doc_ids: Sequence[str]) -> list[Explanation]:
    """Per-term contributions to each of ``doc_ids``' scores for ``query`` in a BM25 ``index``:
    each query term's weight times its posting score (and, for BM25L / BM25+, the credit of an
    absent term); they sum to the score. Each term's postings are read once for all the
    documents (a search's results explained together)."""
    index._require_index()
    positions = np.asarray(index._positions(doc_ids), dtype=np.int64)
    counts: dict[int, int] = {}
    for t in index._encode_queries([query])[0]:
        counts[t] = counts.get(t, 0) + 1
    per_doc: list[list[TermContribution]] = [[] for _ in positions]
    for t, qtf in counts.items():
        values, tfs = index._postings_at(t, positions)
        term, idf, absent = index._encoder.terms[t], float(index._idf[t]), float(index._nonocc[t])
        for terms, value, tf_value in zip(per_doc, values.tolist(), tfs.tolist()):
            terms.append(TermContribution(term, float(qtf), tf_value, idf, qtf * (value + absent)))
    out = []
    for doc_id, pos, terms in zip(doc_ids, positions.tolist(), per_doc):
        terms.sort(key=lambda c: -c.contribution)
        out.append(Explanation(doc_id=str(doc_id), score=float(sum(c.contribution for c in terms)), terms=tuple(terms),
                               doc_length=float(index._doc_len[pos]), avg_doc_length=index._avg_len))
    return out


def explain_score(index, query: str, doc_id: str) -> Explanation:
    """:func:`explain_scores` of one document."""
    return explain_scores(index, query, [doc_id])[0]


def score_unindexed(index, query: str, texts) -> np.ndarray:
    """BM25 scores of texts that are not in ``index``, as if they were, with its collection
    statistics (idf, average length) held fixed (:meth:`BM25.score_texts
    <salience.search.BM25.score_texts>`)."""
    index._require_index()
    if isinstance(texts, (str, dict)) or not isinstance(texts, Sequence):
        raise InvalidParameterError("texts must be a list of texts (or of dicts of fields).")
    query_terms: dict[int, int] = {}
    for t in index._encode_queries([query])[0]:
        query_terms[t] = query_terms.get(t, 0) + 1
    terms = np.fromiter(query_terms, dtype=np.int64, count=len(query_terms))
    qtf = np.fromiter(query_terms.values(), dtype=np.float64, count=len(query_terms))
    tf = np.zeros((len(texts), len(terms)))
    doc_len = np.zeros(len(texts))
    column = {int(t): j for j, t in enumerate(terms)}
    for i, text in enumerate(texts):
        fields = {index.fields_[0]: text} if isinstance(text, str) else text
        if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
            raise InvalidParameterError(f"text {i} must be a str or a dict of field texts.")
        unknown = set(fields) - set(index.fields_)
        if unknown:
            raise InvalidParameterError(f"text {i} has fields {sorted(unknown)} the index does not have "
                                        f"({', '.join(index.fields_)}).")
        for name, value in fields.items():
            weight = index.field_weights_[name]
            ids = index._encoder.encode(value, grow=False)
            doc_len[i] += weight * len(ids)
            for t in ids:
                j = column.get(t)
                if j is not None:
                    tf[i, j] += weight
    if not len(terms):
        return np.zeros(len(texts))
    idf = index._idf[terms]
    base = scoring.nonoccurrence_component(index.variant, index.k1, index.delta)
    lengths = np.repeat(doc_len, len(terms)).reshape(tf.shape)
    tfc = scoring.tf_component(tf.ravel(), lengths.ravel(), index._avg_len, index.variant, index.k1, index.b,
                               index.delta).reshape(tf.shape)
    per_term = np.where(tf > 0, tfc, base) * idf[None, :]
    return per_term @ qtf


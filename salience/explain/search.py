"""Why does document d rank for query q? Two answers, cross-checked:

* exact: BM25's per-term contributions (:meth:`salience.search.BM25.explain`), which add up
  to the score;
* black-box: token attribution of the document's words for any scorer of (query, texts), by
  masking words (:func:`salience.explain.attribute_text`): for BM25, its
  :meth:`~salience.search.BM25.score_texts` with the collection's statistics held fixed; for
  a dense scorer, its similarity to the query.

The words' attributions summed per index term are compared with the exact contributions:
the two agree on which query terms matter when the black box is faithful. They are not
equal: removing a word also shortens the document, which BM25's length normalisation
rewards, and the Shapley value spreads that effect over all words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution
from salience.explain.text import attribute_text

__all__ = ["SearchExplanation", "explain_search", "attribute_document", "verify_search_explanation"]

#: joins a document's fields into one text to attribute (not a word: never masked)
FIELD_SEPARATOR = "\n\u2029\n"


def attribute_document(score_texts: Callable, query: str, text: str, **options) -> Attribution:
    """Attribute ``score_texts(query, [text])[0]`` to the words of ``text`` (any scorer of a
    query against texts; ``options`` go to :func:`~salience.explain.attribute_text`)."""
    if not callable(score_texts):
        raise InvalidParameterError("score_texts must be a callable (query, texts) -> one score per text.")
    return attribute_text(lambda texts: score_texts(query, texts), text, **options)


@dataclass
class SearchExplanation:
    """Both answers for one (query, document): ``exact`` (BM25's
    :class:`~salience.search.bm25.Explanation`), ``attribution`` (the words of ``field``),
    ``term_attribution`` (the words' attributions summed per query term) and ``agreement``
    (Spearman correlation of the exact contributions and the summed attributions over the
    query terms, None with fewer than two terms)."""

    query: str
    doc_id: str
    field: str
    score: float
    exact: object
    attribution: Attribution
    term_attribution: dict = field(default_factory=dict)
    agreement: float | None = None

    def to_dict(self) -> dict:
        return {"query": self.query, "doc_id": self.doc_id, "field": self.field, "score": self.score,
                "terms": [{**t.__dict__, "attribution": self.term_attribution.get(t.term, 0.0)} for t in self.exact.terms],
                "agreement": self.agreement, "method": self.attribution.method,
                "model_calls": self.attribution.model_calls,
                "words": [{"word": w, "start": int(s), "end": int(e), "attribution": float(v)}
                          for w, (s, e), v in zip(self.attribution.feature_names, self.attribution.info["spans"],
                                                 self.attribution.values[0])]}


def _document_scorer(index, doc_id: str, field: str | None):
    """(score_texts(query, texts), the document's explained text, the fields explained): the
    explained fields travel as one text, joined by U+2029, scored with the others as stored."""
    stored = index.document(doc_id)
    if field is not None and field not in index.fields_:
        raise InvalidParameterError(f"field {field!r} is not one of the index's fields ({', '.join(index.fields_)}).")
    texts = {name: stored[name] for name in index.fields_ if isinstance(stored.get(name), str)}
    if not texts or (field is not None and field not in texts):
        raise InvalidParameterError(f"document {doc_id!r} has no stored text to attribute: index with "
                                    "store_documents=True.")
    explained = [field] if field is not None else list(texts)
    if any(FIELD_SEPARATOR in texts[name] for name in explained):
        raise InvalidParameterError(f"document {doc_id!r} holds the field separator U+2029: explain one field= at a time.")
    others = {name: value for name, value in texts.items() if name not in explained}

    def score_texts(q, joined_texts):
        return index.score_texts(q, [{**others, **dict(zip(explained, t.split(FIELD_SEPARATOR)))} for t in joined_texts])

    return score_texts, FIELD_SEPARATOR.join(texts[name] for name in explained), explained


def verify_search_explanation(index, query: str, doc_id: str, *, field: str | None = None, method: str = "kernel_shap",
                              n_samples: int | None = None, seed: int | None = 0, verifier=None):
    """Was the words' attribution real? :func:`explain_search`'s attribution of ``doc_id``'s
    words verified by the document's own BM25 score for ``query`` as its top-attributed words
    are deleted, against random orders (the ``features`` verifier; ``verifier``: one built with
    other protocol parameters). Returns the :class:`~salience.core.verify.Verification`."""
    from salience.core.base import create
    from salience.explain.text import masked_texts

    explanation = explain_search(index, query, doc_id, field=field, method=method, n_samples=n_samples, seed=seed)
    score_texts, text, _ = _document_scorer(index, doc_id, field)
    spans = explanation.attribution.info["spans"]

    def score_of(rows) -> np.ndarray:
        return np.asarray(score_texts(query, masked_texts(text, spans, np.atleast_2d(rows) > 0.5, "")), dtype=float)

    verifier = verifier or create("verify", "features", seed=seed)
    result = verifier.verify(explanation.attribution.values[0], model=score_of, x=np.ones(len(spans)),
                             baseline=np.zeros(len(spans)))
    result.unit, result.method = "features (words)", method
    return result


def explain_search(index, query: str, doc_id: str, *, field: str | None = None, method: str = "kernel_shap",
                   n_samples: int | None = None, seed: int | None = 0, **options) -> SearchExplanation:
    """Explain ``doc_id``'s BM25 score for ``query`` both ways (see the module docstring). The
    words of the document's stored fields (or of ``field`` alone, the others kept as they
    are) are attributed. Needs an index built with ``store_documents=True``."""
    exact = index.explain(query, doc_id)
    score_texts, text, explained = _document_scorer(index, doc_id, field)
    attribution = attribute_document(score_texts, query, text, method=method, n_samples=n_samples, seed=seed, **options)
    # each word's index term (none for a stop word); the words of a query term add up
    query_terms = {t.term for t in exact.terms}
    per_term: dict[str, float] = {term: 0.0 for term in query_terms}
    for word, value in zip(attribution.feature_names, attribution.values[0]):
        for term in index.index_terms(word):
            if term in per_term:
                per_term[term] += float(value)
    agreement = None
    if len(exact.terms) >= 2:
        from salience.core.correlation import spearman_rho

        contributions = [t.contribution for t in exact.terms]
        summed = [per_term[t.term] for t in exact.terms]
        if np.ptp(contributions) > 0 and np.ptp(summed) > 0:
            agreement = float(spearman_rho(contributions, summed))
    return SearchExplanation(query, str(doc_id), ",".join(explained), exact.score, exact, attribution, per_term, agreement)

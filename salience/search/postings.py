"""Documents to postings, the part every BM25 build shares (in memory, bounded, sharded):
tokenizing a shard of texts in a worker with a vocabulary of its own, mapping that vocabulary
onto the index's, and the field-weighted term counts and lengths of a batch."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from salience.text.tokenize import TermEncoder

__all__ = ["encode_shard", "in_vocabulary", "field_counts"]

Encoded = list[tuple[np.ndarray, np.ndarray]]  # per field: (term ids, document positions)


def encode_shard(args) -> tuple[list[str], Encoded]:
    """A worker's job: ``(tokenizer, texts per field)`` tokenized with a vocabulary of its own;
    returns that vocabulary's terms and each field's (term ids, document positions)."""
    tokenizer, texts_by_field = args
    encoder = TermEncoder(tokenizer)
    return encoder.terms, [encoder.encode_batch(texts, grow=True) for texts in texts_by_field]


def in_vocabulary(encoder: TermEncoder, terms: list[str], fields: Encoded) -> Encoded:
    """A worker's term ids mapped onto ``encoder``'s vocabulary (its new terms added in order)."""
    to_global = np.array([encoder.add_term(t) for t in terms], dtype=np.int32)
    return [(to_global[term_ids] if len(term_ids) else term_ids, doc_index) for term_ids, doc_index in fields]


def field_counts(fields: tuple[str, ...], weights: dict[str, float], encoded: Encoded, n_docs: int,
                 n_terms: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """(terms x documents field-weighted term counts, float32 document lengths) of a batch of
    ``n_docs`` documents from each field's (term ids, document positions)."""
    rows, cols, values = [], [], []
    doc_len = np.zeros(n_docs, dtype=np.float64)
    for name, (term_ids, doc_index) in zip(fields, encoded):
        w = weights[name]
        rows.append(term_ids)
        cols.append(doc_index)
        values.append(np.full(len(term_ids), w, dtype=np.float32))
        doc_len += w * np.bincount(doc_index, minlength=n_docs)
    counts = sp.coo_matrix(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(n_terms, n_docs)
    ).tocsr()
    counts.sum_duplicates()
    return counts, doc_len.astype(np.float32)
